package server

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/otlp"
)

// startOTLP runs the OTLP exporter (collector/otlp), with its counters in
// reg, until the returned stop is called; stop waits for it to end.
func startOTLP(ctx context.Context, conn otlp.Conn, c *Config, reg prometheus.Registerer, log zerolog.Logger) (stop func(), err error) {
	log = log.With().Str("component", "otlp").Logger()
	e, err := otlp.New(otlp.Config{Endpoint: c.OTLPEndpoint, Conn: conn, Interval: c.OTLPInterval, Logger: log})
	if err != nil {
		return nil, err
	}
	counter := func(name, help string, f func(otlp.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f(e.Stats())) })
	}
	if err := registerAll(reg,
		counter("itlmon_otlp_exported_minutes_total", "Rollup minutes exported as OTLP metrics (with or without streams).",
			func(s otlp.Stats) uint64 { return s.Minutes }),
		counter("itlmon_otlp_points_total", "OTLP data points sent.", func(s otlp.Stats) uint64 { return s.Points }),
		counter("itlmon_otlp_export_errors_total", "Failed OTLP exports (retried at the next interval).",
			func(s otlp.Stats) uint64 { return s.Errors }),
		counter("itlmon_otlp_skipped_minutes_total", "Rollup minutes never exported: older than the retry backlog while exports failed.",
			func(s otlp.Stats) uint64 { return s.Skipped }),
		counter("itlmon_otlp_minutes_elsewhere_total", "Rollup minutes another collector's exporter claimed (and sends).",
			func(s otlp.Stats) uint64 { return s.Elsewhere }),
	); err != nil {
		return nil, fmt.Errorf("otlp metrics: %w", err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx) }()
	log.Info().Str("endpoint", c.OTLPEndpoint).Dur("interval", c.OTLPInterval).Msg("exporting closed rollup minutes as OTLP metrics")
	return func() { cancel(); <-done }, nil
}

func registerAll(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
