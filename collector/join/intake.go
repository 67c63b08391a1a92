package join

import (
	"context"
	"errors"
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
	sink RowSink
	log  zerolog.Logger
	now  func() time.Time

	origins, edges, reporterDropped, failed atomic.Uint64
}

// IntakeStats counts what an Intake took.
type IntakeStats struct {
	Origins         uint64 // origin timelines received
	Edges           uint64 // edge timelines received
	ReporterDropped uint64 // timelines origin reporters said they dropped (queue full)
	Failed          uint64 // timelines not stored (the reporter got a 503 and retries)
}

// NewIntake returns an Intake storing into sink.
func NewIntake(sink RowSink, log zerolog.Logger) *Intake {
	return &Intake{sink: sink, log: log.With().Str("component", "origin-intake").Logger(), now: time.Now}
}

// Stats returns a snapshot of the counters.
func (in *Intake) Stats() IntakeStats {
	return IntakeStats{Origins: in.origins.Load(), Edges: in.edges.Load(), ReporterDropped: in.reporterDropped.Load(), Failed: in.failed.Load()}
}

// AddOrigin stores a batch of origin or edge timelines of site. It returns once they
// are durable (in the inbox, or in the writer's spool); on an error none is
// acknowledged and the reporter sends the batch again (copies are dropped at
// promotion).
func (in *Intake) AddOrigin(ctx context.Context, site string, b *beacon.OriginBatch) error {
	now := in.now()
	rows := make([]store.InboxRow, 0, len(b.Records))
	var edges uint64
	for i := range b.Records {
		row, err := store.OriginRow(site, now, &b.Records[i])
		if err != nil {
			in.failed.Add(uint64(len(b.Records)))
			return err
		}
		if row.Kind == store.KindEdge {
			edges++
		}
		rows = append(rows, row)
	}
	in.origins.Add(uint64(len(rows)) - edges)
	in.edges.Add(edges)
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
