package chdb

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// A non-replicated MergeTree table with non_replicated_deduplication_window
// keeps the block ids of its last inserts (insert_deduplication_token's
// hash, or the data's) in DIR/deduplication_logs/deduplication_log_N.txt,
// one line per record: "1\tPART\tBLOCK_ID" when a part was added, and
// "2\tPART\tBLOCK_ID" when it was dropped. The engine writes the add record
// before it renames the new part into place, and loads every record at
// start without looking for the part. An engine killed between the two
// (SIGKILL, a crash, the collector's death) therefore restarts with a block
// id whose part does not exist: every retry of that insert, which the
// promoter relies on to complete an interrupted window, is then dropped as
// a duplicate, and the rows are never stored (measured with the kill test
// in collector/cmd/itlmon: a window of itl_streams lost).
//
// reconcileDedupLogs repairs that while the engine is down: for every block
// id whose last record adds a part that no part on disk covers, it appends
// a drop record, which the engine applies when it loads the log. A part
// merged or mutated since still covers its blocks (same partition, block
// range within), so those ids stay. It returns the number of ids dropped.
func reconcileDedupLogs(root string) (int, error) {
	logDirs, err := filepath.Glob(filepath.Join(root, "store", "*", "*", "deduplication_logs"))
	if err != nil {
		return 0, err
	}
	dropped := 0
	for _, dir := range logDirs {
		n, err := reconcileTable(filepath.Dir(dir), dir)
		dropped += n
		if err != nil {
			return dropped, fmt.Errorf("chdb: reconcile %s: %w", dir, err)
		}
	}
	return dropped, nil
}

// partRange is a part's partition and block range.
type partRange struct {
	partition string
	min, max  int64
}

// parsePart parses PARTITION_MIN_MAX_LEVEL[_MUTATION]. Partition ids hold
// no '_' (a date, values joined by '-', or a hash).
func parsePart(name string) (partRange, bool) {
	f := strings.Split(name, "_")
	if len(f) != 4 && len(f) != 5 {
		return partRange{}, false
	}
	var nums [4]int64
	for i, s := range f[1:] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return partRange{}, false
		}
		nums[i] = n
	}
	if f[0] == "" || nums[0] > nums[1] {
		return partRange{}, false
	}
	return partRange{f[0], nums[0], nums[1]}, true
}

func reconcileTable(tableDir, logDir string) (int, error) {
	entries, err := os.ReadDir(tableDir)
	if err != nil {
		return 0, err
	}
	var parts []partRange
	for _, e := range entries {
		if p, ok := parsePart(e.Name()); ok && e.IsDir() {
			parts = append(parts, p)
		}
	}
	covered := func(p partRange) bool {
		for _, q := range parts {
			if q.partition == p.partition && q.min <= p.min && p.max <= q.max {
				return true
			}
		}
		return false
	}
	logs, err := filepath.Glob(filepath.Join(logDir, "deduplication_log_*.txt"))
	if err != nil || len(logs) == 0 {
		return 0, err
	}
	number := func(path string) int64 {
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "deduplication_log_"), ".txt"), 10, 64)
		return n
	}
	sort.Slice(logs, func(i, j int) bool { return number(logs[i]) < number(logs[j]) })
	// The state of each block id after every log, oldest first: the
	// engine's own replay.
	type added struct{ part string }
	state := map[string]added{}
	var order []string
	for _, path := range logs {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, err
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 0, 4096), 1<<20)
		for sc.Scan() {
			f := strings.Split(sc.Text(), "\t")
			if len(f) != 3 {
				continue // a torn last line: the engine stops there too
			}
			switch f[0] {
			case "1":
				if _, ok := state[f[2]]; !ok {
					order = append(order, f[2])
				}
				state[f[2]] = added{f[1]}
			case "2":
				delete(state, f[2])
			}
		}
	}
	var drops bytes.Buffer
	n := 0
	for _, id := range order {
		a, ok := state[id]
		if !ok {
			continue
		}
		if p, ok := parsePart(a.part); ok && !covered(p) {
			fmt.Fprintf(&drops, "2\t%s\t%s\n", a.part, id)
			n++
		}
	}
	if n == 0 {
		return 0, nil
	}
	last := logs[len(logs)-1]
	if err := appendSynced(last, drops.Bytes()); err != nil {
		return 0, err
	}
	return n, nil
}

// appendSynced appends p to path, after a newline if the file ends in a
// torn line, and fsyncs it.
func appendSynced(path string, p []byte) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, st.Size()-1); err == nil && last[0] != '\n' {
			p = append([]byte{'\n'}, p...)
		}
	}
	if _, err := f.Write(p); err != nil {
		return err
	}
	return f.Sync()
}
