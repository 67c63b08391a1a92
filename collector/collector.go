// Package collector holds the domain types of the itlmon collector. The
// technology packages around it (store: ClickHouse and the spool; chdb: the
// embedded engine; ingest: WebSocket and beacon HTTP; enrich: User-Agent and
// geo; server: wiring; cmd/itlmon: flags) depend on these, never on each other's internals.
package collector

import (
	"context"
	"time"

	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

// Stream is one stored stream: a browser record plus what the collector adds.
// It never holds a client IP, a query string, or prompt/answer text.
type Stream struct {
	beacon.Record

	Site       string    // site key the record was sent for
	ReceivedAt time.Time // when the collector accepted the batch

	// From the batch's client facts.
	Release       string
	ModuleVersion string
	ConnType      string // navigator.connection.effectiveType, "unknown" if absent
	ConnRTTMs     uint16
	TimerFloorUs  uint32

	// Enrichment.
	Country      string // ISO 3166-1 alpha-2, "unknown" if not known
	Region       string // ISO 3166-2 subdivision code or continent, "unknown" if not known
	Browser      string // family: "Chrome", "Firefox", "Safari", "Edge", ...
	BrowserMajor uint16
	OS           string // "Windows", "macOS", "Android", "iOS", "Linux", ...
	Device       string // "desktop", "mobile", "tablet", "bot", "unknown"

	// From the edge, when an edge Worker reported the stream
	// (collector/join): its data centre, and the hop of each network delay.
	Colo string // IATA code; "" without an edge
	Hops Hops

	// Wire is the record's values as they arrived (set by ingest), so the
	// store keeps them without encoding them again; the zero Wire for a
	// stream that did not come from a batch (or was changed after: then
	// clear it, see beacon.AppendRecordBatch for what it may differ in).
	Wire beacon.Wire
}

// Hops of a stream's path, as the edge's timeline places network delays:
// HopOriginEdge when the edge already received the events late or
// coalesced, HopEdgeBrowser when the edge received them on time and the
// browser did not.
const (
	HopOriginEdge  = "origin_edge"
	HopEdgeBrowser = "edge_browser"
)

// Hops places a stream's network delays on its path. The zero value: no
// edge, no hops.
type Hops struct {
	TTFT  string   // hop of a network wait for the first token, "" if none
	Stall []string // hop of each StallList entry ("" where none), nil without an edge
	// The network stalls (count, total microseconds) per hop.
	OriginEdgeStalls, EdgeBrowserStalls       uint32
	OriginEdgeStalledUs, EdgeBrowserStalledUs uint64
}

// Batch is one beacon batch as ingest accepted it: its records, and what
// every stream of the batch shares (the site, the time, the client facts
// and the enrichment), once. Ingest hands batches, not streams, to the
// Sink: a record becomes an inbox row without a Stream of its own.
type Batch struct {
	// Shared holds the fields every stream of the batch has in common; its
	// Record, Wire, Colo and Hops are zero.
	Shared Stream
	// Records were checked by beacon.CheckBatchWire: where Wires is not
	// nil (one per record), a record's histograms, timeline and stall list
	// are in its wire, not in the Record.
	Records []beacon.Record
	Wires   []beacon.Wire
}

// Streams are the batch's streams: Shared with each record and its wire.
// Their wires are copies, so the streams outlive the buffer the batch was
// read into.
func (b *Batch) Streams() []Stream {
	var wires []beacon.Wire
	if len(b.Wires) == len(b.Records) {
		wires = append(wires, b.Wires...)
		beacon.CloneWires(wires)
	}
	out := make([]Stream, len(b.Records))
	for i := range b.Records {
		out[i] = b.Shared
		out[i].Record = b.Records[i]
		if wires != nil {
			out[i].Wire = wires[i]
		}
	}
	return out
}

// Sink takes enriched batches and reports when they are durable.
type Sink interface {
	// Submit queues a batch's streams for storage. It blocks while the
	// queue is full (backpressure: the caller stops reading its socket)
	// until ctx ends. done is called exactly once, never from the calling
	// goroutine, when every stream is durable (inserted into ClickHouse, or
	// appended and fsynced to the local spool) or with the error that kept
	// them from it.
	//
	// b's records and wires point into the caller's buffer, which is
	// reused once Submit returns: a Sink keeps nothing of b past Submit
	// (Batch.Streams copies).
	Submit(ctx context.Context, b *Batch, done func(error)) error
}

// StreamFilter selects streams for reading back.
type StreamFilter struct {
	Site  string
	Since time.Time
	Limit int
}

// StreamReader reads stored streams back, newest first.
type StreamReader interface {
	LatestStreams(ctx context.Context, f StreamFilter) ([]Stream, error)
}

// BeforeHeaders reports whether r's request ended before its response
// headers: aborted or failed (meter.StatusAborted or StatusNetworkError)
// with HeadersUs NoTime, from a sender that says how its streams end (End is
// not meter.EndNone; older senders never sent such records, and their
// HeadersUs means nothing). Its DurationUs is then the time waited. The
// rollup's before_headers (schema/006_names.sql) counts the same streams.
func BeforeHeaders(r *beacon.Record) bool {
	s := meter.Status(r.Status)
	return (s == meter.StatusAborted || s == meter.StatusNetworkError) &&
		r.HeadersUs == beacon.NoTime && meter.End(r.End) != meter.EndNone
}
