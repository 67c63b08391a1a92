package store

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/hist"
)

// Kinds of itl_inbox rows.
const (
	KindClient = "client" // a browser record (collector.Stream)
	KindOrigin = "origin" // an origin timeline (beacon.Origin, VantageOrigin)
	KindEdge   = "edge"   // an edge timeline (beacon.Origin, VantageEdge)
)

// InboxRow is one row of itl_inbox (schema/007_inbox.sql): one record as a
// collector accepted it. ingested_at is left to the server (its DEFAULT).
//
// The stream id and payload of the rows Writer.Submit makes point into
// memory the writer reuses once their batch is done (inserted or spooled,
// and acked): what is kept of them past the insert is copied
// (strings.Clone), as the driver and the spool do.
type InboxRow struct {
	Kind         string    `ch:"kind"`
	Site         string    `ch:"site"`
	StreamID     string    `ch:"stream_id"`
	OriginID     string    `ch:"origin_id"`
	ReceivedAt   time.Time `ch:"received_at"`
	Country      string    `ch:"country"`
	Region       string    `ch:"region"`
	Browser      string    `ch:"browser"`
	BrowserMajor uint16    `ch:"browser_major"`
	OS           string    `ch:"os"`
	Device       string    `ch:"device"`
	Payload      string    `ch:"payload"`
}

var inboxColumns = columnList[InboxRow]()

// inboxLimits bound what DecodeClient and DecodeOrigin accept: a record that
// reached the inbox passed the ingest limits, which an operator may have set
// above beacon.DefaultLimits.
var inboxLimits = beacon.Limits{
	MaxBytes:    64 << 20,
	MaxRecords:  1,
	MaxBuckets:  hist.NumIndexes,
	MaxTimeline: 1 << 20,
	MaxStalls:   1 << 20,
	MaxString:   1 << 20,
}

// ClientRow makes the inbox row of a client stream. The payload is a beacon
// batch of this one record with the client facts the row needs (never the
// user agent: the enrichment travels in columns).
//
// A stream with its Wire (as ingest makes them) has its record's values
// copied from the wire (beacon.AppendRecordBatch): the same record, without
// encoding its histograms and timeline again. Its Record need not hold them
// (ingest leaves them in the wire, beacon.CheckBatchWire), so such a stream
// is never encoded from its Record: a string the encoder would refuse is
// the same error from the wire path.
func ClientRow(s *collector.Stream) (InboxRow, error) {
	c := clientOf(s)
	return clientRow(s, &c, nil, &s.Record, s.Wire, nil)
}

// clientOf is the client facts of a stream's batch.
func clientOf(s *collector.Stream) beacon.Client {
	return beacon.Client{
		ConnType:      s.ConnType,
		ConnRTTMs:     s.ConnRTTMs,
		TimerFloorUs:  s.TimerFloorUs,
		ModuleVersion: s.ModuleVersion,
		Release:       s.Release,
	}
}

// clientRow is the inbox row of record r with its wire w (or the zero
// Wire), the batch's client facts c and the other fields of s (a stream
// of the batch, or the fields its streams share: ClientRow, batchRows).
// rb, when not nil, is set to s.Site and c (beacon.RecordBatcher.Reset:
// the rows of a batch check and encode them once); it is used only with a
// wire. The payload is appended to arena (the rows of a batch share one
// allocation, and are dropped together; nil: one of its own); its bytes
// are not changed while the row is in use (the writer reuses a batch's
// memory only once the batch is done: putBatchMem).
func clientRow(s *collector.Stream, c *beacon.Client, rb *beacon.RecordBatcher, r *beacon.Record, w beacon.Wire, arena *[]byte) (InboxRow, error) {
	var p []byte
	var id string
	var err error
	if w.IsZero() {
		b := beacon.Batch{Site: s.Site, Client: *c, Records: []beacon.Record{*r}}
		p, err = b.AppendBinary(nil)
		id = string(r.StreamID[:])
	} else {
		if arena == nil {
			own := make([]byte, 0, wireRowSize(s.Site, c, r, w))
			arena = &own
		}
		// The stream id, then the payload, both in the arena.
		at := len(*arena)
		*arena = append(*arena, r.StreamID[:]...)
		if rb != nil {
			*arena, err = rb.Append(*arena, r, w)
		} else {
			*arena, err = beacon.AppendRecordBatch(*arena, s.Site, c, r, w)
		}
		if err != nil {
			*arena = (*arena)[:at]
		} else {
			ids := (*arena)[at : at+len(r.StreamID)]
			id = unsafe.String(unsafe.SliceData(ids), len(ids)) // not changed while the row is in use
			p = (*arena)[at+len(r.StreamID) : len(*arena) : len(*arena)]
		}
	}
	if err != nil {
		return InboxRow{}, fmt.Errorf("inbox: encode client record: %w", err)
	}
	return InboxRow{
		Kind: KindClient, Site: s.Site, StreamID: id, OriginID: r.OriginID, ReceivedAt: s.ReceivedAt.UTC(),
		Country: s.Country, Region: s.Region, Browser: s.Browser, BrowserMajor: s.BrowserMajor,
		OS: s.OS, Device: s.Device, Payload: unsafe.String(unsafe.SliceData(p), len(p)), // p is not used again
	}, nil
}

// wireRowSize is about the arena bytes clientRow takes for a record with
// its wire: its stream id and its payload.
func wireRowSize(site string, c *beacon.Client, r *beacon.Record, w beacon.Wire) int {
	return len(r.StreamID) + w.Size() + wireStrings(site, c, r)
}

// wireStrings is about the bytes the strings of a client row's payload
// take (the header and lengths included).
func wireStrings(site string, c *beacon.Client, r *beacon.Record) int {
	return 64 + len(site) + len(c.ConnType) + len(c.ModuleVersion) + len(c.Release) + len(r.OriginID) + len(r.PageOrigin) +
		len(r.PagePath) + len(r.URLOrigin) + len(r.URLPath) + len(r.Model) + len(r.HTTPProto) + len(r.ContentType)
}

// KindOfVantage is the inbox kind of a server-side timeline of vantage v:
// KindOrigin, KindEdge, and for a vantage this collector has no name for
// (a newer sender's) "vantage" and its number ("vantage2"). That name is
// fixed for good: a collector that learns vantage N still stores and reads
// its rows as "vantageN", so rows stored by older collectors during a
// rolling upgrade are the same kind as its own.
func KindOfVantage(v beacon.Vantage) string {
	switch v {
	case beacon.VantageOrigin:
		return KindOrigin
	case beacon.VantageEdge:
		return KindEdge
	}
	return "vantage" + strconv.Itoa(int(v))
}

// OriginRow makes the inbox row of a server-side timeline of site: kind
// KindOrigin for an origin timeline, KindEdge for an edge one (its
// Vantage). Both are keyed by the stream id the response carried (the
// client record's origin_id), so a cluster shards a stream's records
// together. Timelines without an id cannot be joined and have no identity
// to deduplicate by: they get the empty id and are promoted once per copy.
//
// The payload is o encoded again at this collector's minor version: o must
// be of a vantage it knows. OriginWireRow keeps a timeline as it arrived.
func OriginRow(site string, receivedAt time.Time, o *beacon.Origin) (InboxRow, error) {
	switch o.Vantage {
	case beacon.VantageOrigin, beacon.VantageEdge:
	default:
		return InboxRow{}, fmt.Errorf("inbox: timeline of an unknown vantage %s", o.Vantage)
	}
	kind := KindOfVantage(o.Vantage)
	b := beacon.OriginBatch{Site: site, Records: []beacon.Origin{*o}}
	p, err := b.AppendBinary(nil)
	if err != nil {
		return InboxRow{}, fmt.Errorf("inbox: encode %s timeline: %w", kind, err)
	}
	return InboxRow{Kind: kind, Site: site, StreamID: o.ID, OriginID: o.ID, ReceivedAt: receivedAt.UTC(), Payload: string(p)}, nil
}

// OriginWireRow is OriginRow for a timeline o decoded with its wire w
// (beacon.DecodeOriginBatchWire): the payload is the sender's section as it
// arrived, under the sender's minor version, so the fields a newer sender
// added are stored for a collector that reads them. A timeline of a vantage
// this collector does not know is stored too, as kind KindOfVantage: the
// promoter of a collector that knows it promotes it.
func OriginWireRow(site string, receivedAt time.Time, o *beacon.Origin, w beacon.OriginWire) (InboxRow, error) {
	kind := KindOfVantage(o.Vantage)
	p, err := beacon.AppendOriginRecordBatch(nil, site, w)
	if err != nil {
		return InboxRow{}, fmt.Errorf("inbox: %s timeline: %w", kind, err)
	}
	return InboxRow{Kind: kind, Site: site, StreamID: o.ID, OriginID: o.ID, ReceivedAt: receivedAt.UTC(),
		Payload: unsafe.String(unsafe.SliceData(p), len(p))}, nil // p is not used again
}

// Client decodes the client stream of a KindClient row.
func (r *InboxRow) Client() (collector.Stream, error) {
	var s collector.Stream
	if r.Kind != KindClient {
		return s, fmt.Errorf("inbox: %q row is not a client record", r.Kind)
	}
	b, err := beacon.DecodeBatch([]byte(r.Payload), inboxLimits)
	if err != nil {
		return s, fmt.Errorf("inbox: client record: %w", err)
	}
	if len(b.Records) != 1 {
		return s, fmt.Errorf("inbox: client payload holds %d records, want 1", len(b.Records))
	}
	s.Record = b.Records[0]
	s.Site, s.ReceivedAt = r.Site, r.ReceivedAt.UTC()
	s.Release, s.ModuleVersion = b.Client.Release, b.Client.ModuleVersion
	s.ConnType, s.ConnRTTMs, s.TimerFloorUs = b.Client.ConnType, b.Client.ConnRTTMs, b.Client.TimerFloorUs
	s.Country, s.Region, s.Browser, s.BrowserMajor = r.Country, r.Region, r.Browser, r.BrowserMajor
	s.OS, s.Device = r.OS, r.Device
	return s, nil
}

// Origin decodes the timeline of a KindOrigin or KindEdge row.
func (r *InboxRow) Origin() (beacon.Origin, error) {
	if r.Kind != KindOrigin && r.Kind != KindEdge {
		return beacon.Origin{}, fmt.Errorf("inbox: %q row is not an origin or edge timeline", r.Kind)
	}
	b, err := beacon.DecodeOriginBatch([]byte(r.Payload), inboxLimits)
	if err != nil {
		return beacon.Origin{}, fmt.Errorf("inbox: origin timeline: %w", err)
	}
	if len(b.Records) != 1 {
		return beacon.Origin{}, errors.New("inbox: origin payload does not hold one timeline")
	}
	if want := (r.Kind == KindEdge); (b.Records[0].Vantage == beacon.VantageEdge) != want {
		return beacon.Origin{}, fmt.Errorf("inbox: %q row holds a %s timeline", r.Kind, b.Records[0].Vantage)
	}
	return b.Records[0], nil
}

// batchRows turns a batch's records into inbox rows, as ClientRow does
// each of b.Streams(), without making the streams. A record that cannot be
// encoded (it broke a beacon limit on its way) is returned in bad, with why.
func batchRows(b *collector.Batch) (rows []InboxRow, bad []error) {
	return batchRowsIn(b, new(batchMem))
}

// batchRowsIn is batchRows with the rows in m: the rows slice and their
// stream ids and payloads, in m's room when there is enough (else in new
// room, left in m). The rows point into m until they are dropped.
func batchRowsIn(b *collector.Batch, m *batchMem) (rows []InboxRow, bad []error) {
	if cap(m.rows) < len(b.Records) {
		m.rows = make([]InboxRow, 0, len(b.Records))
	}
	rows = m.rows[:0]
	c := clientOf(&b.Shared)
	wires := len(b.Wires) == len(b.Records)
	var rb beacon.RecordBatcher
	if wires {
		n := 0
		for i := range b.Records {
			n += wireRowSize(b.Shared.Site, &c, &b.Records[i], b.Wires[i])
		}
		if cap(m.bytes) < n {
			m.bytes = make([]byte, 0, n) // in one allocation
		}
		m.bytes = m.bytes[:0]
		rb.Reset(b.Shared.Site, &c)
	}
	for i := range b.Records {
		var w beacon.Wire
		if wires {
			w = b.Wires[i]
		}
		row, err := clientRow(&b.Shared, &c, &rb, &b.Records[i], w, &m.bytes)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		rows = append(rows, row)
	}
	m.rows = rows
	return rows, bad
}

// batchMem is the memory of a batch's inbox rows (batchRowsIn): the rows
// and the bytes of their stream ids and payloads. The writer keeps it from
// a batch whose rows are done (stored, or refused to the sender) for the
// next (batchMems): at saturation it was most of what the collector
// allocated, and the rows, full of pointers, what the garbage collector
// scanned.
type batchMem struct {
	rows  []InboxRow
	bytes []byte
}

var batchMems sync.Pool // *batchMem

// maxPooledBatchRows and maxPooledBatchBytes bound the batchMem that
// batchMems keeps (a batch of 20 typical records takes ~12 KiB): a rare
// large batch's memory is let go.
const (
	maxPooledBatchRows  = 256
	maxPooledBatchBytes = 256 << 10
)

func getBatchMem() *batchMem {
	if m, ok := batchMems.Get().(*batchMem); ok {
		return m
	}
	return new(batchMem)
}

// putBatchMem gives m back to batchMems. Nothing may read the rows made in
// it afterwards: they and their strings' bytes will be another batch's.
func putBatchMem(m *batchMem) {
	if m == nil || cap(m.rows) > maxPooledBatchRows || cap(m.bytes) > maxPooledBatchBytes {
		return
	}
	clear(m.rows) // keeps no strings of other memory alive (past len: cleared before, or never set)
	m.rows = m.rows[:0]
	if poisonBatchMem {
		clear(m.bytes[:cap(m.bytes)])
	}
	m.bytes = m.bytes[:0]
	batchMems.Put(m)
}

// poisonBatchMem, set by this package's tests, zeroes the bytes of a
// batchMem given back: a string kept from its rows then reads as zeros,
// not as another batch's record, which a check could take for a real one.
var poisonBatchMem bool

// inboxRows turns client streams into inbox rows. A stream that cannot be
// encoded (it broke a beacon limit on its way) is returned in bad, with why.
func inboxRows(streams []collector.Stream) (rows []InboxRow, bad []error) {
	rows = make([]InboxRow, 0, len(streams))
	for i := range streams {
		row, err := ClientRow(&streams[i])
		if err != nil {
			bad = append(bad, err)
			continue
		}
		rows = append(rows, row)
	}
	return rows, bad
}
