package store_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/enrich"
	"github.com/itlmon/itlmon/collector/ingest"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/benchrec"
	"github.com/itlmon/itlmon/internal/cpubench"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// discardInbox is a ClickHouse that takes every insert at once.
type discardInbox struct{}

func (discardInbox) SchemaReady() error { return nil }

func (discardInbox) InsertInbox(context.Context, ...[]store.InboxRow) error { return nil }

// BenchmarkWebSocketPath is the collector's side of the ingest report's
// WebSocket path without ClickHouse (an insert that takes the rows at
// once): clients on loopback send batches of 20 records of a 120-token
// answer (benchrec.Answer) with 16 in flight each; the collector reads,
// checks, enriches, makes the inbox rows, batches them in the Writer and
// acks. An op is one batch, acked; cpu-ns/record is the process's CPU per
// record, the clients' (writing prepared frames, reading acks) included.
func BenchmarkWebSocketPath(b *testing.B) {
	const clients, perBatch, inFlight, distinct = 8, 20, 16, 32
	w, err := store.NewWriterOn(discardInbox{}, store.WriterOptions{SpoolDir: b.TempDir(), Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Shutdown(context.Background())
	e, err := enrich.New(enrich.Options{TrustProxy: true})
	if err != nil {
		b.Fatal(err)
	}
	h, err := ingest.New(ingest.Config{Sites: []ingest.Site{{Key: "test", Origins: []string{"*"}}}, Sink: w, Enricher: e, Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	h.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer h.Shutdown(context.Background())

	// Each client cycles through distinct prepared frames.
	frames := make([][][]byte, clients)
	for c := range frames {
		for k := range distinct {
			bt := beacon.Batch{Seq: uint64(k + 1), Client: beacon.Client{ConnType: "4g", Release: "r1", ModuleVersion: "test"}}
			for i := range perBatch {
				bt.Records = append(bt.Records, benchrec.Record([3]byte{byte(c), byte(k), byte(i)}, uint64(c*distinct+k), uint64(i)))
			}
			p, err := bt.AppendBinary(nil)
			if err != nil {
				b.Fatal(err)
			}
			frames[c] = append(frames[c], p)
		}
	}
	hdr := http.Header{}
	hdr.Set("Origin", "https://chat.example.com")
	hdr.Set("User-Agent", "Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0")
	hdr.Set("CF-IPCountry", "DE")
	// A batch is one frame, as browsers send it (gorilla's client splits a
	// message past its write buffer into frames of that size).
	dialer := websocket.Dialer{WriteBufferSize: 64 << 10}
	conns := make([]*websocket.Conn, clients)
	for i := range conns {
		c, _, err := dialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/v1/ws?site=test", hdr)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	b.ReportAllocs()
	start := cpubench.Now()
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, 2*clients)
	for i, c := range conns {
		n := b.N / clients
		if i < b.N%clients {
			n++
		}
		window := make(chan struct{}, inFlight)
		wg.Add(2)
		go func() { // acks
			defer wg.Done()
			for range n {
				_, p, err := c.ReadMessage()
				if err == nil {
					var a beacon.Ack
					if a, err = beacon.DecodeAck(p); err == nil && a.Reject != beacon.RejectNone {
						err = fmt.Errorf("batch %d refused: %v", a.Seq, a.Reject)
					}
				}
				if err != nil {
					errs <- err
					return
				}
				<-window
			}
		}()
		go func() {
			defer wg.Done()
			for k := range n {
				window <- struct{}{}
				if err := c.WriteMessage(websocket.BinaryMessage, frames[i][k%distinct]); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	if d := cpubench.Now() - start; d > 0 {
		b.ReportMetric(float64(d.Nanoseconds())/float64(b.N*perBatch), "cpu-ns/record")
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*perBatch), "ns/record")
}
