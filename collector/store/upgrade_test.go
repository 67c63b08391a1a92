package store_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/chtest"
)

// TestSpoolOfEveryReleaseReplays: a spool holding a frame of every version
// (the golden frames, each written by its own release: gob versions 1-3,
// today's 4), left by collectors of those releases on the same --data,
// replays into the inbox on the real engine: every row, of every kind.
func TestSpoolOfEveryReleaseReplays(t *testing.T) {
	db := chtest.NewDB(t, store.Options{})
	dir := t.TempDir()
	var frames [][]byte
	for _, v := range []string{"1", "2", "3", "4"} {
		p, err := os.ReadFile(filepath.Join("testdata", "spool-v"+v+".bin"))
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, p)
	}
	if err := store.SpoolRawFrames(dir, frames...); err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, db, store.WriterOptions{SpoolDir: dir})
	waitSpoolEmpty(t, w)
	if got, want := w.Stats().RowsReplayed, uint64(2+2+4+4); got != want {
		t.Fatalf("replayed %d rows, want %d (%+v)", got, want, w.Stats())
	}
	var clients, origins, edges uint64
	if err := db.Conn().QueryRow(context.Background(),
		"SELECT countIf(kind = 'client'), countIf(kind = 'origin'), countIf(kind = 'edge') FROM itl_inbox").Scan(&clients, &origins, &edges); err != nil {
		t.Fatal(err)
	}
	if clients != 8 || origins != 2 || edges != 2 {
		t.Fatalf("inbox: %d client, %d origin, %d edge rows; want 8, 2, 2", clients, origins, edges)
	}
	// The two golden client streams, from four releases: versions 2, 3 and
	// 4 replay the same payload for each; version 1 rows had no end and
	// headers_us, so theirs differs in those.
	var ids, payloads uint64
	if err := db.Conn().QueryRow(context.Background(),
		"SELECT uniqExact(stream_id), uniqExact(payload) FROM itl_inbox WHERE kind = 'client' AND received_at > '2026-12-02 14:29:00'").Scan(&ids, &payloads); err != nil {
		t.Fatal(err)
	}
	if ids != 2 {
		t.Fatalf("%d client stream ids, want the 2 golden ones", ids)
	}
	if payloads != 4 {
		t.Fatalf("%d distinct client payloads, want 4 (2 streams: versions 2-4 alike, version 1 without end and headers_us)", payloads)
	}
}
