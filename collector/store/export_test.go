package store

import (
	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector"
)

// SpoolStreams appends streams to the spool in dir as one frame, as a writer
// does when an insert fails.
func SpoolStreams(dir string, streams []collector.Stream) error {
	sp, err := openSpool(dir, zerolog.Nop())
	if err != nil {
		return err
	}
	defer sp.Close()
	b := newRowBatch(streams)
	p, err := encodeBatch(&b)
	if err != nil {
		return err
	}
	return sp.Append(p)
}
