package store

import (
	mrand "math/rand/v2"
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
		r := beacon.Record{
			StartUnixMs: 1_790_000_000_000, PageOrigin: "https://chat.example.com", PagePath: "/chat",
			URLOrigin: "https://api.example.com", URLPath: "/v1/chat/completions", Model: "gpt-test",
			HTTPProto: "h2", ContentType: "text/event-stream", HTTPStatus: 200,
			TTFBUs: 12_000, DurationUs: 900_000, Bytes: 4096, TokensPerSec: 47.6, Jank: 2, Smooth: true,
		}
		r.StreamID[0], r.StreamID[15] = 0xa0, byte(i)
		benchrec.Answer(&r, mrand.New(mrand.NewPCG(uint64(i), 1)))
		bt.Records = append(bt.Records, r)
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
