package store_test

import (
	"context"
	"crypto/rand"
	mrand "math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/benchrec"
	"github.com/itlmon/itlmon/internal/chtest"
	"github.com/itlmon/itlmon/internal/cpubench"
)

const benchRows = 10_000

// freshIDs gives the streams new ids, so every iteration stores new rows.
func freshIDs(streams []collector.Stream) {
	for i := range streams {
		rand.Read(streams[i].StreamID[:])
	}
}

// BenchmarkInsertDirect is the baseline: one clickhouse-go batch of
// benchRows typical rows per table, nothing else.
func BenchmarkInsertDirect(b *testing.B) {
	db := chtest.NewDB(b, store.Options{})
	streams := makeStreams(benchRows, "bench", time.Now().UTC())
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		freshIDs(streams)
		b.StartTimer()
		if err := store.InsertDirect(context.Background(), db.Conn(), streams); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(benchRows*b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkAppendColumns is the client's CPU to append 10,000 itl_streams
// rows of 120-token answers to a batch (not sent), as an insert does
// (rows) and with one Append per column (whole: the baseline).
func BenchmarkAppendColumns(b *testing.B) {
	db := chtest.NewDB(b, store.Options{})
	rng := mrand.New(mrand.NewPCG(1, 2))
	streams := makeStreams(benchRows, "bench", time.Now().UTC())
	for i := range streams {
		benchrec.Answer(&streams[i].Record, rng)
	}
	cols := store.StreamColumns(streams)
	for _, way := range []string{"rows", "whole"} {
		b.Run(way, func(b *testing.B) {
			start := cpubench.Now()
			for b.Loop() {
				batch, err := db.Conn().PrepareBatch(context.Background(), "INSERT INTO itl_streams ("+store.StreamColumnList+")")
				if err != nil {
					b.Fatal(err)
				}
				if err := store.AppendColumns(batch, cols, way == "whole"); err != nil {
					b.Fatal(err)
				}
				if err := batch.Abort(); err != nil {
					b.Fatal(err)
				}
			}
			cpubench.Report(b, start, 0)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchRows), "ns/row")
		})
	}
}

// BenchmarkWriter sends the same rows through the Writer as 100 Submits of
// 100 streams (many clients' batches), waiting for every ack: queue, dedup
// lookup, batching and the inserts.
func BenchmarkWriter(b *testing.B) {
	db := chtest.NewDB(b, store.Options{})
	w := newWriter(b, db, store.WriterOptions{MaxRows: benchRows, FlushInterval: time.Second})
	streams := makeStreams(benchRows, "bench", time.Now().UTC())
	const per = 100
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		freshIDs(streams)
		b.StartTimer()
		var wg sync.WaitGroup
		for k := 0; k < benchRows; k += per {
			wg.Add(1)
			err := w.SubmitStreams(context.Background(), streams[k:k+per], func(err error) {
				if err != nil {
					b.Error(err)
				}
				wg.Done()
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		wg.Wait()
	}
	b.ReportMetric(float64(benchRows*b.N)/b.Elapsed().Seconds(), "rows/s")
	st := w.Stats()
	b.ReportMetric(float64(st.Inserts)/float64(b.N), "inserts/op")
	if st.RowsSpooled > 0 {
		b.Fatalf("rows spooled during the benchmark: %+v", st)
	}
}

// BenchmarkInsertInbox is what one insert of benchRows inbox rows (about
// 650 bytes each, the size of a 120-token stream's record) costs this
// process: building clickhouse-go's columns and sending them. cpu-ns/op is
// the client's CPU alone (the engine is another process).
func BenchmarkInsertInbox(b *testing.B) {
	db := chtest.NewDB(b, store.Options{})
	streams := makeStreams(benchRows, "bench", time.Now().UTC())
	rows := make([]store.InboxRow, len(streams))
	size := 0
	for i := range streams {
		var err error
		if rows[i], err = store.ClientRow(&streams[i]); err != nil {
			b.Fatal(err)
		}
		rows[i].Payload += string(make([]byte, 650-min(650, len(rows[i].Payload)))) // a typical record's size
		size += len(rows[i].Payload)
	}
	start := cpubench.Now()
	b.ResetTimer()
	for b.Loop() {
		if err := store.InsertRows(context.Background(), db.Conn(), "itl_inbox", nil, rows); err != nil {
			b.Fatal(err)
		}
	}
	cpubench.Report(b, start, size)
	b.ReportMetric(float64(benchRows*b.N)/b.Elapsed().Seconds(), "rows/s")
}
