package store

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// goldenStreams are the client streams of the golden spool frames: one
// complete stream with every part (histograms, stalls, causes, timeline,
// enrichment), one aborted before its headers.
func goldenStreams() []collector.Stream {
	a := collector.Stream{
		Site:       "demo",
		ReceivedAt: time.Date(2026, 12, 2, 14, 30, 0, 123_000_000, time.UTC),
		Release:    "web@1.2.3", ModuleVersion: "0.9.0", ConnType: "4g", ConnRTTMs: 50, TimerFloorUs: 100,
		Country: "DE", Region: "DE-BE", Browser: "Chrome", BrowserMajor: 142, OS: "Linux", Device: "desktop",
	}
	r := &a.Record
	r.StreamID = [16]byte{0x6f, 0x1e, 0x2a, 0x9c, 0x03, 0x44, 0x4b, 0x8e, 0x9a, 0x10, 0x5d, 0xc2, 0x7e, 0x31, 0x08, 0xf4}
	r.OriginID = "req_3f9c2e1d"
	r.StartUnixMs = 1796221800000
	r.PageOrigin, r.PagePath = "https://chat.example.com", "/c/new"
	r.URLOrigin, r.URLPath = "https://api.example.com", "/v1/chat/completions"
	r.Model, r.HTTPProto, r.ContentType = "gpt-4o-mini", "h2", "text/event-stream"
	r.Format, r.Status, r.HTTPStatus = 1, 1, 200
	r.End, r.HeadersUs = 1, 160_000
	r.TTFBUs, r.TTFCUs, r.TTFTUs, r.DurationUs = 180_000, 185_000, 190_000, 2_500_000
	r.Events, r.ContentEvents, r.Tokens, r.TokensReported, r.Reads, r.Bytes = 120, 118, 240, true, 90, 48_000
	r.GapP50Us, r.GapP95Us, r.GapP99Us, r.GapMaxUs, r.TPOTUs = 20_000, 41_000, 260_000, 300_000, 19_700
	r.TokensPerSec, r.Stalls, r.StalledUs, r.Jank, r.Smooth = 50.75, 2, 560_000, 13, false
	r.EventsPerRead, r.MaxEventsPerRead, r.BytesPerRead, r.SubFloorShare = 1.3, 4, 533.3, 0.125
	r.StallsByCause = [5]uint32{0, 0, 1, 1, 0}
	r.StalledByCause = [5]uint64{0, 0, 300_000, 260_000, 0}
	r.TTFTCause = 2
	for _, g := range []float64{0.5, 19_000, 20_000, 21_500, 260_000, 300_000} {
		r.ITL.Record(g)
		r.ITLTokens.Record(g / 2)
	}
	r.StallList = []beacon.Stall{{StartUs: 400_000, EndUs: 700_000, Cause: 2, NextReadEvents: 3}, {StartUs: 1_200_000, EndUs: 1_460_000, Cause: 3, NextReadEvents: 1}}
	r.Timeline = []beacon.Stamp{{AtUs: 180_000, Read: 1}, {AtUs: 190_000, Read: 2, Content: true}, {AtUs: 210_000, Read: 2, Content: true}}
	r.TimelineDropped = 1

	b := collector.Stream{Site: "demo", ReceivedAt: a.ReceivedAt, ConnType: "unknown", Country: "unknown", Region: "unknown", Device: "unknown"}
	b.StreamID = [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	b.StartUnixMs = 1796221801000
	b.PageOrigin, b.PagePath, b.URLOrigin, b.URLPath = "https://chat.example.com", "/", "https://chat.example.com", "/api/chat"
	b.Status, b.End, b.HeadersUs = 2, 3, beacon.NoTime
	b.TTFBUs, b.TTFCUs, b.TTFTUs, b.DurationUs = beacon.NoTime, beacon.NoTime, beacon.NoTime, 1_500_000
	return []collector.Stream{a, b}
}

// goldenTimelines are the server-side timelines of the golden spool frames:
// an origin one and an edge one of the first golden stream.
func goldenTimelines() []beacon.Origin {
	o := beacon.Origin{
		ID: "req_3f9c2e1d", StartUnixMs: 1796221800050, Route: "/v1/chat/completions",
		Format: 1, Status: 1, HTTPStatus: 200,
		TTFBUs: 9_000, TTFTUs: 12_000, DurationUs: 2_300_000,
		Events: 120, ContentEvents: 118, Flushes: 118, MaxEventsPerFlush: 2, Bytes: 47_000,
		EmitUs: []uint32{12_000, 32_000, 52_500}, EmitsDropped: 115,
	}
	o.ITL.Record(20_000)
	o.ITL.Record(20_500)
	e := o
	e.Vantage = beacon.VantageEdge
	e.EmitUs = []uint32{15_000, 36_000}
	e.Edge = beacon.Edge{Colo: "FRA", Country: "DE", Region: "Berlin", RegionCode: "BE", City: "Berlin", ASN: 3320,
		HTTPProto: "HTTP/2", TLSVersion: "TLSv1.3", ClientTCPRTTMs: 12, HeadersUs: 8_000}
	return []beacon.Origin{o, e}
}

// goldenReceivedAt is when the golden timelines were accepted.
var goldenReceivedAt = time.Date(2026, 12, 2, 14, 30, 1, 456_000_000, time.UTC)

// goldenRows are the inbox rows of the golden fixtures, as this version
// makes them: the streams' client rows, then the timelines' rows.
func goldenRows(t testing.TB) []InboxRow {
	t.Helper()
	rows, bad := inboxRows(goldenStreams())
	if len(bad) > 0 {
		t.Fatal(bad)
	}
	for _, o := range goldenTimelines() {
		row, err := OriginRow("demo", goldenReceivedAt, &o)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row)
	}
	return rows
}

// TestSpoolGoldenReleases: frames written by earlier releases replay. The
// files were written by each release's own code from the fixtures above:
// spool-v1.bin by the collector before schema/006_names.sql (codes in the
// rows), spool-v2.bin by the one before schema/007_inbox.sql (itl_streams
// rows), spool-v3.bin by the last gob release (inbox rows). They are never
// rewritten.
func TestSpoolGoldenReleases(t *testing.T) {
	want := goldenRows(t)
	for _, tc := range []struct {
		version byte
		rows    int // the rows the frame holds: v1 and v2 frames hold client streams only
	}{{1, 2}, {2, 2}, {3, 4}} {
		p, err := os.ReadFile(filepath.Join("testdata", "spool-v"+string('0'+tc.version)+".bin"))
		if err != nil {
			t.Fatal(err)
		}
		if p[0] != tc.version {
			t.Fatalf("spool-v%d.bin starts with version %d", tc.version, p[0])
		}
		got, err := decodeFrame(p)
		if err != nil {
			t.Fatalf("v%d: %v", tc.version, err)
		}
		if len(got) != tc.rows {
			t.Fatalf("v%d: %d rows, want %d", tc.version, len(got), tc.rows)
		}
		for i := range got {
			checkGoldenRow(t, tc.version, &got[i], &want[i])
		}
	}
}

// checkGoldenRow compares a row replayed from a version's frame with the
// row this version makes of the same fixture: equal for the inbox frames;
// for the itl_streams frames of versions 1 and 2, the same stream as far
// as those rows held it.
func checkGoldenRow(t *testing.T, version byte, got, want *InboxRow) {
	t.Helper()
	if version >= 3 {
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("v%d row %s/%q:\n got %+v\nwant %+v", version, want.Kind, want.StreamID, got, want)
		}
		return
	}
	gs, err := got.Client()
	if err != nil {
		t.Fatalf("v%d: %v", version, err)
	}
	ws, err := want.Client()
	if err != nil {
		t.Fatal(err)
	}
	if version == 1 { // rows before the names had no end_reason and headers_us
		if gs.End != 0 || gs.HeadersUs != beacon.NoTime {
			t.Fatalf("v1 stream %x: end %d, headers_us %d; want none (0) and NoTime", ws.StreamID, gs.End, gs.HeadersUs)
		}
		ws.End, ws.HeadersUs = gs.End, gs.HeadersUs
	}
	if !reflect.DeepEqual(gs, ws) {
		t.Fatalf("v%d stream %x:\n got %+v\nwant %+v", version, ws.StreamID, gs, ws)
	}
}
