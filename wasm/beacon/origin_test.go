package beacon

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/itlmon/itlmon/wasm/hist"
)

func typicalOriginBatch() *OriginBatch {
	b := &OriginBatch{Seq: 7, Site: "chat", Dropped: 2}
	for i := range 3 {
		o := Origin{
			ID: "req-" + string(rune('a'+i)), StartUnixMs: 1_764_460_800_000 + int64(i),
			Route: "/v1/chat/completions", Format: 1, Status: 1, HTTPStatus: 200,
			TTFBUs: 900, TTFTUs: 120_000, DurationUs: 2_100_000,
			Events: 102, ContentEvents: 100, Flushes: 101, MaxEventsPerFlush: 2, Bytes: 18_000,
		}
		for k := range 100 {
			o.EmitUs = append(o.EmitUs, 120_000+uint32(k)*20_000)
			if k > 0 {
				o.ITL.Record(20_000)
			}
		}
		if i == 1 {
			o.TTFTUs, o.EmitUs, o.ContentEvents, o.ITL = NoTime, nil, 0, hist.Histogram{}
		}
		if i == 2 {
			o.EmitsDropped = 5
		}
		b.Records = append(b.Records, o)
	}
	return b
}

// typicalEdgeBatch is what an edge Worker sends: one stream per batch (a
// Worker instance lives for one request), with the edge's facts.
func typicalEdgeBatch() *OriginBatch {
	o := Origin{
		Vantage: VantageEdge,
		ID:      "9f86d081884c7d659a2feaa0c55ad015", StartUnixMs: 1_764_460_800_250,
		Route: "/v1/chat/completions", Format: 1, Status: 1, HTTPStatus: 200,
		TTFBUs: 1_400, TTFTUs: 121_000, DurationUs: 2_102_000,
		Events: 102, ContentEvents: 100, Flushes: 60, MaxEventsPerFlush: 3, Bytes: 18_000,
		Edge: Edge{Colo: "FRA", Country: "DE", Region: "Hesse", RegionCode: "HE", City: "Frankfurt am Main",
			ASN: 3320, HTTPProto: "HTTP/2", TLSVersion: "TLSv1.3", ClientTCPRTTMs: 23, HeadersUs: 900},
	}
	for k := range 100 {
		o.EmitUs = append(o.EmitUs, 121_000+uint32(k/2)*40_000)
		if k > 0 {
			o.ITL.Record(float64(uint32(k%2) * 40_000))
		}
	}
	return &OriginBatch{Seq: 1, Site: "chat", Records: []Origin{o}}
}

func originBatchesEqual(a, b *OriginBatch) bool {
	if a.Seq != b.Seq || a.Site != b.Site || a.Dropped != b.Dropped || len(a.Records) != len(b.Records) {
		return false
	}
	for i := range a.Records {
		x, y := a.Records[i], b.Records[i]
		if !x.ITL.Equal(&y.ITL) || !slices.Equal(x.EmitUs, y.EmitUs) {
			return false
		}
		if originScalars(x) != originScalars(y) {
			return false
		}
	}
	return true
}

func TestOriginRoundTrip(t *testing.T) {
	noRTT := typicalEdgeBatch()
	noRTT.Records[0].Edge = Edge{Colo: "SJC", ClientTCPRTTMs: NoTime, HeadersUs: NoTime}
	for _, b := range []*OriginBatch{{}, {Seq: 1, Site: "s"}, typicalOriginBatch(), typicalEdgeBatch(), noRTT} {
		enc, err := b.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		if k, v, err := PeekKind(enc); err != nil || k != KindOrigin || v != Version {
			t.Fatalf("PeekKind = %v, %d, %v; want origin, %d, nil", k, v, err, Version)
		}
		got, err := DecodeOriginBatch(enc, Limits{})
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if !originBatchesEqual(got, b) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, b)
		}
	}
}

func TestOriginSize(t *testing.T) {
	enc, err := typicalOriginBatch().AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	// 200 emits at a steady 20 ms cost 3 bytes each; the rest is small.
	if got, want := len(enc), 900; got > want {
		t.Fatalf("typical origin batch is %d bytes, want at most %d", got, want)
	}
}

// Every proper prefix of a valid message fails to decode, with an error.
func TestOriginTruncated(t *testing.T) {
	for _, b := range []*OriginBatch{typicalOriginBatch(), typicalEdgeBatch()} {
		enc, err := b.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		for n := range len(enc) {
			if _, err := DecodeOriginBatch(enc[:n], Limits{}); err == nil {
				t.Fatalf("prefix of %d/%d bytes decoded without error", n, len(enc))
			}
		}
	}
}

// TestOriginMinor1: testdata/origin-minor1.bin is what minor-1 senders (the
// origin middleware before edge timelines) wrote, frozen: it decodes as
// origin records, and this package writes the same bytes when asked for
// minor 1.
func TestOriginMinor1(t *testing.T) {
	old, err := os.ReadFile(filepath.Join("testdata", "origin-minor1.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if old[4] != 1 {
		t.Fatalf("fixture minor %d, want 1", old[4])
	}
	got, err := DecodeOriginBatch(old, Limits{})
	if err != nil {
		t.Fatalf("decode minor 1: %v", err)
	}
	if !originBatchesEqual(got, typicalOriginBatch()) {
		t.Fatal("minor 1: decoded batch differs from the fixture")
	}
	for _, o := range got.Records {
		if o.Vantage != VantageOrigin || o.Edge != (Edge{}) {
			t.Fatalf("minor 1 record: vantage %v edge %+v, want origin and none", o.Vantage, o.Edge)
		}
	}
	again, err := encoder{minor: 1}.appendOriginBatch(nil, typicalOriginBatch())
	if err != nil || !bytes.Equal(again, old) {
		t.Fatalf("minor 1 encoding differs from the frozen fixture (%v)", err)
	}
	if _, err := (encoder{minor: 1}).appendOriginBatch(nil, typicalEdgeBatch()); !errors.Is(err, ErrInvalid) {
		t.Fatalf("edge record as minor 1: err = %v, want ErrInvalid", err)
	}
}

// TestOriginNewerMinor: fields a newer sender appends to each record and to
// the message are skipped; from a sender of this minor they are an error. A
// vantage this minor does not know is kept from a newer sender (the
// collector stores it whole: TestOriginWire) and an error from this minor.
func TestOriginNewerMinor(t *testing.T) {
	extra := []byte{0xde, 0xad, 0xbe, 0xef}
	for _, b := range []*OriginBatch{typicalOriginBatch(), typicalEdgeBatch()} {
		newer, err := encoder{minor: Minor + 1, extra: extra}.appendOriginBatch(nil, b)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeOriginBatch(newer, Limits{})
		if err != nil || !originBatchesEqual(got, b) {
			t.Fatalf("newer minor: %v, or decoded batch differs", err)
		}
		same, _ := encoder{minor: Minor, extra: extra}.appendOriginBatch(nil, b)
		if _, err := DecodeOriginBatch(same, Limits{}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("trailing fields from this minor: err = %v, want ErrInvalid", err)
		}
	}
	b := typicalEdgeBatch()
	b.Records[0].Vantage, b.Records[0].Edge = 7, Edge{}
	enc, err := encoder{minor: Minor, unchecked: true}.appendOriginBatch(nil, b)
	if err != nil {
		t.Fatal(err)
	}
	_, err = DecodeOriginBatch(enc, Limits{})
	if got, want := fmt.Sprint(err), "beacon: record 0: vantage: unknown 7"; got != want || !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v, want %q", err, want)
	}
	enc, _ = encoder{minor: Minor + 1, unchecked: true, extra: extra}.appendOriginBatch(nil, b)
	got, err := DecodeOriginBatch(enc, Limits{})
	if err != nil || got.Records[0].Vantage != 7 {
		t.Fatalf("unknown vantage from a newer minor: %v, %+v", err, got)
	}
}

func TestOriginRejects(t *testing.T) {
	good, _ := typicalOriginBatch().AppendBinary(nil)
	batch, _ := (&Batch{Seq: 1}).AppendBinary(nil)
	for _, tc := range []struct {
		name string
		src  []byte
		lim  Limits
		want error
	}{
		{"batch kind", batch, Limits{}, ErrKind},
		{"bad magic", append([]byte("{}"), good[2:]...), Limits{}, ErrMagic},
		{"too big", good, Limits{MaxBytes: 100}, ErrTooBig},
		{"too many emits", good, Limits{MaxTimeline: 10}, ErrLimit},
		{"trailing bytes", append(slices.Clone(good), 0), Limits{}, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeOriginBatch(tc.src, tc.lim)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name string
		edit func(*Origin)
	}{
		{"route with query", func(o *Origin) { o.Route = "/v1/chat?user=1" }},
		{"id not UTF-8", func(o *Origin) { o.ID = "\xff" }},
		{"emits backwards", func(o *Origin) { o.EmitUs = []uint32{5, 3} }},
		{"unknown vantage", func(o *Origin) { o.Vantage = numVantages }},
		{"edge facts on an origin record", func(o *Origin) { o.Edge.Colo = "FRA" }},
		{"edge city not UTF-8", func(o *Origin) { o.Vantage, o.Edge.City = VantageEdge, "\xff" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := typicalOriginBatch()
			tc.edit(&b.Records[0])
			if _, err := b.AppendBinary(nil); !errors.Is(err, ErrInvalid) {
				t.Fatalf("AppendBinary err = %v, want ErrInvalid", err)
			}
		})
	}
}

func FuzzDecodeOriginBatch(f *testing.F) {
	for _, seed := range originSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		b, err := DecodeOriginBatch(src, Limits{})
		bw, wires, werr := DecodeOriginBatchWire(src, Limits{})
		if (err == nil) != (werr == nil) || err == nil && (!originBatchesEqual(b, bw) || len(wires) != len(b.Records)) {
			t.Fatalf("DecodeOriginBatchWire disagrees with DecodeOriginBatch: %v, %v", werr, err)
		}
		if err != nil {
			return
		}
		// Each timeline stored from its wire decodes to the same timeline.
		for i, w := range wires {
			one, err := AppendOriginRecordBatch(nil, "s", w)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeOriginBatch(one, Limits{})
			if err != nil || len(got.Records) != 1 || !originBatchesEqual(&OriginBatch{Site: "s", Records: got.Records}, &OriginBatch{Site: "s", Records: b.Records[i : i+1]}) {
				t.Fatalf("timeline %d stored from its wire decodes differently: %v", i, err)
			}
		}
		again, err := b.AppendBinary(nil)
		if err != nil {
			return // e.g. a route that decodes but would not be sent: never here, checked on decode
		}
		b2, err := DecodeOriginBatch(again, Limits{})
		if err != nil || !originBatchesEqual(b, b2) {
			t.Fatalf("re-encoded batch does not decode the same: %v", err)
		}
	})
}

func BenchmarkOriginEncode(b *testing.B) {
	ob := typicalOriginBatch()
	buf, _ := ob.AppendBinary(nil)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = ob.AppendBinary(buf[:0])
	}
}

func BenchmarkOriginDecode(b *testing.B) {
	enc, _ := typicalOriginBatch().AppendBinary(nil)
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeOriginBatch(enc, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

// originSeeds are FuzzDecodeOriginBatch's seeds, also committed as its
// corpus (TestOriginFuzzCorpus).
func originSeeds(tb testing.TB) map[string][]byte {
	tb.Helper()
	enc := func(e encoder, b *OriginBatch) []byte {
		out, err := e.appendOriginBatch(nil, b)
		if err != nil {
			tb.Fatal(err)
		}
		return out
	}
	typical := enc(encoder{minor: Minor}, typicalOriginBatch())
	edge := enc(encoder{minor: Minor}, typicalEdgeBatch())
	return map[string][]byte{
		"typical":     typical,
		"edge":        edge,
		"edge-cut":    edge[:len(edge)-5],
		"minor-1":     enc(encoder{minor: 1}, typicalOriginBatch()),
		"newer-minor": enc(encoder{minor: Minor + 1, extra: []byte{1, 2, 3}}, typicalEdgeBatch()),
		"header-only": {0x89, 'I', 'T', 1, 0, 3},
	}
}

// TestOriginFuzzCorpus writes the committed seed corpus of
// FuzzDecodeOriginBatch with -update; without it, checks it is current.
func TestOriginFuzzCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeOriginBatch")
	for name, data := range originSeeds(t) {
		path := filepath.Join(dir, name)
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
		if *update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if got, err := os.ReadFile(path); err != nil || string(got) != content {
			t.Fatalf("%s is missing or stale (run go test ./wasm/beacon -update): %v", path, err)
		}
	}
}

// scalars is Origin without its histogram and emit list, for ==.
type scalars struct {
	id, route                                                  string
	start                                                      int64
	format, status                                             uint8
	httpStatus                                                 uint16
	ttfb, ttft, dur, events, content, flushes, maxPer, dropped uint32
	bytes                                                      uint64
	vantage                                                    Vantage
	edge                                                       Edge
}

func originScalars(o Origin) scalars {
	return scalars{o.ID, o.Route, o.StartUnixMs, o.Format, o.Status, o.HTTPStatus,
		o.TTFBUs, o.TTFTUs, o.DurationUs, o.Events, o.ContentEvents, o.Flushes, o.MaxEventsPerFlush, o.EmitsDropped, o.Bytes,
		o.Vantage, o.Edge}
}

// The encoding of a typical origin batch is pinned (go test -update rewrites
// testdata/origin-typical.{bin,hex}).
func TestOriginGolden(t *testing.T) {
	enc, err := typicalOriginBatch().AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "origin-typical", enc)
	got, err := DecodeOriginBatch(enc, Limits{})
	if err != nil || !originBatchesEqual(got, typicalOriginBatch()) {
		t.Fatalf("decoded golden differs from the fixture (%v)", err)
	}
	enc, err = typicalEdgeBatch().AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "edge-typical", enc)
	got, err = DecodeOriginBatch(enc, Limits{})
	if err != nil || !originBatchesEqual(got, typicalEdgeBatch()) {
		t.Fatalf("decoded edge golden differs from the fixture (%v)", err)
	}
}

// TestOriginWire: a timeline stored from its wire (AppendOriginRecordBatch)
// is the sender's bytes: from a sender of this minor exactly what encoding
// it again writes; from a newer sender its fields this minor does not know
// too (a newer decoder finds them), read here as far as this minor goes,
// an unknown vantage included.
func TestOriginWire(t *testing.T) {
	extra := []byte{0xde, 0xad, 0xbe, 0xef}
	unknown := typicalEdgeBatch()
	unknown.Records[0].Vantage, unknown.Records[0].Edge = 7, Edge{}
	for _, tc := range []struct {
		name string
		e    encoder
		b    *OriginBatch
	}{
		{"origin", encoder{minor: Minor}, typicalOriginBatch()},
		{"edge", encoder{minor: Minor}, typicalEdgeBatch()},
		{"newer minor", encoder{minor: Minor + 1, extra: extra}, typicalEdgeBatch()},
		{"newer vantage", encoder{minor: Minor + 1, extra: extra, unchecked: true}, unknown},
		{"minor 1", encoder{minor: 1}, typicalOriginBatch()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := tc.e.appendOriginBatch(nil, tc.b)
			if err != nil {
				t.Fatal(err)
			}
			b, wires, err := DecodeOriginBatchWire(src, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if len(wires) != len(b.Records) {
				t.Fatalf("%d wires for %d records", len(wires), len(b.Records))
			}
			for i, w := range wires {
				if w.Minor() != tc.e.minor {
					t.Fatalf("wire minor %d, want %d", w.Minor(), tc.e.minor)
				}
				one, err := AppendOriginRecordBatch(nil, "other_site", w)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.HasSuffix(one, w.section) || !bytes.HasSuffix(w.section, tc.e.extra) {
					t.Fatal("the stored batch lost the section's bytes (the newer sender's fields at its end)")
				}
				got, err := DecodeOriginBatch(one, Limits{})
				if err != nil {
					t.Fatal(err)
				}
				want := &OriginBatch{Site: "other_site", Records: []Origin{b.Records[i]}}
				if !originBatchesEqual(got, want) {
					t.Fatalf("stored timeline decodes to %+v, want %+v", got.Records[0], b.Records[i])
				}
				if tc.e.minor == Minor {
					again, err := want.AppendBinary(nil)
					if err != nil || !bytes.Equal(again, one) {
						t.Fatalf("from this minor, the stored batch differs from encoding the timeline again (%v)", err)
					}
				}
			}
		})
	}
	if _, err := AppendOriginRecordBatch(nil, "s", OriginWire{}); !errors.Is(err, ErrNoWire) {
		t.Fatalf("zero wire: err = %v, want ErrNoWire", err)
	}
	src, _ := typicalOriginBatch().AppendBinary(nil)
	_, wires, _ := DecodeOriginBatchWire(src, Limits{})
	if _, err := AppendOriginRecordBatch(nil, "\xff", wires[0]); !errors.Is(err, ErrInvalid) {
		t.Fatalf("site not UTF-8: err = %v, want ErrInvalid", err)
	}
}
