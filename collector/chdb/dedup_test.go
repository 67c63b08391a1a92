package chdb

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReconcileDedupLogs: a block id whose part is on disk, or covered by a
// part merged from it, stays; one whose part never reached the disk (the
// engine killed between the log record and the rename) gets a drop record;
// an id dropped already is left alone; a second run changes nothing.
func TestReconcileDedupLogs(t *testing.T) {
	root := t.TempDir()
	table := filepath.Join(root, "store", "f91", "f917f7db-33fd-460d-b3e0-373ea8f5aed6")
	for _, d := range []string{
		"20261201_1_1_1", "20261201_2_4_2", // 3 was merged into 2_4
		"20261201_6_6_1_9",          // mutated
		"tmp_insert_20261201_7_7_1", // never renamed: not a part
		"detached", "deduplication_logs",
	} {
		if err := os.MkdirAll(filepath.Join(table, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	logs := filepath.Join(table, "deduplication_logs")
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(logs, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("deduplication_log_1.txt", "1\t20261201_1_1_1\t20261201_a\n1\t20261201_3_3_1\t20261201_b\n1\t20261201_5_5_1\t20261201_c\n")
	write("deduplication_log_2.txt", "2\t20261201_5_5_1\t20261201_c\n1\t20261201_6_6_1\t20261201_d\n1\t20261201_7_7_1\t20261201_e\n1\t20261202_1_1_1\t20261202_f\n")
	n, err := reconcileDedupLogs(root)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("dropped %d block ids, want 2 (e: part 7 never renamed; f: no part in its partition)", n)
	}
	b, err := os.ReadFile(filepath.Join(logs, "deduplication_log_2.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := "2\t20261201_5_5_1\t20261201_c\n1\t20261201_6_6_1\t20261201_d\n1\t20261201_7_7_1\t20261201_e\n1\t20261202_1_1_1\t20261202_f\n" +
		"2\t20261201_7_7_1\t20261201_e\n2\t20261202_1_1_1\t20261202_f\n"
	if string(b) != want {
		t.Fatalf("last log =\n%q\nwant\n%q", b, want)
	}
	if n, err := reconcileDedupLogs(root); err != nil || n != 0 {
		t.Fatalf("second run dropped %d (%v), want 0", n, err)
	}
}

func TestParsePart(t *testing.T) {
	tests := []struct {
		name string
		want partRange
		ok   bool
	}{
		{"20261201_37_37_1", partRange{"20261201", 37, 37}, true},
		{"all_1_40_3_41", partRange{"all", 1, 40}, true},
		{"tmp_insert_20261201_7_7_1", partRange{}, false},
		{"20261201_9_3_1", partRange{}, false},
		{"format_version.txt", partRange{}, false},
		{"detached", partRange{}, false},
	}
	for _, tt := range tests {
		got, ok := parsePart(tt.name)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parsePart(%q) = %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}
