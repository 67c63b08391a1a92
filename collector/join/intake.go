package join

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// RowSink stores inbox rows durably: store.Writer.
type RowSink interface {
	// SubmitRows has collector.Sink's contract for inbox rows.
	SubmitRows(ctx context.Context, rows []store.InboxRow, done func(error)) error
}

// Intake takes origin and edge timelines (POST /v1/origin, Handler) into
// the inbox, where the Promoter joins them with client records. It holds nothing: any
// collector may take any timeline. Safe for concurrent use.
type Intake struct {
	sink       RowSink
	log        zerolog.Logger
	refusedLog zerolog.Logger // log, sampled
	now        func() time.Time

	origins, edges, newer, reporterDropped, failed, refused atomic.Uint64
}

// IntakeStats counts what an Intake took.
type IntakeStats struct {
	Origins         uint64 // origin timelines received
	Edges           uint64 // edge timelines received
	Newer           uint64 // timelines of a vantage this collector does not know (a newer sender's), stored for a collector that does
	ReporterDropped uint64 // timelines origin reporters said they dropped (queue full)
	Failed          uint64 // timelines not stored (the reporter got a 503 and retries)
	Refused         uint64 // batches refused for good with a 4xx (malformed, another major version, over a limit, not storable): the sender drops them
}

// ErrUnstorable marks a batch that can never be stored as it is (its
// timelines cannot make inbox rows): the Handler answers 422, and the
// sender drops the batch instead of sending it again.
var ErrUnstorable = errors.New("timelines that cannot be stored")

// NewIntake returns an Intake storing into sink.
func NewIntake(sink RowSink, log zerolog.Logger) *Intake {
	l := log.With().Str("component", "origin-intake").Logger()
	return &Intake{sink: sink, log: l, refusedLog: l.Sample(&zerolog.BurstSampler{Burst: 1, Period: time.Second}), now: time.Now}
}

// Stats returns a snapshot of the counters.
func (in *Intake) Stats() IntakeStats {
	return IntakeStats{Origins: in.origins.Load(), Edges: in.edges.Load(), Newer: in.newer.Load(),
		ReporterDropped: in.reporterDropped.Load(), Failed: in.failed.Load(), Refused: in.refused.Load()}
}

// AddOrigin stores a batch of origin or edge timelines of site. It returns once they
// are durable (in the inbox, or in the writer's spool); on an error none is
// acknowledged and the reporter sends the batch again (copies are dropped at
// promotion), unless the error wraps ErrUnstorable. Each timeline is
// encoded again at this collector's minor version: AddOriginWire keeps
// them as they arrived.
func (in *Intake) AddOrigin(ctx context.Context, site string, b *beacon.OriginBatch) error {
	return in.AddOriginWire(ctx, site, b, nil)
}

// AddOriginWire is AddOrigin for a batch decoded with its wires
// (beacon.DecodeOriginBatchWire; nil: none): each timeline is stored as
// its sender wrote it, so a newer sender's fields, and a timeline of a
// vantage this collector does not know, are kept for a collector that
// reads them (store.OriginWireRow).
func (in *Intake) AddOriginWire(ctx context.Context, site string, b *beacon.OriginBatch, wires []beacon.OriginWire) error {
	now := in.now()
	rows := make([]store.InboxRow, 0, len(b.Records))
	var edges, newer uint64
	for i := range b.Records {
		o := &b.Records[i]
		var row store.InboxRow
		var err error
		if i < len(wires) {
			row, err = store.OriginWireRow(site, now, o, wires[i])
		} else {
			row, err = store.OriginRow(site, now, o)
		}
		if err != nil {
			return fmt.Errorf("%w: timeline %d: %w", ErrUnstorable, i, err)
		}
		switch row.Kind {
		case store.KindOrigin:
		case store.KindEdge:
			edges++
		default:
			newer++
		}
		rows = append(rows, row)
	}
	in.origins.Add(uint64(len(rows)) - edges - newer)
	in.edges.Add(edges)
	in.newer.Add(newer)
	in.reporterDropped.Add(uint64(b.Dropped))
	if len(rows) == 0 {
		return nil
	}
	res := make(chan error, 1)
	if err := in.sink.SubmitRows(ctx, rows, func(err error) { res <- err }); err != nil {
		in.failed.Add(uint64(len(rows)))
		return err
	}
	select {
	case err := <-res:
		if err != nil {
			in.failed.Add(uint64(len(rows)))
		}
		return err
	case <-ctx.Done():
		// The rows may still be stored: the reporter's resend is dropped
		// as a copy then.
		return errors.Join(errors.New("origin timelines not acknowledged"), ctx.Err())
	}
}
