// Package benchrec makes the records that benchmarks and reports measure
// with: what the browser module sends for a typical answer.
package benchrec

import (
	"math/rand/v2"

	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/hist"
)

// Answer gives r the values the module sends for a 120-token answer, drawn
// from rng: the first content event after 20-420 ms, gaps of 8-60 ms with a
// 250 ms stall now and then (one in 40), in both ITL histograms, and the
// sampled timeline (the first 32 events and every 16th after). Those values
// are what size a record's row and cost its check.
func Answer(r *beacon.Record, rng *rand.Rand) {
	r.ITL, r.ITLTokens, r.Timeline = hist.Histogram{}, hist.Histogram{}, nil
	at := uint32(20_000 + rng.IntN(400_000))
	r.TTFTUs, r.TTFCUs = at, at
	const events = 120
	for e := range events {
		gap := uint32(8_000 + rng.IntN(52_000))
		if rng.IntN(40) == 0 {
			gap += 250_000 // a stall now and then
		}
		if e > 0 {
			r.ITL.Record(float64(gap))
			r.ITLTokens.Record(float64(gap))
			at += gap
		}
		if e < 32 || e%16 == 0 {
			r.Timeline = append(r.Timeline, beacon.Stamp{AtUs: at, Read: uint32(e), Content: true})
		}
	}
	r.Events, r.ContentEvents, r.Tokens, r.Reads = events+2, events, events, events
	r.DurationUs = at + 5_000
}
