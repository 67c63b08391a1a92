package scenario

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/gorilla/websocket"

	"github.com/itlmon/itlmon/collector/internal/itlmontest"
	"github.com/itlmon/itlmon/internal/poll"
	"github.com/itlmon/itlmon/origin"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// killRoundsEnv sets the number of kills of TestKillHuntsTheCut (default
// defaultKillRounds), for longer runs by hand.
const killRoundsEnv = "ITLMON_KILL_ROUNDS"

const defaultKillRounds = 16

// promoterTables are the tables the promoter inserts into (the rollups are
// filled by their materialized views within those inserts).
var promoterTables = []string{"itl_streams", "itl_timelines", "itl_origin", "itl_promoted_ids", "itl_promoted"}

// TestKillHuntsTheCut SIGKILLs the collector (a real process; its engine
// dies with it) or only its engine (the collector restarts it), in turn,
// defaultKillRounds times (ITLMON_KILL_ROUNDS for longer runs), each time at
// the moment an INSERT runs: it polls the engine's system.processes and
// kills as soon as an insert into itl_inbox (or, every other time, into one
// of the promoter's tables) shows, at once or a few milliseconds into it.
// Meanwhile pages stream records over WebSockets and resend every
// unacknowledged batch after a reconnect, as the browser module does; a
// third of the streams have origin timelines, POSTed (and POSTed again until
// a 204) to /v1/origin. After the last kill every acked record reaches the
// inbox (the last collector replays its spool) and is promoted; then every
// acked record is in itl_streams, itl_promoted_ids and (if it has a
// timeline) itl_timelines exactly once, read without FINAL, and no record,
// acked or not, is there twice (their merges, which would fold a doubled row,
// are stopped and checked); itl_origin holds each acked origin timeline once
// per version and every acked pair joined; the rollups equal the same sums
// over the rows they roll up (itl_rollup_1m, itl_rollup_1m_site,
// itl_rollup_1h, itl_rollup_1h_dim and itl_rollup_1d_dim over itl_streams,
// itl_origin_1m over itl_origin FINAL, version 1). The figures are logged.
func TestKillHuntsTheCut(t *testing.T) {
	t.Parallel()
	lib := itlmontest.ChdbLib(t)
	rounds := defaultKillRounds
	if v := os.Getenv(killRoundsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", killRoundsEnv, v)
		}
		rounds = n
	}
	data := t.TempDir()
	serve := func() *itlmontest.Proc {
		return itlmontest.StartProcess(t, lib, data, "--site", "chat="+itlmontest.PageOrigin, "--origin-key", "chat="+originKey)
	}
	var cur atomic.Pointer[itlmontest.Proc]
	procs := []*itlmontest.Proc{serve()}
	cur.Store(procs[0])
	stopMerges(t, procs[0].Native)

	// The pages: site test (records with and without a timeline) and site
	// chat (records whose origin timeline an origin reporter sends).
	const run = 77
	stop := make(chan struct{})
	var pages []*killPage
	var reporters []*originReporter
	var wg sync.WaitGroup
	for i := range 6 {
		pg := &killPage{id: uint32(i), site: "test", cur: &cur, sent: map[[16]byte]beacon.Record{}}
		if i >= 4 {
			r := &originReporter{cur: &cur, acked: map[string]bool{}}
			reporters = append(reporters, r)
			pg.site, pg.origins = "chat", r
			wg.Add(1)
			go func() { defer wg.Done(); r.run(stop) }()
		}
		pages = append(pages, pg)
		wg.Add(1)
		go func() { defer wg.Done(); pg.run(run, stop) }()
	}

	// The hunt.
	var kills []killEvent
	for round := range rounds {
		// sleep: random on purpose, the kill lands at a moment of the real
		// process and engine the test does not choose.
		time.Sleep(time.Duration(200+rand.IntN(800)) * time.Millisecond) // let the pages stream
		p := cur.Load()
		k := killEvent{engine: round%2 == 1, hunted: [...]string{"inbox", "inbox", "promoter", "promoter"}[round%4]}
		// Half the engine's deaths are its own abort (SIGABRT, what an
		// uncaught exception ends in): the engine's fatal-signal handler
		// reports it while its other threads still run, and refuses
		// statements meanwhile ("shutting down due to a fatal error"),
		// unlike an outright kill.
		k.signal = syscall.SIGKILL
		if k.engine && round%8 >= 4 {
			k.signal = syscall.SIGABRT
		}
		tables := []string{"itl_inbox"}
		if k.hunted == "promoter" {
			tables = promoterTables
		}
		engine := 0
		if k.engine {
			engine = itlmontest.EnginePID(t, p.Cmd.Process.Pid)
		}
		k.hit = huntInsert(t, p.EngineAddr(), tables, 20*time.Second)
		if round%3 != 0 && k.hit != "" {
			// Into the insert, not only at its start: its part commit,
			// its views' parts and the next table's insert come later.
			time.Sleep(time.Duration(rand.IntN(15_000)) * time.Microsecond) // sleep: random on purpose, into the insert
		}
		k.at = time.Now()
		if k.engine {
			if err := syscall.Kill(engine, k.signal); err != nil {
				t.Fatalf("kill engine %d (%v): %v", engine, k.signal, err)
			}
			waitEngine(t, p, engine)
		} else {
			p.Kill(t)
			procs = append(procs, serve())
			cur.Store(procs[len(procs)-1])
		}
		kills = append(kills, k)
	}

	// Drain: no new records; every page and reporter resends until acked.
	close(stop)
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(3 * time.Minute):
		t.Fatal("pages did not get their last batches acked within 3 minutes of the last kill")
	}
	p := cur.Load()
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{p.EngineAddr()}, Auth: clickhouse.Auth{Database: "itlmon"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Acked means in the inbox or in a collector's spool, which the last
	// collector replays after its engine was down: wait until every acked
	// record reached the inbox, then until it is promoted.
	want := map[inboxKey]bool{}
	for _, pg := range pages {
		for id := range pg.acked {
			want[inboxKey{"client", string(id[:])}] = true
		}
	}
	for _, r := range reporters {
		for id := range r.acked {
			want[inboxKey{"origin", id}] = true
		}
	}
	waitInbox(t, conn, want, 2*time.Minute)
	itlmontest.WaitPromoted(t, conn)
	var merged string
	itlmontest.QueryRow(t, conn, "SELECT toString(groupArray(table)) FROM system.parts WHERE database = 'itlmon' AND active AND min_block_number < max_block_number AND table IN ("+noMerges+")", &merged)
	if merged != "[]" {
		t.Fatalf("parts of %s were merged with others: a merge may have hidden a doubled row", merged)
	}

	// The figures.
	hits := map[string]int{}
	engineKills, blind := 0, 0
	for _, k := range kills {
		if k.engine {
			engineKills++
		}
		if k.hit == "" {
			blind++
		} else {
			hits[k.hit]++
		}
	}
	var acked, timed, sentRecs, resentBatches, resentRecs, reconnects int
	for _, pg := range pages {
		acked += len(pg.acked)
		sentRecs += len(pg.sent)
		resentBatches += pg.resentBatches
		resentRecs += pg.resentRecords
		reconnects += pg.reconnects
		for id := range pg.acked {
			if len(pg.sent[id].Timeline) > 0 {
				timed++
			}
		}
	}
	var originsAcked, originsSent, originRetries int
	for _, r := range reporters {
		originsAcked += len(r.acked)
		originsSent += r.sent
		originRetries += r.retries
	}
	t.Logf("%d kills (%d of the collector, %d of its engine alone): %d while an insert ran (%v), %d found none within 20 s",
		len(kills), len(kills)-engineKills, engineKills, len(kills)-blind, hits, blind)
	t.Logf("pages: %d records sent, %d acked (%d with a timeline); %d reconnects, %d batches (%d records) resent unacked",
		sentRecs, acked, timed, reconnects, resentBatches, resentRecs)
	t.Logf("origin reporters: %d timelines sent, %d acked; %d POSTs retried", originsSent, originsAcked, originRetries)
	for _, pg := range pages {
		if pg.refused > 0 {
			t.Errorf("page %d: %d batches refused (not a retry), want none", pg.id, pg.refused)
		}
	}
	if acked == 0 || originsAcked == 0 {
		t.Fatalf("%d records and %d origin timelines acked: the kills left nothing to check", acked, originsAcked)
	}

	// Exactly once, read as docs/reference.md tells users to (no FINAL on
	// itl_streams, itl_timelines, the ids and the rollups).
	streams := itlmontest.CountByID(t, conn, "SELECT stream_id, count() FROM itl_streams GROUP BY stream_id")
	timelines := itlmontest.CountByID(t, conn, "SELECT stream_id, count() FROM itl_timelines GROUP BY stream_id")
	ids := itlmontest.CountByID(t, conn, "SELECT stream_id, count() FROM itl_promoted_ids WHERE kind = 'client' GROUP BY stream_id")
	for name, m := range map[string]map[string]int{"itl_streams": streams, "itl_timelines": timelines, "itl_promoted_ids (client)": ids} {
		for id, n := range m {
			if n > 1 {
				t.Errorf("%s: stream %x stored %d times", name, id, n)
			}
		}
	}
	missing := map[string]int{}
	var lost []string       // acked, not in itl_streams
	var noTimeline []string // acked with a timeline, not in itl_timelines
	for _, pg := range pages {
		for id := range pg.acked {
			k := string(id[:])
			if streams[k] != 1 {
				missing["itl_streams"]++
				if streams[k] == 0 {
					lost = append(lost, fmt.Sprintf("'%X'", k))
				}
			}
			if ids[k] != 1 {
				missing["itl_promoted_ids"]++
			}
			if len(pg.sent[id].Timeline) > 0 && timelines[k] != 1 {
				missing["itl_timelines"]++
				if timelines[k] == 0 {
					noTimeline = append(noTimeline, fmt.Sprintf("'%X'", k))
				}
			}
		}
	}
	for table, n := range missing {
		t.Errorf("%s: %d acked records not stored exactly once", table, n)
	}
	if len(lost) > 0 {
		explainLost(t, conn, lost[:min(len(lost), 3000)])
	}
	if len(noTimeline) > 0 {
		var byWindow string
		itlmontest.QueryRow(t, conn, `SELECT toString(groupArray((w, n, (SELECT count() FROM itl_promoted_ids WHERE kind = 'client' AND promoted_window = w))))
			FROM (SELECT promoted_window AS w, count() AS n FROM itl_promoted_ids WHERE kind = 'client' AND hex(stream_id) IN (`+
			strings.Join(noTimeline[:min(len(noTimeline), 3000)], ",")+`) GROUP BY w ORDER BY w)`, &byWindow)
		t.Logf("acked records missing from itl_timelines, by the window that promoted them (window, missing, records the window promoted): %s", byWindow)
	}
	ghosts, repaired, entries := dedupGhosts(t, conn)
	t.Logf("deduplication logs: %d promoter tokens; %d recorded without their part and dropped before a restart, %d left (a retry with such a token is dropped as a duplicate)",
		entries, repaired, len(ghosts))
	if t.Failed() {
		for _, g := range ghosts {
			t.Logf("ghost: %s", g)
		}
		t.Logf("kills: %s", strings.Join(kills2str(kills), "; "))
		for i, p := range procs {
			for _, l := range p.Warnings() {
				t.Logf("collector %d: %s", i+1, l)
			}
		}
	}

	// Origin timelines: once per version (the join adds version 1), each
	// acked pair joined.
	originVersions := itlmontest.CountByID(t, conn, "SELECT concat(origin_id, '/', toString(version)), count() FROM itl_origin GROUP BY origin_id, version")
	for k, n := range originVersions {
		if n > 1 {
			t.Errorf("itl_origin: %s stored %d times", k, n)
		}
	}
	originIDs := itlmontest.CountByID(t, conn, "SELECT stream_id, count() FROM itl_promoted_ids WHERE kind = 'origin' GROUP BY stream_id")
	final := itlmontest.CountByID(t, conn, "SELECT concat(origin_id, '/', toString(version)), count() FROM itl_origin FINAL GROUP BY origin_id, version")
	var notOnce, notJoined int
	for _, r := range reporters {
		for id := range r.acked {
			if originIDs[id] != 1 || final[id+"/0"]+final[id+"/1"] != 1 {
				notOnce++
			}
		}
	}
	for _, pg := range pages[4:] {
		for sid := range pg.acked {
			oid := pg.sent[sid].OriginID
			if pg.origins.isAcked(oid) && final[oid+"/1"] != 1 {
				notJoined++
			}
		}
	}
	if notOnce > 0 {
		t.Errorf("%d acked origin timelines not stored exactly once (itl_promoted_ids, itl_origin FINAL)", notOnce)
	}
	if notJoined > 0 {
		t.Errorf("%d streams whose client record and origin timeline were both acked are not joined (itl_origin FINAL version 1)", notJoined)
	}

	// The rollups: an aggregate over what they roll up.
	const causes = `%s, %s(stalls), %s(stalled_us),
		%s(stalls_unknown), %s(stalls_network), %s(stalls_page), %s(stalls_origin),
		%s(stalled_us_unknown), %s(stalled_us_network), %s(stalled_us_page), %s(stalled_us_origin)`
	sums := func(count, sum string) string {
		return fmt.Sprintf(causes, count, sum, sum, sum, sum, sum, sum, sum, sum, sum, sum)
	}
	var raw string
	itlmontest.QueryRow(t, conn, "SELECT toString(tuple("+sums("toUInt64(count())", "sum")+
		", countIf(ttft_cause = 'unknown'), countIf(ttft_cause = 'network'), countIf(ttft_cause = 'page'), countIf(ttft_cause = 'origin'))) FROM itl_streams", &raw)
	// The minute rollups, the hourly one, and the per-dimension hourly and
	// daily ones (every stream is under dim '' once; 010's and 013's views,
	// each fed by the one before).
	for _, from := range []string{"itl_rollup_1m", "itl_rollup_1m_site", "itl_rollup_1h", "itl_rollup_1h_dim WHERE dim = ''", "itl_rollup_1d_dim WHERE dim = ''"} {
		var rollup string
		itlmontest.QueryRow(t, conn, "SELECT toString(tuple("+sums("sum(streams)", "sum")+
			", sum(ttft_unknown), sum(ttft_network), sum(ttft_page), sum(ttft_origin))) FROM "+from, &rollup)
		t.Logf("%s (streams, stalls, stalled_us, stalls and stalled_us by cause, ttft by cause) = %s", from, rollup)
		if rollup != raw {
			t.Errorf("%s = %s, want %s (the same sums over itl_streams)", from, rollup, raw)
		}
	}
	const originCauses = `%s, %s(stalls_unknown), %s(stalls_network), %s(stalls_page), %s(stalls_origin),
		%s(stalled_us_unknown), %s(stalled_us_network), %s(stalled_us_page), %s(stalled_us_origin)`
	osums := func(count, sum string) string {
		return fmt.Sprintf(originCauses, count, sum, sum, sum, sum, sum, sum, sum, sum)
	}
	var orollup, oraw string
	itlmontest.QueryRow(t, conn, "SELECT toString(tuple("+osums("sum(streams)", "sum")+")) FROM itl_origin_1m", &orollup)
	itlmontest.QueryRow(t, conn, "SELECT toString(tuple("+osums("toUInt64(count())", "sum")+")) FROM itl_origin FINAL WHERE version = 1", &oraw)
	t.Logf("itl_origin_1m (streams, stalls and stalled_us by cause) = %s", orollup)
	if orollup != oraw {
		t.Errorf("itl_origin_1m = %s, want %s (the same sums over itl_origin FINAL, version 1)", orollup, oraw)
	}
	var joined, refined, inboxCopies uint64
	var lateMs string
	itlmontest.QueryRow(t, conn, "SELECT count(), countIf(in_streams) FROM itl_origin FINAL WHERE version = 1", &joined, &refined)
	itlmontest.QueryRow(t, conn, `SELECT toString(quantiles(0.5, 0.9, 0.99)(dateDiff('millisecond', c.at, o.at)))
		FROM (SELECT origin_id, min(ingested_at) AS at FROM itl_inbox WHERE kind = 'client' GROUP BY origin_id) AS c
		JOIN (SELECT origin_id, min(ingested_at) AS at FROM itl_inbox WHERE kind = 'origin' GROUP BY origin_id) AS o USING origin_id`, &lateMs)
	itlmontest.QueryRow(t, conn, "SELECT toUInt64(count() - uniqExact(kind, site, stream_id)) FROM itl_inbox", &inboxCopies)
	t.Logf("joined %d, %d of them refined in itl_streams (origin timeline within the hold of its client record; its delay after the client record p50/p90/p99 ms: %s)",
		joined, refined, lateMs)
	var windows, inboxWindows, copies uint64
	itlmontest.QueryRow(t, conn, "SELECT uniqExact(promoted_window), toUInt64(sum(copies)) FROM itl_promoted", &windows, &copies)
	itlmontest.QueryRow(t, conn, "SELECT uniqExact(toDateTime(ingested_at)) FROM itl_inbox", &inboxWindows)
	if windows != inboxWindows {
		t.Errorf("%d windows promoted, %d windows hold inbox rows", windows, inboxWindows)
	}
	t.Logf("promoted: %d windows; %d copies in itl_inbox (resends and replays that landed twice), %d dropped by the promoter", windows, inboxCopies, copies)
}

// noMerges are the tables whose merges could hide a doubled row (their
// engines replace rows by key): the test stops their merges.
const noMerges = "'itl_streams', 'itl_timelines', 'itl_promoted_ids', 'itl_origin'"

// stopMerges stops the merges of the noMerges tables for good (a part
// larger than 1 byte is never merged), so a row stored twice stays twice.
// The promoter's deduplication does not depend on merges.
func stopMerges(t *testing.T, addr string) {
	t.Helper()
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, Auth: clickhouse.Auth{Database: "itlmon"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, table := range strings.Split(noMerges, ", ") {
		q := "ALTER TABLE " + strings.Trim(table, "'") +
			" MODIFY SETTING max_bytes_to_merge_at_max_space_in_pool = 1, max_bytes_to_merge_at_min_space_in_pool = 1"
		if err := conn.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// dedupGhosts reads the deduplication logs of the noMerges tables (plain
// MergeTree keeps the block ids, hashes of the tokens, of the last inserts
// in files next to the parts, deduplication_logs/deduplication_log_N.txt:
// "1\tpart\tblock_id" per insert; only the promoter inserts into these
// tables with tokens) and returns the entries whose part is not one of the
// table's (those followed by a drop record were repaired by the collector
// before the engine restarted: counted apart):
// the token was recorded and the part was not committed (a kill between
// the two), so every retry with that token is dropped as a duplicate.
func dedupGhosts(t *testing.T, conn driver.Conn) (ghosts []string, repaired, entries int) {
	t.Helper()
	for _, quoted := range strings.Split(noMerges, ", ") {
		table := strings.Trim(quoted, "'")
		var paths []string
		itlmontest.QueryRow(t, conn, "SELECT data_paths FROM system.tables WHERE database = 'itlmon' AND name = "+quoted, &paths)
		parts := map[string]bool{} // partition_min_max of every part, any level
		rows, err := conn.Query(t.Context(), "SELECT name FROM system.parts WHERE database = 'itlmon' AND table = ?", table)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var name string
			rows.Scan(&name)
			parts[name[:strings.LastIndexByte(name, '_')]] = true
		}
		rows.Close()
		for _, dir := range paths {
			logs, _ := filepath.Glob(filepath.Join(dir, "deduplication_logs", "deduplication_log_*.txt"))
			sort.Slice(logs, func(i, j int) bool {
				return len(logs[i]) < len(logs[j]) || len(logs[i]) == len(logs[j]) && logs[i] < logs[j]
			})
			last := map[string][]string{} // block id: its last record
			var order []string
			for _, l := range logs {
				b, err := os.ReadFile(l)
				if err != nil {
					t.Fatal(err)
				}
				for _, line := range strings.Split(string(b), "\n") {
					f := strings.Split(line, "\t")
					if len(f) != 3 || f[0] != "1" && f[0] != "2" {
						continue
					}
					if f[0] == "1" {
						entries++
						order = append(order, f[2])
					}
					last[f[2]] = f
				}
			}
			for _, id := range order {
				f := last[id]
				if f == nil || parts[f[1][:strings.LastIndexByte(f[1], '_')]] {
					continue
				}
				delete(last, id)
				if f[0] == "2" {
					repaired++ // the collector dropped it before the engine's restart
					continue
				}
				ghosts = append(ghosts, fmt.Sprintf("%s: part %s, block id %s", table, f[1], f[2]))
			}
		}
	}
	return ghosts, repaired, entries
}

// inboxKey is a record's identity in itl_inbox.
type inboxKey struct{ kind, id string }

// waitInbox waits until itl_inbox holds every record of want.
func waitInbox(t *testing.T, conn driver.Conn, want map[inboxKey]bool, timeout time.Duration) {
	t.Helper()
	// The real engine, after the collector's restart.
	missing := 0
	if !poll.Until(timeout, 500*time.Millisecond, func() bool {
		rows, err := conn.Query(t.Context(), "SELECT DISTINCT kind, stream_id FROM itl_inbox")
		if err != nil {
			t.Fatal(err)
		}
		have := map[inboxKey]bool{}
		for rows.Next() {
			var k inboxKey
			if err := rows.Scan(&k.kind, &k.id); err != nil {
				t.Fatal(err)
			}
			have[k] = true
		}
		rows.Close()
		missing = 0
		for k := range want {
			if !have[k] {
				missing++
			}
		}
		return missing == 0
	}) {
		t.Fatalf("%d acked records not in itl_inbox %v after the last kill", missing, timeout)
	}
}

// explainLost logs where the acked records missing from itl_streams are:
// in itl_inbox or not, by window, and what itl_promoted says of those
// windows, next to the kills.
func explainLost(t *testing.T, conn driver.Conn, hexIDs []string) {
	t.Helper()
	rows, err := conn.Query(t.Context(), `SELECT toString(tuple(w, n, ids,
			(SELECT count() FROM itl_inbox WHERE toDateTime(ingested_at) = w),
			(SELECT groupArray((promoted_at, records, streams, origins, copies)) FROM itl_promoted WHERE promoted_window = w),
			(SELECT max(promoted_window) FROM itl_promoted WHERE promoted_window < w),
			(SELECT min(promoted_window) FROM itl_promoted WHERE promoted_window > w)))
		FROM (SELECT toDateTime(ingested_at) AS w, count() AS n, uniqExact(stream_id) AS ids FROM itl_inbox
			WHERE hex(stream_id) IN (`+strings.Join(hexIDs, ",")+`) GROUP BY w) ORDER BY w`)
	if err != nil {
		t.Errorf("explain: %v", err)
		return
	}
	defer rows.Close()
	found := 0
	for rows.Next() {
		var line string
		rows.Scan(&line)
		t.Logf("lost records by inbox window (window, their rows, distinct, rows of the window, itl_promoted rows of it (promoted_at, records, streams, origins, copies), promoted window before, after): %s", line)
		found++
	}
	if found == 0 {
		t.Logf("none of the %d lost records is in itl_inbox", len(hexIDs))
	}
}

// killEvent is one SIGKILL of the hunt.
type killEvent struct {
	engine bool           // the engine alone, else the collector (and its engine)
	signal syscall.Signal // what the engine alone got: SIGKILL or SIGABRT
	hunted string         // "inbox" or "promoter"
	hit    string         // the table whose insert was running, "" if none showed
	at     time.Time
}

func kills2str(ks []killEvent) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		who := "collector"
		if k.engine && k.signal == syscall.SIGABRT {
			who = "engine (abort)"
		} else if k.engine {
			who = "engine"
		}
		out[i] = fmt.Sprintf("%s %s in %s", k.at.UTC().Format("15:04:05.000"), who, cmp.Or(k.hit, "(none)"))
	}
	return out
}

// killPage is a page's module: it sends batches of new records over a
// WebSocket to the current collector and, after every reconnect, resends
// every batch not yet acknowledged, in order.
type killPage struct {
	id      uint32
	site    string
	cur     *atomic.Pointer[itlmontest.Proc]
	origins *originReporter // site chat: each record's origin timeline goes there

	n       uint32
	seq     uint64
	unacked []killBatch
	sent    map[[16]byte]beacon.Record
	acked   map[[16]byte]bool

	reconnects, resentBatches, resentRecords, refused int
}

type killBatch struct {
	seq   uint64
	recs  []beacon.Record
	frame []byte
}

// run sends until stop closes, then until every batch is acked.
func (pg *killPage) run(run uint32, stop <-chan struct{}) {
	pg.acked = map[[16]byte]bool{}
	acks := make(chan beacon.Ack, 64)
	for {
		c := pg.dial()
		if c == nil {
			select {
			case <-stop:
				if len(pg.unacked) == 0 {
					return
				}
			default:
			}
			time.Sleep(100 * time.Millisecond) // sleep: the page redials a collector being restarted, as a browser does
			continue
		}
		dead, quit := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(dead)
			for {
				_, msg, err := c.ReadMessage()
				if err != nil {
					return
				}
				if a, err := beacon.DecodeAck(msg); err == nil {
					select {
					case acks <- a:
					case <-quit: // an ack left unread: its batch is resent
						return
					}
				}
			}
		}()
		ok := true
		for _, b := range pg.unacked {
			if c.WriteMessage(websocket.BinaryMessage, b.frame) != nil {
				ok = false
				break
			}
			pg.resentBatches++
			pg.resentRecords += len(b.recs)
		}
		tick := time.NewTicker(time.Duration(50+rand.IntN(100)) * time.Millisecond)
		stopping := stop
		for ok {
			select {
			case <-tick.C:
				if stopping == nil {
					if len(pg.unacked) == 0 {
						ok = false
					}
					continue
				}
				if c.WriteMessage(websocket.BinaryMessage, pg.next(run)) != nil {
					ok = false
				}
			case a := <-acks:
				if !pg.ack(a) {
					ok = false // retry later: reconnect, resend
				}
			case <-stopping:
				stopping = nil
			case <-dead:
				ok = false
			}
		}
		tick.Stop()
		close(quit)
		c.Close()
		<-dead
		for drained := false; !drained; { // acks read before the close count
			select {
			case a := <-acks:
				pg.ack(a)
			default:
				drained = true
			}
		}
		if stopping == nil && len(pg.unacked) == 0 {
			return
		}
	}
}

func (pg *killPage) dial() *websocket.Conn {
	h := http.Header{}
	h.Set("Origin", itlmontest.PageOrigin)
	h.Set("User-Agent", itlmontest.FirefoxUA)
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	c, _, err := d.Dial(itlmontest.WSURL(pg.cur.Load().URL, pg.site), h)
	if err != nil {
		return nil
	}
	pg.reconnects++
	return c
}

// next makes a batch of 1 to 8 new records, queues it as unacked and returns
// its frame.
func (pg *killPage) next(run uint32) []byte {
	recs := make([]beacon.Record, 1+rand.IntN(8))
	for i := range recs {
		pg.n++
		i32 := pg.id<<24 | pg.n
		switch {
		case pg.origins != nil:
			o := pausedOrigin(fmt.Sprintf("kill-%d-%d", pg.id, pg.n))
			recs[i] = joinedRecord(o, run, i32)
			pg.origins.add(o)
		case rand.IntN(2) == 0:
			recs[i] = timedRecord(run, i32)
		default:
			recs[i] = itlmontest.Record(run, i32)
		}
		pg.sent[recs[i].StreamID] = recs[i]
	}
	pg.seq++
	b := beacon.Batch{Seq: pg.seq, Client: beacon.Client{ConnType: "4g", Release: "r1", ModuleVersion: "test"}, Records: recs}
	frame, err := b.AppendBinary(nil)
	if err != nil {
		panic("BUG: encode batch: " + err.Error())
	}
	pg.unacked = append(pg.unacked, killBatch{pg.seq, recs, frame})
	return frame
}

// ack applies a; false when the collector asks for a retry later.
func (pg *killPage) ack(a beacon.Ack) bool {
	i := 0
	for i < len(pg.unacked) && pg.unacked[i].seq != a.Seq {
		i++
	}
	if i == len(pg.unacked) {
		return true
	}
	switch a.Reject {
	case beacon.RejectNone:
		for _, r := range pg.unacked[i].recs {
			pg.acked[r.StreamID] = true
		}
	case beacon.RejectRetry, beacon.RejectOverload:
		return false
	default: // dropped, as the module does: resending cannot help
		pg.refused++
	}
	pg.unacked = append(pg.unacked[:i:i], pg.unacked[i+1:]...)
	return true
}

// originReporter is site chat's origin middleware: it POSTs the timelines
// queued to it (up to 200 a POST) every 100 ms to the current collector,
// and POSTs a batch again until it gets a 204.
type originReporter struct {
	cur *atomic.Pointer[itlmontest.Proc]

	mu      sync.Mutex
	queue   []beacon.Origin
	acked   map[string]bool
	seq     uint64
	sent    int
	retries int
}

func (r *originReporter) add(o beacon.Origin) {
	r.mu.Lock()
	r.queue = append(r.queue, o)
	r.sent++
	r.mu.Unlock()
}

func (r *originReporter) isAcked(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.acked[id]
}

// run reports until stop closes and the queue is empty.
func (r *originReporter) run(stop <-chan struct{}) {
	client := &http.Client{Timeout: 10 * time.Second}
	stopped := false
	for {
		select {
		case <-stop:
			stopped = true
		case <-time.After(100 * time.Millisecond):
		}
		r.mu.Lock()
		n := min(len(r.queue), 200)
		batch := r.queue[:n:n]
		r.mu.Unlock()
		if len(batch) == 0 {
			if stopped {
				return
			}
			continue
		}
		for {
			r.seq++
			body, err := (&beacon.OriginBatch{Seq: r.seq, Site: "chat", Records: batch}).AppendBinary(nil)
			if err != nil {
				panic("BUG: encode origin batch: " + err.Error())
			}
			req, _ := http.NewRequest("POST", r.cur.Load().URL+origin.Path+"?site=chat", bytes.NewReader(body))
			req.Header.Set(origin.HeaderKey, originKey)
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusNoContent {
					break
				}
			}
			r.retries++
			time.Sleep(100 * time.Millisecond) // sleep: retries a collector being killed and restarted, as the origin reporter does
		}
		r.mu.Lock()
		for _, o := range batch {
			r.acked[o.ID] = true
		}
		r.queue = r.queue[len(batch):]
		r.mu.Unlock()
	}
}

// huntInsert polls the engine at addr until an INSERT into one of tables
// is running and returns that table; "" when none showed within timeout.
func huntInsert(t *testing.T, addr string, tables []string, timeout time.Duration) string {
	t.Helper()
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, DialTimeout: 2 * time.Second,
		MaxOpenConns: 1, MaxIdleConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	for ctx.Err() == nil {
		rows, err := conn.Query(ctx, "SELECT query FROM system.processes WHERE query_kind = 'Insert'")
		if err != nil {
			time.Sleep(20 * time.Millisecond) // sleep: the hunt's pace while the engine restarts after the previous kill
			continue
		}
		var hit string
		for rows.Next() {
			var q string
			if rows.Scan(&q) == nil && hit == "" {
				hit = insertTable(q, tables)
			}
		}
		rows.Close()
		if hit != "" {
			return hit
		}
	}
	return ""
}

// insertTable returns the table of an INSERT query if it is one of tables.
func insertTable(query string, tables []string) string {
	f := strings.Fields(query)
	for i := 0; i+2 < len(f); i++ {
		if strings.EqualFold(f[i], "INSERT") && strings.EqualFold(f[i+1], "INTO") {
			name := strings.Trim(f[i+2], "`\"(")
			if j := strings.LastIndexByte(name, '.'); j >= 0 {
				name = name[j+1:]
			}
			for _, tb := range tables {
				if name == tb {
					return tb
				}
			}
			return ""
		}
	}
	return ""
}

// waitEngine waits until the collector p replaced its killed engine (pid
// old) with a new one that answers.
func waitEngine(t *testing.T, p *itlmontest.Proc, old int) {
	t.Helper()
	// Another process restarts its engine.
	if !poll.Until(60*time.Second, 50*time.Millisecond, func() bool {
		if c := itlmontest.EngineChild(p.Cmd.Process.Pid); c == 0 || c == old {
			return false
		}
		conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{p.EngineAddr()}, DialTimeout: time.Second})
		if err != nil {
			return false
		}
		err = conn.Ping(t.Context())
		conn.Close()
		return err == nil
	}) {
		t.Fatalf("collector %d did not restart its engine within 60 s", p.Cmd.Process.Pid)
	}
}
