package store

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
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

var update = flag.Bool("update", false, "rewrite testdata/spool-v4.bin and .hex from the fixtures (earlier versions are never rewritten)")

// golden compares data with testdata/name.bin and keeps testdata/name.hex
// (a hex dump) beside it so diffs read; -update rewrites both.
func golden(t *testing.T, name string, data []byte) {
	t.Helper()
	bin, dump := filepath.Join("testdata", name+".bin"), filepath.Join("testdata", name+".hex")
	if *update {
		if err := os.WriteFile(bin, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dump, []byte(hex.Dump(data)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(bin)
	if err != nil {
		t.Fatalf("%v (run go test ./collector/store -run TestSpoolFrameGolden -update)", err)
	}
	if !bytes.Equal(data, want) {
		t.Fatalf("%s differs from the golden file (a change to the layout is a new version):\ngot:\n%swant:\n%s", bin, hex.Dump(data), hex.Dump(want))
	}
	if d, err := os.ReadFile(dump); err != nil || string(d) != hex.Dump(want) {
		t.Fatalf("%s is stale (run with -update)", dump)
	}
}

// TestSpoolFrameGolden: this version's frame of the fixtures is the
// golden one, and decodes to the same rows.
func TestSpoolFrameGolden(t *testing.T) {
	rows := goldenRows(t)
	p, err := encodeFrame(rows)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p[0], byte(frameVersion); got != want {
		t.Fatalf("version byte = %d, want %d", got, want)
	}
	golden(t, "spool-v4", p)
	got, err := decodeFrame(p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rows) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, rows)
	}
}

// TestSpoolFrameEveryField: a row whose every field differs from the
// zero value and from the others comes back whole; so does the zero row
// (its zero time included) and the empty frame. A field the codec forgot
// would come back empty.
func TestSpoolFrameEveryField(t *testing.T) {
	full := InboxRow{Kind: "k", Site: "s", StreamID: "\xff\x00id", OriginID: "o", ReceivedAt: time.Date(1969, 7, 20, 20, 17, 40, 999_999_999, time.UTC),
		Country: "c", Region: "r", Browser: "b", BrowserMajor: 65535, OS: "os", Device: "d", Payload: "\x89IT\x01\x02\x03"}
	v := reflect.ValueOf(full)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("fixture leaves %s zero", v.Type().Field(i).Name)
		}
	}
	smallest := make([]InboxRow, 100) // the smallest rows: every string empty, at the epoch
	for i := range smallest {
		smallest[i].ReceivedAt = time.Unix(0, 0).UTC()
	}
	for _, rows := range [][]InboxRow{{full}, {{}}, {}, {full, {}, full}, smallest} {
		p, err := encodeFrame(rows)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeFrame(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) == 0 && len(got) == 0 {
			continue
		}
		if !reflect.DeepEqual(got, rows) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, rows)
		}
	}
}

// TestSpoolFrameTruncated: every strict prefix of a frame, and the frame
// with a byte appended, is an error naming what is wrong, never rows.
func TestSpoolFrameTruncated(t *testing.T) {
	p, err := encodeFrame(goldenRows(t))
	if err != nil {
		t.Fatal(err)
	}
	for n := range len(p) {
		rows, err := decodeFrame(p[:n])
		if err == nil {
			t.Fatalf("prefix of %d/%d bytes decoded to %d rows", n, len(p), len(rows))
		}
		if n > 0 && !errors.Is(err, errFrame) {
			t.Fatalf("prefix of %d bytes: %v, want errFrame", n, err)
		}
	}
	if _, err := decodeFrame(append(bytes.Clone(p), 0)); err == nil || !strings.Contains(err.Error(), "1 bytes after the last row") {
		t.Fatalf("trailing byte: err = %v", err)
	}
}

// TestSpoolFrameErrors: values out of range are refused with the row and
// field named; a version this release does not know is errSpoolVersion.
func TestSpoolFrameErrors(t *testing.T) {
	one := func(edit func(*InboxRow)) []byte {
		r := InboxRow{Kind: KindClient, Site: "demo", ReceivedAt: time.Unix(1, 0).UTC()}
		edit(&r)
		p, err := encodeFrame([]InboxRow{{Kind: KindOrigin}, r})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name string
		p    []byte
		want string
	}{
		{"kind not UTF-8", one(func(r *InboxRow) { r.Kind = "\xff" }), "row[1].kind: invalid UTF-8"},
		{"country not UTF-8", one(func(r *InboxRow) { r.Country = "\xc3" }), "row[1].country: invalid UTF-8"},
		{"row count over the bytes", []byte{frameVersion, 9}, "frame.rows: 9 exceeds 0"},
		{"row count over the bytes by one", append([]byte{frameVersion, 3}, make([]byte, 2*minRowBytes+1)...), "frame.rows: 3 exceeds 2"},
		{"varint overflow", append([]byte{frameVersion}, bytes.Repeat([]byte{0xff}, 10)...), "frame.rows: varint overflows 64 bits"},
		{"varint not shortest", []byte{frameVersion, 0x80, 0x00}, "frame.rows: varint not in its shortest form"},
	} {
		if _, err := decodeFrame(tc.p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
	// Nanoseconds past the second: patch the byte after the row's time.
	p := one(func(r *InboxRow) { r.ReceivedAt = time.Unix(1, 5).UTC() })
	if i := bytes.Index(p, []byte{2, 5}); i < 0 { // varint 1 s is 2, then 5 ns
		t.Fatal("time not found in frame")
	} else {
		p = append(p[:i+1], append([]byte{0x80, 0x94, 0xeb, 0xdc, 0x03}, p[i+2:]...)...) // 1e9
	}
	if _, err := decodeFrame(p); err == nil || !strings.Contains(err.Error(), "row[1].received_at_ns: 1000000000 exceeds 999999999") {
		t.Errorf("nanoseconds of 1e9: err = %v", err)
	}
	for _, p := range [][]byte{nil, {0}, {5}, {99, 1, 2}} {
		if _, err := decodeFrame(p); !errors.Is(err, errSpoolVersion) {
			t.Errorf("frame % x: err = %v, want errSpoolVersion", p, err)
		}
	}
}

// FuzzSpoolFrame: no frame makes the decoder panic, and what it accepts
// encodes back to the same bytes (one encoding per rows: a decoder that
// accepted two spellings of a row could replay what the encoder never wrote).
func FuzzSpoolFrame(f *testing.F) {
	rows := goldenRows(f)
	p, err := encodeFrame(rows)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(p)
	f.Add(p[:len(p)/2])
	q, _ := encodeFrame([]InboxRow{{}})
	f.Add(q)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 || data[0] != frameVersion {
			return // the gob versions are gob's to fuzz
		}
		rows, err := decodeFrame(data)
		if err != nil {
			return
		}
		again, err := encodeFrame(rows)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("decoded frame encodes differently:\n in % x\nout % x", data, again)
		}
	})
}

// BenchmarkSpoolFrame compares this version's codec with the gob frames
// it replaced (version 3), in the same run, on 1,000 client rows.
func BenchmarkSpoolFrame(b *testing.B) {
	rows, bad := inboxRows(benchStreams(1000))
	if len(bad) > 0 {
		b.Fatal(bad)
	}
	p4, err := encodeFrame(rows)
	if err != nil {
		b.Fatal(err)
	}
	p3, err := encodeFrameV3(rows)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		p    []byte
		enc  func([]InboxRow) ([]byte, error)
	}{{"v4", p4, encodeFrame}, {"gob-v3", p3, encodeFrameV3}} {
		b.Run("encode/"+c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.p)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.enc(rows); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("decode/"+c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.p)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := decodeFrame(c.p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
