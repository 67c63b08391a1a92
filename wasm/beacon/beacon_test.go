package beacon

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/itlmon/itlmon/wasm/hist"
	"pgregory.net/rapid"

	"github.com/itlmon/itlmon/internal/cpubench"
)

var update = flag.Bool("update", false, "rewrite the golden files and the fuzz seed corpus in testdata")

// bigLimits accept anything the generators make.
var bigLimits = Limits{MaxBytes: 1 << 30, MaxRecords: 1 << 20, MaxBuckets: hist.NumIndexes, MaxTimeline: 1 << 20, MaxStalls: 1 << 20, MaxString: 1 << 20}

// tb is what testing.TB and *rapid.T share.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

func mustEncode(tb tb, b *Batch) []byte {
	tb.Helper()
	enc, err := b.AppendBinary(nil)
	if err != nil {
		tb.Fatalf("encode: %v", err)
	}
	return enc
}

func mustDecode(tb tb, src []byte, lim Limits) *Batch {
	tb.Helper()
	b, err := DecodeBatch(src, lim)
	if err != nil {
		tb.Fatalf("decode: %v", err)
	}
	return b
}

// golden compares data with testdata/name.bin and keeps testdata/name.hex (a
// hex dump) beside it so diffs read; -update rewrites both.
func golden(t *testing.T, name string, data []byte) {
	t.Helper()
	bin := filepath.Join("testdata", name+".bin")
	dump := filepath.Join("testdata", name+".hex")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dump, []byte(hex.Dump(data)), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(bin)
	if err != nil {
		t.Fatalf("%v (run go test ./wasm/beacon -update)", err)
	}
	if !bytes.Equal(data, want) {
		t.Fatalf("%s differs from the golden file (run with -update if intended):\ngot:\n%swant:\n%s", bin, hex.Dump(data), hex.Dump(want))
	}
	wantDump, err := os.ReadFile(dump)
	if err != nil || string(wantDump) != hex.Dump(want) {
		t.Fatalf("%s is stale (run go test ./wasm/beacon -update)", dump)
	}
}

func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		name  string
		batch *Batch
	}{
		{"batch-minimal", minimalBatch()},
		{"batch-typical", typicalBatch()},
		{"batch-empty", &Batch{Seq: 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enc := mustEncode(t, tc.batch)
			golden(t, tc.name, enc)
			if got := mustDecode(t, enc, Limits{}); !batchesEqual(got, tc.batch) {
				t.Fatalf("decoded golden differs from the fixture")
			}
		})
	}
	for _, tc := range []struct {
		name string
		ack  Ack
	}{
		{"ack", Ack{Seq: 17}},
		{"ack-reject", Ack{Seq: 300, Reject: RejectLimit}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enc := tc.ack.AppendBinary(nil)
			golden(t, tc.name, enc)
			got, err := DecodeAck(enc)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.ack {
				t.Fatalf("DecodeAck = %+v, want %+v", got, tc.ack)
			}
		})
	}
}

func TestSizes(t *testing.T) {
	minimal := mustEncode(t, minimalBatch())
	typical := mustEncode(t, typicalBatch())
	empty := mustEncode(t, &Batch{Seq: 1, Site: "pk_demo"})
	perRecord := float64(len(typical)-len(empty)) / 10
	t.Logf("minimal batch (1 record): %d bytes; typical batch (10 records): %d bytes, %.0f bytes/record", len(minimal), len(typical), perRecord)
	b := typicalBatch()
	var itl int
	for _, r := range b.Records {
		itl += len(r.ITL.AppendBinary(nil))
	}
	t.Logf("typical ITL histogram: %d buckets, %d bytes", b.Records[0].ITL.NumBuckets(), itl/len(b.Records))
	r := minimalBatch().Records[0]
	strs := len(r.PageOrigin + r.PagePath + r.URLOrigin + r.URLPath)
	if n := len(minimal) - len(empty) - strs; n > 48 {
		t.Fatalf("minimal record takes %d bytes besides its strings", n)
	}
	if perRecord > 1000 {
		t.Fatalf("typical record takes %.0f bytes", perRecord)
	}
}

func TestRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := genBatch(t)
		enc := mustEncode(t, b)
		got := mustDecode(t, enc, bigLimits)
		if !batchesEqual(got, b) {
			t.Fatalf("round trip differs:\n got %+v\nwant %+v", normalized(got), normalized(b))
		}
		// Canonical: re-encoding the decoded batch gives the same bytes.
		if again := mustEncode(t, got); !bytes.Equal(again, enc) {
			t.Fatalf("re-encoding differs")
		}
		// Every strict prefix is rejected.
		for i := range len(enc) {
			if _, err := DecodeBatch(enc[:i], bigLimits); err == nil {
				t.Fatalf("prefix %d of %d decoded without error", i, len(enc))
			}
		}
	})
}

// TestTruncated decodes every strict prefix of the golden encodings and
// expects an error (ErrTruncated, or for the shortest ErrMagic-free header
// check, ErrTruncated too).
func TestTruncated(t *testing.T) {
	for _, b := range []*Batch{minimalBatch(), typicalBatch(), {Seq: 0}} {
		enc := mustEncode(t, b)
		for i := range len(enc) {
			_, err := DecodeBatch(enc[:i], Limits{})
			if !errors.Is(err, ErrTruncated) {
				t.Fatalf("prefix %d of %d: err = %v, want ErrTruncated", i, len(enc), err)
			}
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("prefix %d: %T is not *DecodeError", i, err)
			}
		}
	}
	ack := Ack{Seq: 1 << 40, Reject: RejectRetry}.AppendBinary(nil)
	for i := range len(ack) {
		if _, err := DecodeAck(ack[:i]); !errors.Is(err, ErrTruncated) {
			t.Fatalf("ack prefix %d of %d: err = %v, want ErrTruncated", i, len(ack), err)
		}
	}
}

func TestHeader(t *testing.T) {
	valid := mustEncode(t, minimalBatch())
	with := func(i int, v byte) []byte {
		b := bytes.Clone(valid)
		b[i] = v
		return b
	}
	for _, tc := range []struct {
		name string
		in   []byte
		is   error
		msg  string
	}{
		{"empty", nil, ErrTruncated, "beacon: header: truncated"},
		{"json", []byte(`{"seq":1}`), ErrMagic, "beacon: magic: got 7b 22 73, want 89 49 54"},
		{"short wrong", []byte{0x89, 'X'}, ErrMagic, "beacon: magic: got 89 58, want 89 49 54"},
		{"magic", with(2, 'X'), ErrMagic, "beacon: magic: got 89 49 58, want 89 49 54"},
		{"version 0", with(3, 0), ErrVersion, "beacon: version: 0, this decoder reads 1"},
		{"version 2", with(3, 2), ErrVersion, "beacon: version: 2, this decoder reads 1"},
		{"kind 0", with(5, 0), ErrKind, "beacon: kind: unknown kind 0"},
		{"kind 9", with(5, 9), ErrKind, "beacon: kind: unknown kind 9"},
		{"ack as batch", Ack{Seq: 1}.AppendBinary(nil), ErrKind, "beacon: kind: ack, want batch"},
		{"origin as batch", with(5, byte(KindOrigin)), ErrKind, "beacon: kind: origin, want batch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeBatch(tc.in, Limits{})
			if !errors.Is(err, tc.is) {
				t.Fatalf("err = %v, want %v", err, tc.is)
			}
			if got := err.Error(); got != tc.msg {
				t.Fatalf("err = %q, want %q", got, tc.msg)
			}
		})
	}
	k, v, err := PeekKind(valid)
	if k != KindBatch || v != Version || err != nil {
		t.Fatalf("PeekKind = %v %v %v", k, v, err)
	}
	k, v, err = PeekKind(with(3, 7))
	if k != KindBatch || v != 7 || !errors.Is(err, ErrVersion) {
		t.Fatalf("PeekKind(version 7) = %v %v %v", k, v, err)
	}
	if _, err := DecodeAck(valid); !errors.Is(err, ErrKind) {
		t.Fatalf("DecodeAck(batch) err = %v, want ErrKind", err)
	}
}

// reencode decodes a batch and encodes it with enc (as a different sender).
func reencode(t *testing.T, b *Batch, e encoder) []byte {
	t.Helper()
	out, err := e.appendBatch(nil, b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestMinorVersions(t *testing.T) {
	b := typicalBatch()
	// A newer minor appends fields to the client part, every record and the
	// message: this decoder skips them.
	newer := reencode(t, b, encoder{minor: Minor + 1, extra: []byte{0xde, 0xad, 0xbe, 0xef}})
	if got := mustDecode(t, newer, Limits{}); !batchesEqual(got, b) {
		t.Fatal("newer minor: decoded batch differs")
	}
	// The same bytes from a sender of this minor are an error.
	same := reencode(t, b, encoder{minor: Minor, extra: []byte{0xde, 0xad, 0xbe, 0xef}})
	_, err := DecodeBatch(same, Limits{})
	if got, want := fmt.Sprint(err), "beacon: client: 4 bytes after the last field"; got != want || !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v, want %q", err, want)
	}
	// Unknown flag bits: an error from this minor, ignored from a newer one.
	rec := mustEncode(t, minimalBatch())
	flagsAt := bytes.Index(rec, minimalBatch().Records[0].StreamID[:]) + 16
	rec[flagsAt] |= 0x40 // a flag bit, here causes: reading it needs more bytes
	if _, err := DecodeBatch(rec, Limits{}); err == nil {
		t.Fatal("flag with missing section decoded")
	}
	rec = patchRecord(t, minimalBatch(), func(body []byte) []byte {
		flags := appendUvarint(nil, uint64(body[16])|0x100) // 0x100: not a known flag
		return append(append(body[:16:16], flags...), body[17:]...)
	})
	_, err = DecodeBatch(rec, Limits{})
	if got, want := fmt.Sprint(err), "beacon: record 0: flags: unknown bits 0x100"; got != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
	rec[4] = Minor + 1
	if _, err := DecodeBatch(rec, Limits{}); err != nil {
		t.Fatalf("unknown flag bit from a newer minor: %v", err)
	}
	// Acks too.
	ack := append(Ack{Seq: 5}.AppendBinary(nil), 1, 2)
	if _, err := DecodeAck(ack); err == nil {
		t.Fatal("ack with trailing bytes from this minor decoded")
	}
	ack[4] = Minor + 1
	if a, err := DecodeAck(ack); err != nil || a.Seq != 5 {
		t.Fatalf("DecodeAck(newer minor) = %v, %v", a, err)
	}
}

// TestOlderMinor: a minor-0 sender does not write end and headers_us; its
// records decode with End 0 (not reported) and HeadersUs at its bound (the
// first body byte, else the end), never NoTime ("before the headers").
func TestOlderMinor(t *testing.T) {
	b := typicalBatch()
	b.Records[1].TTFBUs = NoTime // an empty body
	old := reencode(t, b, encoder{minor: 0})
	if old[4] != 0 {
		t.Fatalf("minor byte %d, want 0", old[4])
	}
	if cur := mustEncode(t, b); len(cur)-len(old) < 2*len(b.Records) {
		t.Fatalf("minor 0 encoding is %d bytes, minor %d %d: the new fields were written", len(old), Minor, len(cur))
	}
	got := mustDecode(t, old, Limits{})
	want := typicalBatch()
	want.Records[1].TTFBUs = NoTime
	for i := range want.Records {
		r := &want.Records[i]
		r.End, r.HeadersUs = 0, r.TTFBUs
		if r.TTFBUs == NoTime {
			r.HeadersUs = r.DurationUs
		}
	}
	if !batchesEqual(got, want) {
		t.Fatal("minor 0: decoded batch differs")
	}
	if got.Records[1].HeadersUs != b.Records[1].DurationUs || got.Records[0].HeadersUs != b.Records[0].TTFBUs {
		t.Fatalf("minor 0 headers_us: %d, %d", got.Records[0].HeadersUs, got.Records[1].HeadersUs)
	}
	// The new fields round-trip from this minor, NoTime included.
	m := minimalBatch()
	if got := mustDecode(t, mustEncode(t, m), Limits{}); got.Records[0].End != 3 || got.Records[0].HeadersUs != NoTime {
		t.Fatalf("end %d headers_us %d, want 3 NoTime", got.Records[0].End, got.Records[0].HeadersUs)
	}
	// An end code this minor does not know: an error from this minor, kept
	// from a newer one (which may have added codes).
	enc := patchRecord(t, minimalBatch(), func(body []byte) []byte {
		body[len(body)-2] = 9 // end, then headers_us (NoTime: one byte)
		return body
	})
	if _, err := DecodeBatch(enc, Limits{}); fmt.Sprint(err) != "beacon: record 0: end: 9 out of range [0, 4]" || !errors.Is(err, ErrInvalid) {
		t.Fatalf("unknown end from this minor: err = %v", err)
	}
	enc[4] = Minor + 1
	if got, err := DecodeBatch(enc, Limits{}); err != nil || got.Records[0].End != 9 {
		t.Fatalf("unknown end from a newer minor: %v, %v", got, err)
	}
}

func TestLimits(t *testing.T) {
	typical := mustEncode(t, typicalBatch())
	long := minimalBatch()
	long.Records[0].PagePath = "/" + strings.Repeat("a", 4999)
	longEnc := mustEncode(t, long)
	many := &Batch{Records: make([]Record, 4)}
	manyEnc := mustEncode(t, many)
	for _, tc := range []struct {
		name string
		in   []byte
		lim  Limits
		is   error
		msg  string
	}{
		{"bytes", typical, Limits{MaxBytes: 1000}, ErrTooBig, fmt.Sprintf("beacon: message: length %d exceeds limit 1000", len(typical))},
		{"records", manyEnc, Limits{MaxRecords: 3}, ErrLimit, "beacon: records: length 4 exceeds limit 3"},
		{"string", longEnc, Limits{}, ErrLimit, "beacon: record 0: page_path: length 5000 exceeds limit 2048"},
		{"site", typical, Limits{MaxString: 10}, ErrLimit, "beacon: site: length 14 exceeds limit 10"},
		{"buckets", typical, Limits{MaxBuckets: 10}, ErrLimit, "beacon: record 0: itl.buckets: more than 10 non-empty buckets"},
		{"timeline", typical, Limits{MaxTimeline: 63}, ErrLimit, "beacon: record 0: timeline: length 64 exceeds limit 63"},
		{"stalls", typical, Limits{MaxStalls: 1}, ErrLimit, fmt.Sprintf("beacon: record 0: stall_list: length %d exceeds limit 1", len(typicalBatch().Records[0].StallList))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeBatch(tc.in, tc.lim)
			if !errors.Is(err, tc.is) || !errors.Is(err, ErrLimit) {
				t.Fatalf("err = %v, want %v and ErrLimit", err, tc.is)
			}
			if got := err.Error(); got != tc.msg {
				t.Fatalf("err = %q, want %q", got, tc.msg)
			}
			if got, want := RejectFor(err), RejectLimit; got != want {
				t.Fatalf("RejectFor = %v, want %v", got, want)
			}
		})
	}
	// At the limits, the same inputs pass.
	b := typicalBatch()
	var stalls, buckets int
	for _, r := range b.Records {
		stalls = max(stalls, len(r.StallList))
		buckets = max(buckets, r.ITL.NumBuckets(), r.ITLTokens.NumBuckets())
	}
	if _, err := DecodeBatch(typical, Limits{MaxBytes: len(typical), MaxRecords: 10, MaxBuckets: buckets, MaxTimeline: 64, MaxStalls: stalls, MaxString: 104}); err != nil {
		t.Fatalf("at the limits: %v", err)
	}
}

// patchRecord encodes a one-record batch, lets edit change the record's
// body, and fixes the record's length prefix.
func patchRecord(t *testing.T, b *Batch, edit func(body []byte) []byte) []byte {
	t.Helper()
	enc := mustEncode(t, b)
	id := b.Records[0].StreamID[:]
	at := bytes.Index(enc, id)
	// The record length is the uvarint right before the stream id.
	lenStart := at - 1
	for lenStart > 0 && enc[lenStart-1]&0x80 != 0 {
		lenStart--
	}
	body := edit(bytes.Clone(enc[at:]))
	out := appendUvarint(bytes.Clone(enc[:lenStart]), uint64(len(body)))
	return append(out, body...)
}

func TestInvalidValues(t *testing.T) {
	base := minimalBatch()
	base.Records[0].Timeline = []Stamp{{AtUs: 10, Read: 1}}
	base.Records[0].StallList = []Stall{{StartUs: 5, EndUs: 300005, Cause: 1}}
	base.Records[0].TTFTCause = 2
	base.Records[0].TokensPerSec = 42
	enc := mustEncode(t, base)
	if got := mustDecode(t, enc, Limits{}); !batchesEqual(got, base) {
		t.Fatal("base differs")
	}
	strAt := 16 + 1 // after stream id and flags: origin_id
	replaceStr := func(b []byte, idx int, s string) []byte {
		// walk idx rstrings from strAt
		p := strAt
		for range idx {
			h := int(b[p])
			p++
			if h > 0 {
				p += h - 1
			}
		}
		h := int(b[p])
		old := 1
		if h > 0 {
			old += h - 1
		}
		return append(append(append(b[:p:p], byte(len(s)+1)), s...), b[p+old:]...)
	}
	for _, tc := range []struct {
		name string
		edit func([]byte) []byte
		msg  string
	}{
		{"utf8", func(b []byte) []byte { return replaceStr(b, 5, "gpt\xff") }, "beacon: record 0: model: invalid UTF-8"},
		{"query in path", func(b []byte) []byte { return replaceStr(b, 2, "/c?id=1") }, "beacon: record 0: page_path: contains a query or fragment"},
		{"fragment in url path", func(b []byte) []byte { return replaceStr(b, 4, "/a#b") }, "beacon: record 0: url_path: contains a query or fragment"},
		{"varint overflow", func(b []byte) []byte {
			return append(b[:16:16], 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f)
		}, "beacon: record 0: flags: varint overflows 64 bits"},
		{"trailing", func(b []byte) []byte { return append(b, 0) }, "beacon: record 0: length: 1 bytes after the last field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeBatch(patchRecord(t, base, tc.edit), Limits{})
			if err == nil || err.Error() != tc.msg {
				t.Fatalf("err = %v, want %q", err, tc.msg)
			}
			if got := RejectFor(err); got != RejectMalformed {
				t.Fatalf("RejectFor = %v, want malformed", got)
			}
		})
	}
	// Values that only a hand-made encoding can carry: build the record body
	// from scratch.
	head := func(flags byte) []byte {
		b := append(bytes.Clone(base.Records[0].StreamID[:]), flags)
		b = append(b, 0, 0, 0, 0, 0, 0, 0, 0) // eight empty rstrings (same as "")
		b = appendVarint(b, 0)
		b = append(b, 0, 0) // format, status
		b = appendUvarint(b, 200)
		return b
	}
	tail := func(b []byte) []byte { // times, events, tokens, reads, bytes
		b = append(b, 0, 0, 0, 0)
		return append(b, 0, 0, 0, 0, 0)
	}
	for _, tc := range []struct {
		name string
		body []byte
		msg  string
	}{
		{"http status", append(append(bytes.Clone(base.Records[0].StreamID[:]), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), appendUvarint(nil, 70000)...), "beacon: record 0: http_status: 70000 exceeds 65535"},
		{"time overflow", append(head(0), appendUvarint(nil, 1<<32+1)...), "beacon: record 0: ttfb_us: 4294967297 exceeds 4294967295"},
		{"nan rate", append(append(tail(head(flagStats)), 0, 0, 0, 0, 0), appendFloat32(nil, float32(math.NaN()))...), "beacon: record 0: tokens_per_sec: not a finite non-negative number"},
		{"negative jank", append(append(append(append(tail(head(flagStats)), 0, 0, 0, 0, 0), appendFloat32(nil, 1)...), 0, 0), appendFloat32(nil, -1)...), "beacon: record 0: jank: not a finite non-negative number"},
		{"ttft cause", append(tail(head(flagCauses)), 7), "beacon: record 0: ttft_cause: 7 out of range [0, 4]"},
		{"stall cause", append(tail(head(flagStalls)), 1, 2, 2, 9, 0), "beacon: record 0: stall_list[0].cause: 9 out of range [0, 4]"},
		{"stall start", append(tail(head(flagStalls)), 1, 1, 0, 0, 0), "beacon: record 0: stall_list[0].start_us: out of the uint32 range"},
		{"stall truncated", append(tail(head(flagStalls)), 2, 2, 2, 1, 0, 4, 0x80, 0x80, 0x80), "beacon: record 0: stall_list[1].end_us: truncated"},
		{"timeline at", append(tail(head(flagTimeline)), 2, 0, 1, 4<<3, 5<<3), "beacon: record 0: timeline[1].at_us: out of the uint32 range"},
		{"timeline read", append(tail(head(flagTimeline)), 1, 0, 1, 2<<1, 1), "beacon: record 0: timeline[0].read: out of the uint32 range"},
		{"timeline read code", append(tail(head(flagTimeline)), 1, 0, 1, 3<<1), "beacon: record 0: timeline[0].read: bad read code 3"},
		{"timeline read truncated", append(tail(head(flagTimeline)), 2, 0, 1, 1<<1, 2<<1), "beacon: record 0: timeline[1].read: truncated"},
		{"timeline count vs bytes", append(tail(head(flagTimeline)), 100, 0, 1, 0), "beacon: record 0: timeline: length 100 exceeds the 3 bytes left"},
		{"timeline unit", append(tail(head(flagTimeline)), 1, 0, 0, 0, 0), "beacon: record 0: timeline_unit: 0"},
		{"timeline unit overflow", append(append(tail(head(flagTimeline)), 1, 0), append(appendUvarint(nil, 1<<32-1), 4<<3)...), "beacon: record 0: timeline[0].at_us: out of the uint32 range"},
		{"histogram", append(tail(head(flagITL)), 0, 1, 0, 1, 0), "beacon: record 0: itl.count: run at index 0 starts or ends with an empty bucket"},
		{"histogram truncated", append(tail(head(flagITL)), 0, 1, 0, 1, 1), "beacon: record 0: itl.sum: truncated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeBatch(patchRecord(t, base, func([]byte) []byte { return tc.body }), Limits{})
			if err == nil || err.Error() != tc.msg {
				t.Fatalf("err = %v, want %q", err, tc.msg)
			}
			var de *DecodeError
			if !errors.As(err, &de) || de.Record != 0 {
				t.Fatalf("err %#v: want a *DecodeError for record 0", err)
			}
		})
	}
	// A record length beyond the message.
	enc2 := bytes.Clone(enc)
	enc2 = enc2[:len(enc2)-1]
	if _, err := DecodeBatch(enc2, Limits{}); !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), "record 0: length") {
		t.Fatalf("err = %v", err)
	}
}

func TestEncodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Batch)
		msg  string
	}{
		{"query", func(b *Batch) { b.Records[0].URLPath = "/v1?key=secret" }, "beacon: record 0: url_path: contains a query or fragment"},
		{"utf8", func(b *Batch) { b.Client.UserAgent = "\xc0" }, "beacon: client.user_agent: invalid UTF-8"},
		{"nan", func(b *Batch) { b.Records[0].Jank = float32(math.Inf(1)) }, "beacon: record 0: jank: not a finite non-negative number"},
		{"cause", func(b *Batch) { b.Records[0].StallList = []Stall{{Cause: 5}} }, "beacon: record 0: stall_list[0].cause: 5 out of range [0, 4]"},
		{"ttft cause", func(b *Batch) { b.Records[0].TTFTCause = 200 }, "beacon: record 0: ttft_cause: 200 out of range [0, 4]"},
		{"end", func(b *Batch) { b.Records[0].End = 5 }, "beacon: record 0: end: 5 out of range [0, 4]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := minimalBatch()
			tc.edit(b)
			dst := []byte("keep")
			out, err := b.AppendBinary(dst)
			if err == nil || err.Error() != tc.msg || !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want %q", err, tc.msg)
			}
			if string(out) != "keep" {
				t.Fatalf("dst changed on error: %q", out)
			}
		})
	}
}

func TestRecordStringsRepeat(t *testing.T) {
	b := typicalBatch()
	dec := mustDecode(t, mustEncode(t, b), Limits{})
	if got, want := dec.Records[9].URLPath, b.Records[0].URLPath; got != want {
		t.Fatalf("repeated url_path = %q, want %q", got, want)
	}
	// Switching a value back and forth works.
	b.Records[1].Model = "other"
	b.Records[3].Model = ""
	if got := mustDecode(t, mustEncode(t, b), Limits{}); !batchesEqual(got, b) {
		t.Fatal("round trip with changing strings differs")
	}
}

func TestStripQuery(t *testing.T) {
	for _, tc := range []struct{ in, origin, path string }{
		{"https://chat.example.com/c/42?q=secret#x", "https://chat.example.com", "/c/42"},
		{"https://u:p@Chat.Example.COM:443/c/42", "https://chat.example.com", "/c/42"},
		{"HTTPS://chat.example.com", "https://chat.example.com", "/"},
		{"http://127.0.0.1:8080?x=1", "http://127.0.0.1:8080", "/"},
		{"http://example.com:80/a/b/", "http://example.com", "/a/b/"},
		{"https://example.com:80/", "https://example.com:80", "/"},
		{"wss://example.com:443/ws", "wss://example.com", "/ws"},
		{"http://[::1]:3000/api#frag", "http://[::1]:3000", "/api"},
		{"http://[::1]/api", "http://[::1]", "/api"},
		{"https://example.com#a?b", "https://example.com", "/"},
		{"https://example.com/p;x=1", "https://example.com", "/p;x=1"},
		{"https://user@example.com:8443/a@b", "https://example.com:8443", "/a@b"},
		{"https://example.com:/x", "https://example.com", "/x"},
		{"/api/chat?stream=1", "", "/api/chat"},
		{"api/chat", "", "api/chat"},
		{"//cdn.example.com/x?y", "//cdn.example.com", "/x"},
		{"data:text/plain,hello", "data:", ""},
		{"blob:https://example.com/uuid", "blob:", ""},
		{"about:blank", "about:", ""},
		{"", "", ""},
		{"?only=query", "", ""},
		{"1http://x/", "", "1http://x/"},
	} {
		o, p := StripQuery(tc.in)
		if o != tc.origin || p != tc.path {
			t.Errorf("StripQuery(%q) = %q, %q, want %q, %q", tc.in, o, p, tc.origin, tc.path)
		}
		if strings.ContainsAny(o+p, "?#") {
			t.Errorf("StripQuery(%q) kept a query or fragment", tc.in)
		}
	}
	if n := testing.AllocsPerRun(100, func() { StripQuery("https://chat.example.com/c/42?q=1") }); n > 1 {
		t.Errorf("StripQuery allocates %v times", n)
	}
}

func TestNames(t *testing.T) {
	if got := fmt.Sprint(KindBatch, KindAck, KindOrigin, Kind(9)); got != "batch ack origin kind(9)" {
		t.Fatalf("kinds: %s", got)
	}
	if got := fmt.Sprint(RejectNone, RejectMalformed, RejectVersion, RejectLimit, RejectSite, RejectOverload, RejectRetry, Reject(99)); got != "none malformed version limit site overload retry reject(99)" {
		t.Fatalf("rejects: %s", got)
	}
	for _, tc := range []struct {
		err  error
		want Reject
	}{
		{nil, RejectNone},
		{&DecodeError{Err: ErrTruncated}, RejectMalformed},
		{&DecodeError{Err: ErrMagic}, RejectMalformed},
		{&DecodeError{Err: ErrKind}, RejectMalformed},
		{&DecodeError{Err: ErrVersion}, RejectVersion},
		{&DecodeError{Err: ErrTooBig}, RejectLimit},
		{&DecodeError{Err: ErrLimit}, RejectLimit},
	} {
		if got := RejectFor(tc.err); got != tc.want {
			t.Errorf("RejectFor(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// FuzzDecodeBatch: no input panics; whatever decodes re-encodes, and
// decode(encode(decode(x))) == decode(x) with the canonical encoding stable.
func FuzzDecodeBatch(f *testing.F) {
	for _, b := range []*Batch{minimalBatch(), typicalBatch(), {}} {
		f.Add(mustEncode(f, b))
	}
	f.Add(Ack{Seq: 1}.AppendBinary(nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		isDecodeError := func(err error) {
			var de *DecodeError
			if !errors.As(err, &de) || de.Err == nil || !strings.HasPrefix(err.Error(), "beacon: ") {
				t.Fatalf("error %#v is not a *DecodeError with a sentinel", err)
			}
		}
		b, bad, err := DecodeBatchRecords(data, Limits{})
		checkAgrees(t, data)
		strict, strictErr := DecodeBatch(data, Limits{})
		if (err != nil || len(bad) > 0) != (strictErr != nil) || (strictErr == nil) != (strict != nil) {
			t.Fatalf("DecodeBatch and DecodeBatchRecords disagree: %v / %d bad, %v", err, len(bad), strictErr)
		}
		if err != nil {
			isDecodeError(err)
			return
		}
		for _, e := range bad {
			isDecodeError(e)
		}
		// What was kept is a batch any decoder accepts, except values of a
		// newer sender this minor cannot say (an end reason it does not
		// know): the batches of one below keep the sender's minor for them.
		enc, err := b.AppendBinary(nil)
		newer := len(data) > 4 && data[4] > Minor
		if err != nil && !(newer && errors.Is(err, ErrInvalid)) {
			t.Fatalf("decoded batch does not encode: %v", err)
		}
		if err == nil {
			b2, err := DecodeBatch(enc, bigLimits)
			if err != nil {
				t.Fatalf("re-encoded batch does not decode: %v", err)
			}
			if !batchesEqual(b, b2) {
				t.Fatalf("decode(encode(decode(x))) != decode(x)")
			}
			enc2, err := b2.AppendBinary(nil)
			if err != nil || !bytes.Equal(enc, enc2) {
				t.Fatalf("canonical encoding not stable: %v", err)
			}
		}
		// Each record kept, copied from the wire as a batch of one, decodes
		// to itself (non-canonical input and newer minors included).
		bw, wire, badW, err := DecodeBatchWire(data, Limits{})
		if err != nil || len(badW) != len(bad) || !batchesEqual(bw, b) || len(wire) != len(b.Records) {
			t.Fatalf("DecodeBatchWire disagrees with DecodeBatchRecords: %v", err)
		}
		var rb RecordBatcher
		rb.Reset(b.Site, &b.Client)
		for i := range b.Records {
			one, err := AppendRecordBatch(nil, b.Site, &b.Client, &b.Records[i], wire[i])
			if err != nil {
				t.Fatalf("record %d: AppendRecordBatch refused a decoded record: %v", i, err)
			}
			if same, err := rb.Append(nil, &b.Records[i], wire[i]); err != nil || !bytes.Equal(same, one) {
				t.Fatalf("record %d: RecordBatcher appended another batch than AppendRecordBatch (%v)", i, err)
			}
			got, err := DecodeBatch(one, bigLimits)
			if err != nil {
				t.Fatalf("record %d: batch of one does not decode: %v", i, err)
			}
			if !batchesEqual(got, &Batch{Site: b.Site, Client: b.Client, Records: []Record{b.Records[i]}}) {
				t.Fatalf("record %d: batch of one decodes to another record", i)
			}
		}
	})
}

// checkAgrees: CheckBatchWire accepts and refuses what DecodeBatchWire does,
// with the same errors and wires, and the same records but for the values
// it leaves in the wires.
func checkAgrees(t *testing.T, data []byte) {
	t.Helper()
	for _, lim := range []Limits{{}, {MaxBuckets: 3, MaxTimeline: 4, MaxStalls: 1}} {
		db, dwire, dbad, derr := DecodeBatchWire(data, lim)
		cb, cwire, cbad, cerr := CheckBatchWire(data, lim)
		if fmt.Sprint(derr) != fmt.Sprint(cerr) || fmt.Sprint(dbad) != fmt.Sprint(cbad) {
			t.Fatalf("limits %+v: CheckBatchWire: %v, bad %v; DecodeBatchWire: %v, bad %v", lim, cerr, cbad, derr, dbad)
		}
		if (db == nil) != (cb == nil) || len(dwire) != len(cwire) {
			t.Fatalf("limits %+v: CheckBatchWire returned %d wires, DecodeBatchWire %d", lim, len(cwire), len(dwire))
		}
		for i := range dwire {
			if dwire[i].minor != cwire[i].minor || dwire[i].flags != cwire[i].flags || !bytes.Equal(dwire[i].tail, cwire[i].tail) {
				t.Fatalf("limits %+v: record %d: the wires differ", lim, i)
			}
		}
		if db == nil {
			continue
		}
		for i := range db.Records {
			r := &db.Records[i]
			r.ITL, r.ITLTokens, r.Timeline, r.StallList = hist.Histogram{}, hist.Histogram{}, nil, nil
		}
		if !batchesEqual(db, cb) {
			t.Fatalf("limits %+v: CheckBatchWire's batch differs from DecodeBatchWire's beyond the values it leaves out", lim)
		}
	}
	// A Scratch that held another batch (more records, every field set,
	// one record left out) gives what a fresh CheckBatchWire does.
	var sc Scratch
	for _, prev := range [][]byte{typicalWithBad(t), mustEncode(t, typicalBatch())} {
		if _, _, _, err := sc.CheckBatchWire(prev, Limits{}); err != nil {
			t.Fatal(err)
		}
		want, wwire, wbad, werr := CheckBatchWire(data, Limits{})
		got, gwire, gbad, gerr := sc.CheckBatchWire(data, Limits{})
		if fmt.Sprint(werr) != fmt.Sprint(gerr) || fmt.Sprint(wbad) != fmt.Sprint(gbad) || (want == nil) != (got == nil) ||
			(want != nil && !batchesEqual(want, got)) || (want != nil && fmt.Sprint(wwire) != fmt.Sprint(gwire)) {
			t.Fatalf("after a batch of its own, Scratch.CheckBatchWire gives %v, bad %v, another batch or wires; CheckBatchWire: %v, bad %v", gerr, gbad, werr, wbad)
		}
		sc.Reset()
	}
}

// typicalWithBad is typicalBatch's message with its first record's model
// no longer UTF-8: a record CheckBatchWire leaves out.
func typicalWithBad(t *testing.T) []byte {
	t.Helper()
	b := typicalBatch()
	b.Records[0].Model = "gpt-tesX"
	p := mustEncode(t, b)
	i := bytes.Index(p, []byte("gpt-tesX"))
	p[i+len("gpt-tes")] = 0xff
	if _, _, bad, err := CheckBatchWire(p, Limits{}); err != nil || len(bad) != 1 {
		t.Fatalf("want one record left out: %v, %v", bad, err)
	}
	return p
}

// TestCheckBatchWire: a typical batch and the fuzz seeds, with what
// FuzzDecodeBatch checks of CheckBatchWire, and a check-decoded record
// stores as the fully decoded one does.
func TestCheckBatchWire(t *testing.T) {
	typical := mustEncode(t, typicalBatch())
	for _, data := range [][]byte{typical, typical[:len(typical)/2], mustEncode(t, minimalBatch()), reencode(t, typicalBatch(), encoder{minor: 0})} {
		checkAgrees(t, data)
	}
	b, wire, _, err := DecodeBatchWire(typical, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	cb, cwire, _, err := CheckBatchWire(typical, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range b.Records {
		if cb.Records[i].ITL.Count() != 0 || cb.Records[i].Timeline != nil {
			t.Fatalf("record %d: CheckBatchWire stored values it should leave in the wire", i)
		}
		want, err1 := AppendRecordBatch(nil, b.Site, &b.Client, &b.Records[i], wire[i])
		got, err2 := AppendRecordBatch(nil, cb.Site, &cb.Client, &cb.Records[i], cwire[i])
		if err1 != nil || err2 != nil || !bytes.Equal(got, want) {
			t.Fatalf("record %d: the batch of one from CheckBatchWire differs from DecodeBatchWire's (%v, %v)", i, err2, err1)
		}
	}
}

// TestFuzzCorpus writes the committed seed corpus with -update (the seeds
// in FuzzDecodeBatch plus edge cases); without it, checks it is present.
func TestFuzzCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeBatch")
	newer, err := encoder{minor: Minor + 1, extra: []byte{1, 2, 3}}.appendBatch(nil, typicalBatch())
	if err != nil {
		t.Fatal(err)
	}
	typical := mustEncode(t, typicalBatch())
	seeds := map[string][]byte{
		"minimal":         mustEncode(t, minimalBatch()),
		"typical":         typical,
		"typical-cut":     typical[:len(typical)/2],
		"newer-minor":     newer,
		"older-minor":     reencode(t, typicalBatch(), encoder{minor: 0}),
		"empty-batch":     mustEncode(t, &Batch{}),
		"ack":             Ack{Seq: 9, Reject: RejectSite}.AppendBinary(nil),
		"header-only":     typical[:headerLen],
		"records-1000":    append(bytes.Clone(mustEncode(t, &Batch{})[:len(mustEncode(t, &Batch{}))-1]), 0xe8, 0x07),
		"version-2":       append([]byte{magic0, magic1, magic2, 2, 0, 1}, typical[headerLen:]...),
		"not-a-beacon":    []byte(`{"seq":1,"records":[]}`),
		"varint-overflow": append(typical[:headerLen:headerLen], 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
	}
	for name, data := range seeds {
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
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./wasm/beacon -update)", err)
		}
		if string(got) != content {
			t.Fatalf("%s is stale (run go test ./wasm/beacon -update)", path)
		}
	}
}

func BenchmarkEncodeBatch(b *testing.B) {
	batch := typicalBatch()
	buf := mustEncode(b, batch)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	start := cpubench.Now()
	for b.Loop() {
		var err error
		if buf, err = batch.AppendBinary(buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(buf))/float64(len(batch.Records)), "bytes/record")
	cpubench.Report(b, start, len(buf))
}

// BenchmarkDecodeBatch decodes a typical batch ("decode") and checks it as
// a collector reads it, its records' values left in their wires ("check",
// CheckBatchWire).
func BenchmarkDecodeBatch(b *testing.B) {
	batch := typicalBatch()
	buf := mustEncode(b, batch)
	for _, mode := range []struct {
		name   string
		decode func() error
	}{
		{"decode", func() error { _, err := DecodeBatch(buf, Limits{}); return err }},
		{"check", func() error { _, _, _, err := CheckBatchWire(buf, Limits{}); return err }},
	} {
		b.Run(mode.name, func(b *testing.B) {
			cpubench.Loop(b, len(buf), mode.decode)
			b.ReportMetric(float64(len(buf))/float64(len(batch.Records)), "bytes/record")
		})
	}
}

func BenchmarkAck(b *testing.B) {
	buf := Ack{Seq: 12345}.AppendBinary(nil)
	b.ReportAllocs()
	start := cpubench.Now()
	for b.Loop() {
		buf = Ack{Seq: 12345}.AppendBinary(buf[:0])
		if _, err := DecodeAck(buf); err != nil {
			b.Fatal(err)
		}
	}
	cpubench.Report(b, start, 0)
}

// TestLongSections: section lengths of 1, 2 and 3 varint bytes.
func TestLongSections(t *testing.T) {
	for _, n := range []int{0, 100, 5000, 20000, 300000} {
		b := minimalBatch()
		b.Records[0].PagePath = "/" + strings.Repeat("p", n)
		b.Client.UserAgent = strings.Repeat("u", n)
		b.Records = append(b.Records, b.Records[0])
		b.Records[1].Model = strings.Repeat("m", n)
		got := mustDecode(t, mustEncode(t, b), bigLimits)
		if !batchesEqual(got, b) {
			t.Fatalf("n=%d: round trip differs", n)
		}
	}
}

// A re-chunked stream (a buffering proxy delivered every event in one read)
// has a timeline of identical stamps, each one byte on the wire; it must
// decode (regression: the decoder assumed two bytes per entry).
func TestTimelineOneRead(t *testing.T) {
	for _, n := range []int{1, 2, 42, 4096} {
		b := minimalBatch()
		tl := make([]Stamp, n)
		for i := range tl {
			tl[i] = Stamp{AtUs: 842_700, Read: 0, Content: true}
		}
		b.Records[0].Timeline = tl
		got := mustDecode(t, mustEncode(t, b), DefaultLimits)
		if !batchesEqual(got, b) {
			t.Fatalf("n=%d: round trip differs", n)
		}
	}
}

// TestBadRecordsAlone: DecodeBatchRecords leaves out each record whose own
// bytes are wrong and keeps the others, the strings they repeat included;
// DecodeBatch refuses the batch for the first of them.
func TestBadRecordsAlone(t *testing.T) {
	b := typicalBatch()
	b.Records[2].Model = "gpt-\xff"                // invalid UTF-8
	b.Records[3].Model = b.Records[2].Model        // repeats it (0 marker): invalid too
	b.Records[4].Model = "gpt-4o"                  // a new value again
	b.Records[5].Jank = float32(math.NaN())        // an invalid rate
	b.Records[6].URLPath = "/v1/chat?key=x"        // a query
	b.Records[7].StallList = []Stall{{Cause: 200}} // a cause out of range
	enc := reencode(t, b, encoder{minor: Minor, unchecked: true})
	if !bytes.Contains(enc, []byte("gpt-\xff")) || bytes.Count(enc, []byte("gpt-\xff")) != 1 {
		t.Fatal("the invalid model is not written once (record 3 should repeat it with the 0 marker)")
	}
	got, bad, err := DecodeBatchRecords(enc, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, e := range bad {
		msgs = append(msgs, e.Error())
		if !errors.Is(e, ErrInvalid) {
			t.Errorf("%v: not ErrInvalid", e)
		}
	}
	want := []string{
		"beacon: record 2: model: invalid UTF-8",
		"beacon: record 3: model: invalid UTF-8",
		"beacon: record 5: jank: not a finite non-negative number",
		"beacon: record 6: url_path: contains a query or fragment",
		"beacon: record 7: stall_list[0].cause: 200 out of range [0, 4]",
	}
	if strings.Join(msgs, "\n") != strings.Join(want, "\n") {
		t.Fatalf("left out:\n%s\nwant:\n%s", strings.Join(msgs, "\n"), strings.Join(want, "\n"))
	}
	keep := &Batch{Seq: b.Seq, Site: b.Site, Client: b.Client, Dropped: b.Dropped}
	for _, i := range []int{0, 1, 4, 8, 9} {
		keep.Records = append(keep.Records, b.Records[i])
	}
	if !batchesEqual(got, keep) {
		t.Fatal("the records kept differ from those sent")
	}
	if _, err := DecodeBatch(enc, Limits{}); fmt.Sprint(err) != want[0] {
		t.Fatalf("DecodeBatch err = %v, want %q", err, want[0])
	}
	// A record section that ends too soon is left out alone too; one whose
	// strings cannot be read fails the batch (the next records' repeated
	// strings could not be resolved).
	short := patchRecord(t, minimalBatch(), func(body []byte) []byte { return body[:len(body)-1] })
	if got, bad, err := DecodeBatchRecords(short, Limits{}); err != nil || len(bad) != 1 || len(got.Records) != 0 || !errors.Is(bad[0], ErrTruncated) {
		t.Fatalf("record cut after its strings: %v, %v, %v", got, bad, err)
	}
	cut := patchRecord(t, minimalBatch(), func(body []byte) []byte { return body[:17+3] })
	if _, _, err := DecodeBatchRecords(cut, Limits{}); !errors.Is(err, ErrTruncated) {
		t.Fatalf("record cut inside its strings: err = %v, want ErrTruncated for the batch", err)
	}
}
