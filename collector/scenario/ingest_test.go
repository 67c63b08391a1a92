package scenario

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/itlmon/itlmon/collector/internal/itlmontest"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/poll"
	"github.com/itlmon/itlmon/wasm/beacon"
)

func TestIngestStoresEnrichedRecords(t *testing.T) {
	t.Parallel()
	m := itlmontest.StartMain(t, nil)
	c, _, err := itlmontest.DialWS(t, m.URL(), "test", itlmontest.PageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	acks := itlmontest.ReadAcks(c)
	recs := []beacon.Record{itlmontest.Record(1, 1), itlmontest.Record(1, 2), itlmontest.Record(1, 3)}
	if err := c.WriteMessage(websocket.BinaryMessage, itlmontest.BatchBytes(t, 41, recs)); err != nil {
		t.Fatal(err)
	}
	if got := acks.Wait(t, 1, 30*time.Second); !got[41] {
		t.Fatalf("acks = %v, want seq 41", got)
	}

	// Acked means durable; readable once promoted: through the store and the API.
	ctx := t.Context()
	itlmontest.WaitPromoted(t, m.DB.Conn())
	streams, err := m.DB.LatestStreams(ctx, itlmontest.CollectorFilter("test"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(streams), 3; got != want {
		t.Fatalf("stored streams = %d, want %d", got, want)
	}
	byID := map[[16]byte]int{}
	for i, s := range streams {
		byID[s.StreamID] = i
	}
	for _, r := range recs {
		i, ok := byID[r.StreamID]
		if !ok {
			t.Fatalf("stream %x not stored", r.StreamID)
		}
		s := streams[i]
		checks := []struct {
			name      string
			got, want any
		}{
			{"site", s.Site, "test"},
			{"model", s.Model, "gpt-test"},
			{"ttft", s.TTFTUs, r.TTFTUs},
			{"page path", s.PagePath, "/chat"},
			{"itl count", s.ITL.Count(), uint64(39)},
			{"browser", s.Browser, "Firefox"},
			{"browser major", s.BrowserMajor, uint16(133)},
			{"os", s.OS, "Linux"},
			{"device", s.Device, "desktop"},
			{"country", s.Country, "DE"},
			{"conn type", s.ConnType, "4g"},
			{"release", s.Release, "r1"},
		}
		for _, c := range checks {
			if c.got != c.want {
				t.Errorf("stream %x: %s = %v, want %v", r.StreamID[12:], c.name, c.got, c.want)
			}
		}
	}

	var body struct {
		Count   int `json:"count"`
		Streams []struct {
			Country string   `json:"country"`
			TTFTMs  *float64 `json:"ttft_ms"`
		} `json:"streams"`
	}
	itlmontest.GetJSON(t, m.ReadURL()+"/api/streams?site=test&since=10m&limit=10", &body)
	if body.Count != 3 || body.Streams[0].Country != "DE" || body.Streams[0].TTFTMs == nil {
		t.Fatalf("/api/streams = %+v, want 3 streams from DE with a TTFT", body)
	}
	metrics := itlmontest.GetText(t, m.ReadURL()+"/metrics")
	for _, want := range []string{"itlmon_ingest_records_acked_total 3", "itlmon_store_rows_inserted_total 3", "itlmon_ingest_connections 1"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if got := itlmontest.GetStatus(t, m.URL()+"/readyz"); got != 200 {
		t.Errorf("/readyz = %d, want 200", got)
	}
}

// TestClickHouseOutage stops the engine mid-ingest and restarts it: every
// acked record is in ClickHouse exactly once, in the rows and in the rollup.
func TestClickHouseOutage(t *testing.T) {
	t.Parallel()
	m := itlmontest.StartMain(t, nil)
	c, _, err := itlmontest.DialWS(t, m.URL(), "test", itlmontest.PageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	acks := itlmontest.ReadAcks(c)
	const perBatch = 10
	seq := uint64(0)
	send := func(n int) {
		for i := 0; i < n; i++ {
			seq++
			recs := make([]beacon.Record, perBatch)
			for j := range recs {
				recs[j] = itlmontest.Record(2, uint32(seq*perBatch)+uint32(j))
			}
			if err := c.WriteMessage(websocket.BinaryMessage, itlmontest.BatchBytes(t, seq, recs)); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx := t.Context()
	send(5)
	acks.Wait(t, 5, 30*time.Second)
	if err := m.Engine.Stop(ctx); err != nil {
		t.Fatalf("stop engine: %v", err)
	}
	send(10) // ClickHouse is down: these are acked from the spool
	acks.Wait(t, 15, 60*time.Second)
	if got := itlmontest.GetStatus(t, m.URL()+"/readyz"); got != 503 {
		t.Errorf("/readyz with ClickHouse down = %d, want 503", got)
	}
	if st := m.Writer.Stats(); st.RowsSpooled == 0 {
		t.Errorf("nothing spooled while ClickHouse was down: %+v", st)
	}
	if err := m.Engine.Restart(ctx); err != nil {
		t.Fatalf("restart engine: %v", err)
	}
	send(5)
	got := acks.Wait(t, 20, 60*time.Second)

	want := len(got) * perBatch
	rows, uniq, rollup := itlmontest.WaitRows(t, m, "test", want, 90*time.Second)
	if rows != want || uniq != want || rollup != want {
		t.Fatalf("after the outage: rows %d, distinct ids %d, rollup streams %d; want %d each (exactly once)", rows, uniq, rollup, want)
	}
	// Every acked batch's ids are there, once.
	itlmontest.WantStoredOnce(t, itlmontest.StoredIDs(t, m.DB.Conn(), "test"), got, 2, perBatch, "")
}

// TestRejections: a wrong Origin, an oversized frame, random bytes and an
// unknown version are each refused with a reason and counted in /metrics.
func TestRejections(t *testing.T) {
	t.Parallel()
	m := itlmontest.StartMain(t, nil)
	_, resp, err := itlmontest.DialWS(t, m.URL(), "test", "https://evil.example.net")
	if err == nil || resp == nil || resp.StatusCode != 403 {
		t.Fatalf("wrong origin: %v %v, want 403 before the upgrade", resp, err)
	}
	good := itlmontest.BatchBytes(t, 1, []beacon.Record{itlmontest.Record(3, 1)})
	badVersion := append([]byte(nil), good...)
	badVersion[3] = 200
	if _, v, _ := beacon.PeekKind(badVersion); v != 200 {
		t.Fatalf("PeekKind version = %d, want 200: header layout changed", v)
	}
	tests := []struct {
		name   string
		frame  []byte
		code   int
		text   string
		reason string
	}{
		{"oversized", make([]byte, beacon.DefaultLimits.MaxBytes+100), websocket.CloseMessageTooBig, "too big", "too_big"},
		{"random bytes", []byte("\x93\x11 this is not a beacon at all \xff\xfe"), websocket.CloseUnsupportedData, "bad batch", "decode_magic"},
		{"unknown version", badVersion, websocket.CloseUnsupportedData, "version", "version"},
	}
	for _, tt := range tests {
		c, _, err := itlmontest.DialWS(t, m.URL(), "test", itlmontest.PageOrigin)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.WriteMessage(websocket.BinaryMessage, tt.frame); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for err == nil { // a refusal ack may come before the close
			_, _, err = c.ReadMessage()
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != tt.code || !strings.Contains(ce.Text, tt.text) {
			t.Errorf("%s: read = %v, want close %d with %q", tt.name, err, tt.code, tt.text)
		}
	}
	metrics := itlmontest.GetText(t, m.ReadURL()+"/metrics")
	for _, reason := range []string{"origin", "too_big", "decode_magic", "version"} {
		want := fmt.Sprintf(`itlmon_ingest_rejected_total{reason=%q} 1`, reason)
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// Still serving.
	c, _, err := itlmontest.DialWS(t, m.URL(), "test", itlmontest.PageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	acks := itlmontest.ReadAcks(c)
	c.WriteMessage(websocket.BinaryMessage, good)
	acks.Wait(t, 1, 30*time.Second)
}

// TestCrashAfterAcks SIGKILLs the collector (a real process) right after
// acks, restarts it on the same data: nothing acked is missing.
func TestCrashAfterAcks(t *testing.T) {
	t.Parallel()
	lib := itlmontest.ChdbLib(t)
	data := t.TempDir()
	p1 := itlmontest.StartProcess(t, lib, data)
	c, _, err := itlmontest.DialWS(t, p1.URL, "test", itlmontest.PageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	acks := itlmontest.ReadAcks(c)
	// Send without waiting for acks and SIGKILL once some are in: batches
	// are acked, queued, in flight and unsent at the moment of the crash.
	const batches, perBatch = 400, 10
	go func() {
		for s := uint64(1); s <= batches; s++ {
			recs := make([]beacon.Record, perBatch)
			for j := range recs {
				recs[j] = itlmontest.Record(4, uint32(s*perBatch)+uint32(j))
			}
			b := beacon.Batch{Seq: s, Client: beacon.Client{ConnType: "4g"}, Records: recs}
			p, _ := b.AppendBinary(nil)
			if c.WriteMessage(websocket.BinaryMessage, p) != nil {
				return // the collector is gone
			}
		}
	}()
	acks.Wait(t, 20, 60*time.Second)
	p1.Kill(t)
	got := acks.Snapshot()
	t.Logf("%d of %d batches acked before SIGKILL", len(got), batches)
	if len(got) == batches {
		t.Log("every batch was acked before the kill: the crash hit an idle collector")
	}

	p2 := itlmontest.StartProcess(t, lib, data)
	db, err := store.Open(t.Context(), store.Options{Addr: p2.Native, Database: "itlmon"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The restarted process replays its spool into the real engine.
	var missing, storedN int
	if !poll.Until(90*time.Second, 300*time.Millisecond, func() bool {
		stored := itlmontest.StoredIDs(t, db.Conn(), "test")
		missing, storedN = 0, len(stored)
		for s := range got {
			for j := 0; j < perBatch; j++ {
				var id [16]byte
				itlmontest.PutID(&id, 4, uint32(s*perBatch)+uint32(j))
				if stored[id] == 0 {
					missing++
				}
			}
		}
		for id, n := range stored {
			if n > 1 {
				t.Fatalf("stream %x stored %d times", id, n)
			}
		}
		return missing == 0
	}) {
		t.Fatalf("%d acked records missing after the restart", missing)
	}
	t.Logf("all %d acked records stored once (%d stored in all)", len(got)*perBatch, storedN)
}
