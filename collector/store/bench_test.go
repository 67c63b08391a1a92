package store_test

import (
	"context"
	"crypto/rand"
	"sync"
	"testing"
	"time"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/chtest"
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
			err := w.Submit(context.Background(), streams[k:k+per], func(err error) {
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
