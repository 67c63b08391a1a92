package store

import (
	"bytes"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector"
)

func testSpool(t *testing.T, dir string) *spool {
	t.Helper()
	s, err := openSpool(dir, zerolog.New(zerolog.NewTestWriter(t)))
	if err != nil {
		t.Fatalf("open spool: %v", err)
	}
	return s
}

func TestSpoolAppendReadRemove(t *testing.T) {
	dir := t.TempDir()
	s := testSpool(t, dir)
	s.segBytes = 100 // rotate after every couple of frames
	var want [][]byte
	for i := 0; i < 7; i++ {
		p := bytes.Repeat([]byte{byte('a' + i)}, 10+i*10)
		want = append(want, p)
		if err := s.Append(p); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	s.Close()

	// A new spool on the same directory sees everything, oldest first.
	s = testSpool(t, dir)
	var got [][]byte
	for {
		num, ok := s.Oldest()
		if !ok {
			break
		}
		frames, err := s.Read(num)
		if err != nil {
			t.Fatalf("read %d: %v", num, err)
		}
		got = append(got, frames...)
		if err := s.Remove(num); err != nil {
			t.Fatalf("remove %d: %v", num, err)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("read %d frames, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("frame %d = %q, want %q", i, got[i], want[i])
		}
	}
	if got, want := s.Bytes(), int64(0); got != want {
		t.Fatalf("Bytes after removing all = %d, want %d", got, want)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("%d files left in the spool directory", len(entries))
	}
}

// TestReadFramesEveryPrefix cuts a segment at every length, as a crash could:
// never a panic, exactly the complete frames back, a torn error otherwise.
func TestReadFramesEveryPrefix(t *testing.T) {
	dir := t.TempDir()
	s := testSpool(t, dir)
	payloads := [][]byte{[]byte("first"), []byte("second frame"), {}, []byte("fourth")}
	var ends []int // offset after each frame
	off := 0
	for _, p := range payloads {
		if err := s.Append(p); err != nil {
			t.Fatal(err)
		}
		off += frameHeader + len(p)
		ends = append(ends, off)
	}
	s.Close()
	seg, err := os.ReadFile(s.path(1))
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n <= len(seg); n++ {
		frames, _, err := readFrames(bytes.NewReader(seg[:n]))
		complete := 0
		for _, e := range ends {
			if e <= n {
				complete++
			}
		}
		if got, want := len(frames), complete; got != want {
			t.Fatalf("prefix %d: %d frames, want %d", n, got, want)
		}
		atBoundary := n == 0 || (complete > 0 && ends[complete-1] == n)
		if got, want := err == nil, atBoundary; got != want {
			t.Fatalf("prefix %d: err = %v, want error %v", n, err, !want)
		}
		if err != nil && !errors.Is(err, errTorn) {
			t.Fatalf("prefix %d: err = %v, want errTorn", n, err)
		}
	}
}

func TestReadFramesCorrupt(t *testing.T) {
	dir := t.TempDir()
	s := testSpool(t, dir)
	for _, p := range []string{"one", "two", "three"} {
		if err := s.Append([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	seg, _ := os.ReadFile(s.path(1))
	tests := []struct {
		name   string
		mutate func([]byte)
		want   int
	}{
		{"bad CRC in second frame", func(b []byte) { b[frameHeader+3+frameHeader] ^= 1 }, 1},
		{"huge length in first frame", func(b []byte) { b[3] = 0xff }, 0},
		{"intact", func([]byte) {}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := bytes.Clone(seg)
			tt.mutate(b)
			frames, _, _ := readFrames(bytes.NewReader(b))
			if got := len(frames); got != tt.want {
				t.Fatalf("%d frames, want %d", got, tt.want)
			}
		})
	}
}

func TestBatchEncodingRoundTrip(t *testing.T) {
	var st collector.Stream
	st.Site, st.ReceivedAt = "demo", time.UnixMilli(1_700_000_000_123).UTC()
	st.StreamID[0] = 7
	st.TTFTUs = 123_456
	st.ITL.Record(20_000)
	st.ITL.Record(0.5)
	b := newRowBatch([]collector.Stream{st, st})
	p, err := encodeBatch(&b)
	if err != nil {
		t.Fatal(err)
	}
	// A version 2 frame (before the inbox) reads as inbox rows.
	rows, err := decodeFrame(p)
	if err != nil {
		t.Fatalf("decode v2: %v", err)
	}
	if len(rows) != 2 {
		t.Fatalf("decode v2: %d rows, want 2", len(rows))
	}
	// The current version: inbox rows, round trip to the stream.
	p3, err := encodeFrame(rows)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeFrame(p3)
	if err != nil {
		t.Fatalf("decode current version: %v", err)
	}
	if len(got) != 2 || got[0].StreamID != b.Streams[0].StreamID || got[0].Kind != KindClient {
		t.Fatalf("round trip: got %+v", got)
	}
	s, err := got[1].Client()
	if err != nil {
		t.Fatal(err)
	}
	if s.TTFTUs != 123_456 || s.ITL.ZeroCount() != 1 || !s.ReceivedAt.Equal(st.ReceivedAt) || s.Site != "demo" {
		t.Fatalf("round trip: stream %+v", s)
	}
	p3[0] = 99
	if _, err := decodeFrame(p3); !errors.Is(err, errSpoolVersion) {
		t.Fatalf("decode of version 99: err = %v, want errSpoolVersion", err)
	}
}

// TestDecodeSpoolV1: a frame spooled before the names (version 1: codes in
// Format, Status, TTFTCause, StallCause) is read as names.
func TestDecodeSpoolV1(t *testing.T) {
	type v1Row struct { // the fields of a version 1 streamRow that matter here
		StreamID                  string
		TTFTUs                    *uint32
		Format, Status, TTFTCause uint8
		StallStartUs              []uint32
		StallCause                []uint8
	}
	ttft := uint32(150_000)
	var buf bytes.Buffer
	buf.WriteByte(1)
	err := gob.NewEncoder(&buf).Encode(struct{ Streams []v1Row }{[]v1Row{
		{StreamID: "a", TTFTUs: &ttft, Format: 3, Status: 2, TTFTCause: 2, StallStartUs: []uint32{1, 2}, StallCause: []uint8{3, 4}},
		{StreamID: "b", Format: 42, Status: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := decodeBatch(buf.Bytes())
	if err != nil {
		t.Fatalf("decode v1: %v", err)
	}
	if len(b.Streams) != 2 {
		t.Fatalf("%d rows, want 2", len(b.Streams))
	}
	a, c := b.Streams[0], b.Streams[1]
	if got, want := fmt.Sprintf("%s %d %s %s %s %v %q %v", a.StreamID, *a.TTFTUs, a.FormatName, a.StatusName, a.TTFTCauseName,
		a.StallCauses, a.EndReason, a.HeadersUs), `a 150000 anthropic aborted network [page origin] "" <nil>`; got != want {
		t.Errorf("row a = %q, want %q", got, want)
	}
	if got, want := fmt.Sprintf("%s %s %s %s %d", c.StreamID, c.FormatName, c.StatusName, c.TTFTCauseName, len(c.StallCauses)),
		"b unknown complete none 0"; got != want {
		t.Errorf("row b = %q, want %q", got, want)
	}
}

func TestColumnLists(t *testing.T) {
	if got, want := len(toColumns([]streamRow{{}})), len(tagsOf[streamRow]()); got != want {
		t.Fatalf("stream columns = %d, want %d", got, want)
	}
	if got, want := timelineColumns, "received_at, site, stream_id, at_us, read, content, dropped"; got != want {
		t.Fatalf("timelineColumns = %q, want %q", got, want)
	}
}

var nopLog = zerolog.Nop()

func readFile(p string) ([]byte, error) { return os.ReadFile(p) }

// threeFrames returns a segment of three frames and the offset of each.
func threeFrames(t *testing.T) (seg []byte, starts []int) {
	t.Helper()
	s := testSpool(t, t.TempDir())
	off := 0
	for _, p := range []string{"one", "second", "third frame"} {
		if err := s.Append([]byte(p)); err != nil {
			t.Fatal(err)
		}
		starts = append(starts, off)
		off += frameHeader + len(p)
	}
	s.Close()
	seg, err := os.ReadFile(s.path(1))
	if err != nil {
		t.Fatal(err)
	}
	return seg, starts
}

// TestReadFramesTornOnlyAtEOF: a bad frame is a torn tail only when nothing
// follows it; corruption with frames after it is an error, not a short read.
func TestReadFramesTornOnlyAtEOF(t *testing.T) {
	seg, starts := threeFrames(t)
	tests := []struct {
		name   string
		mutate func([]byte) []byte
		frames int
		want   error // nil, errTorn or errCorrupt
	}{
		{"bad CRC in the last frame", func(b []byte) []byte { b[len(b)-1] ^= 1; return b }, 2, errTorn},
		{"last frame cut short", func(b []byte) []byte { return b[:len(b)-3] }, 2, errTorn},
		{"bad CRC in the middle frame", func(b []byte) []byte { b[starts[1]+frameHeader] ^= 1; return b }, 1, errCorrupt},
		{"bad CRC in the first frame", func(b []byte) []byte { b[frameHeader] ^= 1; return b }, 0, errCorrupt},
		{"huge length in the middle frame", func(b []byte) []byte { b[starts[1]+3] = 0xff; return b }, 1, errCorrupt},
		{"garbage after the last frame", func(b []byte) []byte {
			return append(b, 3, 0, 0, 0, 0, 0, 0, 0, 'x', 'y', 'z', 'w')
		}, 3, errCorrupt},
		{"intact", func(b []byte) []byte { return b }, 3, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frames, _, err := readFrames(bytes.NewReader(tt.mutate(bytes.Clone(seg))))
			if len(frames) != tt.frames {
				t.Errorf("%d frames, want %d", len(frames), tt.frames)
			}
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("input/output error") }

// TestReadFramesIOError: a read error is neither EOF nor a torn tail.
func TestReadFramesIOError(t *testing.T) {
	seg, starts := threeFrames(t)
	for _, cut := range []int{starts[1], starts[1] + 4, starts[1] + frameHeader + 2} {
		frames, _, err := readFrames(io.MultiReader(bytes.NewReader(seg[:cut]), failingReader{}))
		if err == nil || errors.Is(err, errTorn) {
			t.Fatalf("cut at %d: err = %v, want the I/O error", cut, err)
		}
		if len(frames) != 1 {
			t.Fatalf("cut at %d: %d frames, want 1", cut, len(frames))
		}
	}
}

// TestSpoolReadCorruptKeepsSegment: Read of a segment with a corrupt frame
// in the middle fails and leaves the file as it was; a torn tail does not.
func TestSpoolReadCorruptKeepsSegment(t *testing.T) {
	seg, starts := threeFrames(t)
	dir := t.TempDir()
	s := testSpool(t, dir)
	bad := bytes.Clone(seg)
	bad[starts[1]+frameHeader+1] ^= 0x40
	if err := os.WriteFile(s.path(1), bad, 0o644); err != nil {
		t.Fatal(err)
	}
	if frames, err := s.Read(1); err == nil || !errors.Is(err, errCorrupt) {
		t.Fatalf("Read = %d frames, %v; want errCorrupt", len(frames), err)
	}
	if got, err := os.ReadFile(s.path(1)); err != nil || !bytes.Equal(got, bad) {
		t.Fatalf("segment changed or gone after Read (%v)", err)
	}

	torn := append(bytes.Clone(seg), 200, 0, 0, 0, 1, 2, 3, 4, 'p', 'a', 'r')
	if err := os.WriteFile(s.path(2), torn, 0o644); err != nil {
		t.Fatal(err)
	}
	frames, err := s.Read(2)
	if err != nil || len(frames) != 3 {
		t.Fatalf("Read of a torn tail = %d frames, %v; want 3, nil", len(frames), err)
	}
}

// TestRefusedOnlyDataErrors: only ClickHouse saying the rows are wrong is a
// refusal (set aside after retries); an environmental error (credentials,
// access, disk, a missing table, overload, the network) is ClickHouse being
// unavailable, and the rows wait in the spool however long it takes.
func TestRefusedOnlyDataErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&clickhouse.Exception{Code: 469, Name: "VIOLATED_CONSTRAINT"}, true},
		{fmt.Errorf("insert itl_inbox: %w", &clickhouse.Exception{Code: 53, Name: "TYPE_MISMATCH"}), true},
		{fmt.Errorf("append: %w: %w", errUnencodable, errors.New("bad value")), true},
		{&clickhouse.Exception{Code: 516, Name: "AUTHENTICATION_FAILED"}, false},
		{&clickhouse.Exception{Code: 497, Name: "ACCESS_DENIED"}, false},
		{&clickhouse.Exception{Code: 243, Name: "NOT_ENOUGH_SPACE"}, false},
		{&clickhouse.Exception{Code: 60, Name: "UNKNOWN_TABLE"}, false},
		{&clickhouse.Exception{Code: 252, Name: "TOO_MANY_PARTS"}, false},
		{&clickhouse.Exception{Code: 241, Name: "MEMORY_LIMIT_EXCEEDED"}, false},
		{errors.New("dial tcp 127.0.0.1:9000: connect: connection refused"), false},
	} {
		if got := refused(tc.err); got != tc.want {
			t.Errorf("refused(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
