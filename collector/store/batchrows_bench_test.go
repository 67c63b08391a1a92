package store

import (
	"testing"
	"time"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/internal/benchrec"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// BenchmarkBatchRows is the inbox rows of a batch as ingest hands one to
// Writer.Submit: 20 records of a 120-token answer (benchrec.Answer), checked
// with their wires (beacon.Scratch.CheckBatchWire), made into rows with
// their payloads copied from the wires.
func BenchmarkBatchRows(b *testing.B) {
	const n = 20
	bt := beacon.Batch{Seq: 1, Client: beacon.Client{ConnType: "4g", Release: "r1", ModuleVersion: "test"}}
	for i := range n {
		bt.Records = append(bt.Records, benchrec.Record([3]byte{0, 0, byte(i)}, uint64(i), 1))
	}
	frame, err := bt.AppendBinary(nil)
	if err != nil {
		b.Fatal(err)
	}
	var sc beacon.Scratch
	checked, wire, _, err := sc.CheckBatchWire(frame, beacon.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	batch := collector.Batch{Records: checked.Records, Wires: wire}
	batch.Shared = collector.Stream{Site: "test", ReceivedAt: time.Now(), ConnType: "4g", Release: "r1", ModuleVersion: "test",
		Country: "DE", Region: "unknown", Browser: "Firefox", BrowserMajor: 133, OS: "Linux", Device: "desktop"}
	b.ReportAllocs()
	for b.Loop() {
		if rows, bad := batchRows(&batch); len(rows) != n || len(bad) != 0 {
			b.Fatal(bad)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
}
