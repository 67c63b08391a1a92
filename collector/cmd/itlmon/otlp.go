package main

import (
	"context"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/otlp"
)

// startOTLP runs the OTLP exporter (collector/otlp) until the returned stop
// is called; stop waits for it to end.
func startOTLP(ctx context.Context, conn otlp.Conn, c *Config, log zerolog.Logger) (stop func(), err error) {
	log = log.With().Str("component", "otlp").Logger()
	e, err := otlp.New(otlp.Config{Endpoint: c.OTLPEndpoint, Conn: conn, Interval: c.OTLPInterval, Logger: log})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx) }()
	log.Info().Str("endpoint", c.OTLPEndpoint).Dur("interval", c.OTLPInterval).Msg("exporting closed rollup minutes as OTLP metrics")
	return func() { cancel(); <-done }, nil
}
