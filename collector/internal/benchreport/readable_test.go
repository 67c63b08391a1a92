package benchreport

import (
	"context"
	"encoding/hex"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/itlmon/itlmon/internal/halfclose"
)

// readable measures the time from a record's ack to the moment a reader
// finds it in itl_streams: a sample of the acked records is polled for by
// stream id every readablePoll, so each time is late by at most that period
// plus the query.
type readable struct {
	mu      sync.Mutex
	pending map[[16]byte]time.Time // sampled records acked, not yet found, and when they were acked
	times   []time.Duration
	polls   int
}

const readablePoll = 250 * time.Millisecond

func newReadable() *readable { return &readable{pending: map[[16]byte]time.Time{}} }

// acked records that the record with stream id was acked at.
func (r *readable) acked(id [16]byte, at time.Time) {
	r.mu.Lock()
	r.pending[id] = at
	r.mu.Unlock()
}

// run polls the engine at addr (database itlmon) until ctx ends.
func (r *readable) run(ctx context.Context, t *testing.T, addr string) {
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, Auth: clickhouse.Auth{Database: "itlmon"},
		MaxOpenConns: 1, MaxIdleConns: 1,
		DialContext: func(ctx context.Context, addr string) (net.Conn, error) {
			return halfclose.Dial(ctx, &net.Dialer{}, "tcp", addr)
		}})
	if err != nil {
		t.Errorf("readable: %v", err)
		return
	}
	defer conn.Close()
	tick := time.NewTicker(readablePoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r.mu.Lock()
		ids := make([]string, 0, len(r.pending))
		for id := range r.pending {
			ids = append(ids, hex.EncodeToString(id[:]))
		}
		r.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		rows, err := conn.Query(ctx, "SELECT lower(hex(stream_id)) FROM itl_streams WHERE site = 'test' AND lower(hex(stream_id)) IN ?", ids)
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("readable: %v", err)
			}
			return
		}
		found := time.Now()
		r.mu.Lock()
		r.polls++
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Errorf("readable: %v", err)
				break
			}
			var id [16]byte
			if _, err := hex.Decode(id[:], []byte(s)); err != nil {
				t.Errorf("readable: stream id %q: %v", s, err)
				break
			}
			if at, ok := r.pending[id]; ok {
				r.times = append(r.times, found.Sub(at))
				delete(r.pending, id)
			}
		}
		r.mu.Unlock()
		if err := rows.Err(); err != nil {
			t.Errorf("readable: %v", err)
		}
		rows.Close()
	}
}

// left is the number of sampled records not found yet.
func (r *readable) left() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

// quantiles returns the p50 and p99 of the times found, and how many.
func (r *readable) quantiles() (p50, p99 time.Duration, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.times) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(r.times)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return q(0.50), q(0.99), len(s)
}
