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

// Record is the browser record of a typical 120-token answer from a chat
// page (Answer, seeded with seed1 and seed2), its stream id's bytes 1, 2
// and 15 set to id's.
func Record(id [3]byte, seed1, seed2 uint64) beacon.Record {
	r := beacon.Record{
		StartUnixMs: 1_790_000_000_000, PageOrigin: "https://chat.example.com", PagePath: "/chat",
		URLOrigin: "https://api.example.com", URLPath: "/v1/chat/completions", Model: "gpt-test",
		HTTPProto: "h2", ContentType: "text/event-stream", HTTPStatus: 200,
		TTFBUs: 12_000, DurationUs: 900_000, Bytes: 4096, TokensPerSec: 47.6, Jank: 2, Smooth: true,
	}
	r.StreamID[0], r.StreamID[1], r.StreamID[2], r.StreamID[15] = 0xa0, id[0], id[1], id[2]
	Answer(&r, rand.New(rand.NewPCG(seed1, seed2)))
	return r
}
