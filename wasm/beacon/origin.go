package beacon

import "github.com/itlmon/itlmon/wasm/hist"

// OriginBatch is a KindOrigin message: the timelines an origin server's
// middleware (collector/origin) observed, sent server-to-server to the
// collector's /v1/origin. The site's shared key travels in a header, not here.
type OriginBatch struct {
	Seq     uint64 // per reporter, increasing
	Site    string
	Dropped uint32 // timelines the reporter dropped since the last batch (queue full)
	Records []Origin
}

// Origin is one response stream as the origin server emitted it. Times are
// microseconds since the middleware saw the request; NoTime means "did not
// happen". An event's emit time is the flush that completed it, or the write
// that completed it when the handler never flushed.
type Origin struct {
	ID          string // stream id the response carried (X-Itlmon-Stream or the app's X-Request-Id)
	StartUnixMs int64  // origin wall clock when the request reached the middleware
	Route       string // request path, never the query

	Format     uint8 // meter.Format
	Status     uint8 // meter.Status (complete, aborted by the client, ...)
	HTTPStatus uint16

	TTFBUs, TTFTUs, DurationUs uint32 // first body byte written, first content event, handler done

	Events, ContentEvents uint32
	Flushes               uint32 // emit points: flushes, or writes when never flushed
	MaxEventsPerFlush     uint32
	Bytes                 uint64

	ITL hist.Histogram // gaps between consecutive content emits, microseconds

	// EmitUs holds the emit time of each content event in order, the first
	// len(EmitUs) of them; EmitsDropped counts the content events beyond.
	EmitUs       []uint32
	EmitsDropped uint32
}
