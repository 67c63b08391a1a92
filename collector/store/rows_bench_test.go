package store

import (
	"bytes"
	"testing"
	"time"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/wasm/beacon"
)

func benchStreams(n int) []collector.Stream {
	s := make([]collector.Stream, n)
	for i := range s {
		s[i].Site, s[i].ReceivedAt = "demo", time.Now()
		s[i].StreamID[0] = byte(i)
		s[i].TTFTUs = 150_000
		for k := 0; k < 100; k++ {
			s[i].ITL.Record(float64(15_000 + (k*7919)%30_000))
		}
		s[i].ITLTokens.RecordN(9_000, 60)
	}
	return s
}

// BenchmarkNewRowBatch is the per-row conversion every Submit does.
func BenchmarkNewRowBatch(b *testing.B) {
	streams := benchStreams(100)
	b.ReportAllocs()
	for b.Loop() {
		newRowBatch(streams)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(streams)), "ns/row")
}

// BenchmarkToColumns is the row-to-column transpose of every insert.
func BenchmarkToColumns(b *testing.B) {
	rows := newRowBatch(benchStreams(1000)).Streams
	b.ReportAllocs()
	for b.Loop() {
		toColumns(rows)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(rows)), "ns/row")
}

// BenchmarkSpoolEncode is the cost of spooling a batch while ClickHouse is down.
func BenchmarkSpoolEncode(b *testing.B) {
	batch, _ := inboxRows(benchStreams(1000))
	p, err := encodeFrame(batch)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := encodeFrame(batch); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzReadFrames(f *testing.F) {
	dir := f.TempDir()
	s, err := openSpool(dir, nopLog)
	if err != nil {
		f.Fatal(err)
	}
	s.Append([]byte("one"))
	s.Append([]byte("two"))
	s.Close()
	seed, _ := readFile(s.path(1))
	f.Add(seed)
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		frames, off, err := readFrames(bytes.NewReader(data))
		n := int64(0)
		for _, fr := range frames {
			n += frameHeader + int64(len(fr))
		}
		if n != off || off > int64(len(data)) {
			t.Fatalf("offset %d, frames cover %d of %d bytes", off, n, len(data))
		}
		if err == nil && off != int64(len(data)) {
			t.Fatalf("no error but %d trailing bytes", int64(len(data))-off)
		}
	})
}

// BenchmarkClientRow is the inbox row of a stream as ingest hands it over
// (its values copied from the batch it arrived in, beacon.CheckBatchWire:
// "wire") and of a stream without its wire (encoded again: "encoded"), the
// baseline.
func BenchmarkClientRow(b *testing.B) {
	streams, frame := timelineStreams(b, 20, 40)
	_, wire, _, err := beacon.CheckBatchWire(frame, beacon.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	for _, withWire := range []bool{true, false} {
		name := "encoded"
		if withWire {
			name = "wire"
		}
		b.Run(name, func(b *testing.B) {
			for i := range streams {
				streams[i].Wire = beacon.Wire{}
				if withWire {
					streams[i].Wire = wire[i]
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				for i := range streams {
					if _, err := ClientRow(&streams[i]); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(streams)), "ns/record")
		})
	}
}

// TestClientRowFromCheckedWire: a stream as ingest hands it over (its
// Record from beacon.CheckBatchWire, without histograms or timeline, and
// its Wire) makes the inbox row of the whole record; with a string the
// encoder refuses it is an error, never a row without the record's values.
func TestClientRowFromCheckedWire(t *testing.T) {
	streams, frame := timelineStreams(t, 3, 2)
	checked, wire, _, err := beacon.CheckBatchWire(frame, beacon.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range streams {
		s := streams[i]
		s.Record, s.Wire = checked.Records[i], wire[i]
		if s.ITL.Count() != 0 || s.Timeline != nil {
			t.Fatal("CheckBatchWire decoded the values it should leave in the wire")
		}
		row, err := ClientRow(&s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := row.Client()
		if err != nil {
			t.Fatal(err)
		}
		want := streams[i]
		for _, st := range []*collector.Stream{&got, &want} {
			st.Wire = beacon.Wire{}
		}
		g, err1 := (&beacon.Batch{Records: []beacon.Record{got.Record}}).AppendBinary(nil)
		w, err2 := (&beacon.Batch{Records: []beacon.Record{want.Record}}).AppendBinary(nil)
		if err1 != nil || err2 != nil || !bytes.Equal(g, w) || got.ITL.Count() == 0 || len(got.Timeline) != 2 {
			t.Fatalf("stream %d: the inbox row holds another record than the one sent (%v, %v)", i, err1, err2)
		}

		s.URLPath = "/v1/chat\xff" // not UTF-8: the encoder refuses it
		if _, err := ClientRow(&s); err == nil {
			t.Fatalf("stream %d: a refused string made an inbox row", i)
		}
	}
}

// timelineStreams are n benchStreams with timelines of stamps entries, and
// the batch message of their records.
func timelineStreams(t testing.TB, n, stamps int) ([]collector.Stream, []byte) {
	t.Helper()
	streams := benchStreams(n)
	batch := beacon.Batch{Site: "demo"}
	for i := range streams {
		streams[i].Timeline = make([]beacon.Stamp, stamps)
		for k := range streams[i].Timeline {
			streams[i].Timeline[k] = beacon.Stamp{AtUs: uint32(150_000 + 20_000*k), Read: uint32(k), Content: true}
		}
		batch.Records = append(batch.Records, streams[i].Record)
	}
	frame, err := batch.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	return streams, frame
}
