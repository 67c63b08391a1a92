package join

import "github.com/prometheus/client_golang/prometheus"

// RegisterMetrics adds the Intake's counters to reg as itlmon_join_* metrics.
func (in *Intake) RegisterMetrics(reg prometheus.Registerer) error {
	return registerCounters(reg, "join", []counter{
		{"origin_timelines_total", "Origin timelines received on /v1/origin.", func() uint64 { return in.Stats().Origins }},
		{"edge_timelines_total", "Edge timelines received on /v1/origin (wasm/edge).", func() uint64 { return in.Stats().Edges }},
		{"origin_timelines_failed_total", "Origin and edge timelines not stored (the reporter retries).", func() uint64 { return in.Stats().Failed }},
		{"reporter_dropped_total", "Timelines origin reporters reported dropping (queue full).", func() uint64 { return in.Stats().ReporterDropped }},
		{"newer_timelines_total", "Timelines of a vantage this collector does not know (a newer sender's), stored for a collector that does.", func() uint64 { return in.Stats().Newer }},
		{"origin_batches_refused_total", "Origin and edge batches refused for good with a 4xx (malformed, another major version, over a limit, not storable); the sender drops them.", func() uint64 { return in.Stats().Refused }},
	})
}

type counter struct {
	name, help string
	get        func() uint64
}

func registerCounters(reg prometheus.Registerer, subsystem string, cs []counter) error {
	for _, m := range cs {
		get := m.get
		c := prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "itlmon", Subsystem: subsystem, Name: m.name, Help: m.help},
			func() float64 { return float64(get()) })
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
