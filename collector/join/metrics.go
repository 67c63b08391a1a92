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

// RegisterMetrics adds the Promoter's counters and its lag to reg as
// itlmon_promote_* metrics.
func (p *Promoter) RegisterMetrics(reg prometheus.Registerer) error {
	err := registerCounters(reg, "promote", []counter{
		{"windows_total", "Inbox windows promoted by this collector (reruns included).", func() uint64 { return p.Stats().Windows }},
		{"records_total", "Inbox rows read by promotions.", func() uint64 { return p.Stats().Records }},
		{"streams_total", "Client records promoted to itl_streams.", func() uint64 { return p.Stats().Streams }},
		{"origins_total", "Origin timelines promoted to itl_origin.", func() uint64 { return p.Stats().Origins }},
		{"copies_total", "Copies dropped (resends, load balancer retries, spool replays).", func() uint64 { return p.Stats().Copies }},
		{"joined_total", "Client records joined with their origin timeline.", func() uint64 { return p.Stats().Joined }},
		{"joined_in_streams_total", "Client records whose itl_streams row was refined by the join.", func() uint64 { return p.Stats().JoinedInStreams }},
		{"edges_total", "Edge timelines promoted to itl_edge.", func() uint64 { return p.Stats().Edges }},
		{"edge_joined_total", "Client records joined with their edge timeline.", func() uint64 { return p.Stats().EdgeJoined }},
		{"refused_total", "Records ClickHouse refused at promotion (data errors), set aside in itl_inbox.", func() uint64 { return p.Stats().Refused }},
		{"errors_total", "Failed promotion attempts (retried).", func() uint64 { return p.Stats().Errors }},
	})
	if err != nil {
		return err
	}
	return reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "itlmon", Subsystem: "promote", Name: "lag_seconds",
		Help: "Server time minus the end of the last promoted window (the worst shard); the hold and grace are its floor.",
	}, func() float64 { return p.Stats().Lag.Seconds() }))
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
