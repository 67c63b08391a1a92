package promoter

import "github.com/prometheus/client_golang/prometheus"

// RegisterMetrics adds the Promoter's counters and gauges to reg as
// itlmon_promote_* metrics.
func (p *Promoter) RegisterMetrics(reg prometheus.Registerer) error {
	for _, m := range []struct {
		name, help string
		get        func(Stats) uint64
	}{
		{"windows_total", "Promotion runs finished by this collector, each one inbox window or a span of sealed windows (reruns included).", func(s Stats) uint64 { return s.Windows }},
		{"records_total", "Inbox rows read by promotions.", func(s Stats) uint64 { return s.Records }},
		{"streams_total", "Client records promoted to itl_streams.", func(s Stats) uint64 { return s.Streams }},
		{"origins_total", "Origin timelines promoted to itl_origin.", func(s Stats) uint64 { return s.Origins }},
		{"copies_total", "Copies dropped (resends, load balancer retries, spool replays).", func(s Stats) uint64 { return s.Copies }},
		{"joined_total", "Client records joined with their origin timeline.", func(s Stats) uint64 { return s.Joined }},
		{"joined_in_streams_total", "Client records whose itl_streams row was refined by the join.", func(s Stats) uint64 { return s.JoinedInStreams }},
		{"edges_total", "Edge timelines promoted to itl_edge.", func(s Stats) uint64 { return s.Edges }},
		{"edge_joined_total", "Client records joined with their edge timeline.", func(s Stats) uint64 { return s.EdgeJoined }},
		{"join_conflicts_total", "Client records naming an origin id another client record named first: never joined.", func(s Stats) uint64 { return s.Conflicts }},
		{"refused_total", "Records ClickHouse refused at promotion (data errors), set aside in itl_inbox.", func(s Stats) uint64 { return s.Refused }},
		{"errors_total", "Failed promotion attempts (retried).", func(s Stats) uint64 { return s.Errors }},
		{"heartbeat_errors_total", "Heartbeats not recorded in itl_promoters (promotion goes on).", func(s Stats) uint64 { return s.HeartbeatErrors }},
		{"blocked_windows_total", "Windows holding inbox rows this collector cannot promote (a newer collector's), left for one that can.", func(s Stats) uint64 { return s.Blocked }},
	} {
		get := m.get
		c := prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "itlmon", Subsystem: "promote", Name: m.name, Help: m.help},
			func() float64 { return float64(get(p.Stats())) })
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	for _, g := range []struct {
		name, help string
		get        func(Stats) float64
	}{
		{"lag_seconds", "Age of the oldest sealed, unpromoted window (from its end; the worst shard), 0 when none waits; it keeps growing while promotion fails.",
			func(s Stats) float64 { return s.Lag.Seconds() }},
		{"blocked_shards", "Shards whose next window waits for a collector that can promote its rows.",
			func(s Stats) float64 { return float64(s.BlockedNow) }},
	} {
		get := g.get
		if err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "itlmon", Subsystem: "promote", Name: g.name, Help: g.help},
			func() float64 { return get(p.Stats()) })); err != nil {
			return err
		}
	}
	return nil
}
