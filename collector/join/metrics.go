package join

import "github.com/prometheus/client_golang/prometheus"

// RegisterMetrics adds the Joiner's counters to reg as itlmon_join_* metrics.
func (j *Joiner) RegisterMetrics(reg prometheus.Registerer) error {
	for _, m := range []struct {
		name, help string
		get        func(Stats) uint64
	}{
		{"origin_timelines_total", "Origin timelines received on /v1/origin.", func(s Stats) uint64 { return s.Origins }},
		{"joined_total", "Streams joined with their origin timeline.", func(s Stats) uint64 { return s.Joined }},
		{"joined_in_streams_total", "Joins whose refined causes reached itl_streams (within the hold).", func(s Stats) uint64 { return s.JoinedInStreams }},
		{"joined_late_total", "Joins made after the client record was stored.", func(s Stats) uint64 { return s.JoinedLate }},
		{"held_batches_total", "Client batches held for a missing origin timeline.", func(s Stats) uint64 { return s.Held }},
		{"hold_timeouts_total", "Held client batches released with an origin timeline still missing.", func(s Stats) uint64 { return s.HoldTimeouts }},
		{"evicted_total", "Unmatched streams dropped from memory (MaxEntries).", func(s Stats) uint64 { return s.Evicted }},
		{"reporter_dropped_total", "Timelines origin reporters reported dropping (queue full).", func(s Stats) uint64 { return s.ReporterDropped }},
		{"rows_written_total", "itl_origin rows inserted.", func(s Stats) uint64 { return s.RowsWritten }},
		{"rows_dropped_total", "Joined itl_origin rows dropped (queue full or insert failed).", func(s Stats) uint64 { return s.RowsDropped }},
	} {
		get := m.get
		c := prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "itlmon", Subsystem: "join", Name: m.name, Help: m.help},
			func() float64 { return float64(get(j.Stats())) })
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
