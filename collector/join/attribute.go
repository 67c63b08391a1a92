// Package join puts the two vantage points of one stream together: the
// browser's record (what the user saw) and the origin middleware's timeline
// (what the server emitted, package origin), matched by the stream id the
// response carried. From the pair it computes the origin's own TTFT and ITL,
// what the path added (client minus origin), and refines each client stall's
// cause to `origin` when the origin's emit times show the same gap. The edge
// Worker's timelines (edge.go) place network delays on their hop the same way.
//
// Where the join happens: in ClickHouse's inbox, not in a collector's memory.
// Any collector takes any record: browser batches through ingest and the
// store's Writer, origin and edge timelines through Intake (POST /v1/origin),
// all into itl_inbox. The promoter (collector/promoter) turns the inbox into
// the tables users read one sealed window at a time, exactly once, and calls
// Attribute and AttributeEdge on each pair it joins; this package keeps the
// attribution and the intake.
//
// Wiring (collector/server):
//
//	m.Intake = join.NewIntake(m.Writer, log)      // --origin-key set
//	m.Intake.Register(mux, join.StaticKeys(keys)) // POST /v1/origin?site=KEY, X-Itlmon-Key
package join

import (
	"slices"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/hist"
	"github.com/itlmon/itlmon/wasm/meter"
)

// Thresholds of "the origin shows the same gap".
const (
	// SameGapShare: the origin's gap between the corresponding content
	// events is at least this share of the client's gap...
	SameGapShare = 0.7
	// ...or the origin's gap is itself a stall.
	OriginStallUs = uint32(meter.StallThreshold / 1000)
)

// Result is the join of one client record with its origin timeline.
type Result struct {
	// The origin side.
	OriginTTFTUs                                   uint32 // beacon.NoTime when the origin emitted no content
	OriginGapP50Us, OriginGapP99Us, OriginGapMaxUs uint32 // exact, of the emitted gaps
	OriginITL                                      hist.Histogram
	OriginStalls                                   uint32
	OriginEventsPerFlush                           float32

	// Client minus origin. Valid when the matching side values exist
	// (HasAddedTTFT, HasAddedITL).
	AddedTTFTUs               int64
	AddedP50Us, AddedP99Us    int64
	HasAddedTTFT, HasAddedITL bool

	// Refined attribution of the client's stalls.
	Causes
	ByIndex int // stalls matched to origin events by index (the rest by time)
}

// Causes is a client record's attribution as a join refines it: what
// Apply copies into the client's itl_streams row. Both joins (the origin's,
// Result, and the edge's, EdgeResult) carry one.
type Causes struct {
	StallsByCause  [meter.NumCauses]uint32 // indexed by meter.Cause
	StalledByCause [meter.NumCauses]uint64 // microseconds, indexed by meter.Cause
	TTFTCause      uint8
	StallCauses    []uint8 // refined cause per entry of the client's StallList
}

// Apply puts the refined causes into st (a copy of its stall list, so a
// stream sharing its list with another is left alone).
func (c *Causes) Apply(st *collector.Stream) {
	st.StallsByCause = c.StallsByCause
	st.StalledByCause = c.StalledByCause
	st.TTFTCause = c.TTFTCause
	if len(c.StallCauses) == len(st.StallList) && len(st.StallList) > 0 {
		st.StallList = append([]beacon.Stall(nil), st.StallList...)
		for i := range st.StallList {
			st.StallList[i].Cause = c.StallCauses[i]
		}
	}
}

// Attribute joins client record c with origin timeline o.
//
// A client stall is the gap between two consecutive content events. Its
// corresponding origin gap is between the same two events: they are found by
// index when the client kept its whole timeline and both sides counted the
// same content events, else by mapping the stall onto the origin's clock
// (offset = client TTFT - origin TTFT) and taking the longest origin gap that
// overlaps it. The stall's cause becomes `origin` when that origin gap is at
// least SameGapShare of the client's gap or longer than the stall threshold;
// a stall the client could not explain (`unknown`) while the origin emitted
// on time becomes `network`: the page was not busy and the server was not
// late, so the bytes were held on the path. `page` and `network` stand
// otherwise. The wait for the first token is refined the same way: `origin`
// when the origin's own TTFT is at least SameGapShare of the client's or the
// path added at most the stall threshold to it, else an `unknown` becomes
// `network`.
func Attribute(c *beacon.Record, o *beacon.Origin) Result {
	var r Result
	r.StallsByCause = c.StallsByCause
	r.StalledByCause = c.StalledByCause
	r.TTFTCause = c.TTFTCause
	r.OriginTTFTUs = beacon.NoTime
	if len(o.EmitUs) > 0 {
		r.OriginTTFTUs = o.EmitUs[0]
	} else if o.TTFTUs != beacon.NoTime && o.ContentEvents > 0 {
		r.OriginTTFTUs = o.TTFTUs
	}

	// Origin gaps: exact quantiles from the emit times, the histogram from
	// the reporter's (which covers emits beyond EmitUs too).
	gaps := make([]uint32, 0, max(len(o.EmitUs)-1, 0))
	for i := 1; i < len(o.EmitUs); i++ {
		g := sub(o.EmitUs[i], o.EmitUs[i-1])
		gaps = append(gaps, g)
		if g > OriginStallUs {
			r.OriginStalls++
		}
	}
	r.OriginITL = o.ITL.Clone()
	if r.OriginITL.Count() == 0 {
		for _, g := range gaps {
			r.OriginITL.Record(float64(g))
		}
	}
	if len(gaps) > 0 {
		sorted := slices.Clone(gaps)
		slices.Sort(sorted)
		r.OriginGapP50Us = quantile(sorted, 0.50)
		r.OriginGapP99Us = quantile(sorted, 0.99)
		r.OriginGapMaxUs = sorted[len(sorted)-1]
	}
	if o.Flushes > 0 {
		r.OriginEventsPerFlush = float32(o.Events) / float32(o.Flushes)
	}

	if c.TTFTUs != beacon.NoTime && r.OriginTTFTUs != beacon.NoTime {
		r.HasAddedTTFT = true
		r.AddedTTFTUs = int64(c.TTFTUs) - int64(r.OriginTTFTUs)
	}
	if c.ContentEvents >= 2 && len(gaps) > 0 {
		r.HasAddedITL = true
		r.AddedP50Us = int64(c.GapP50Us) - int64(r.OriginGapP50Us)
		r.AddedP99Us = int64(c.GapP99Us) - int64(r.OriginGapP99Us)
	}

	// TTFT cause. The meter gives every stream with content a TTFT cause;
	// the wait was the origin's when the origin's own TTFT is most of it or
	// the path added less than a stall.
	if meter.Cause(c.TTFTCause) != meter.CauseNone && r.HasAddedTTFT {
		switch {
		case float64(r.OriginTTFTUs) >= SameGapShare*float64(c.TTFTUs) || r.AddedTTFTUs <= int64(OriginStallUs):
			r.TTFTCause = uint8(meter.CauseOrigin)
		case meter.Cause(c.TTFTCause) == meter.CauseUnknown:
			r.TTFTCause = uint8(meter.CauseNetwork)
		}
	}

	// Stalls.
	if len(c.StallList) == 0 {
		return r
	}
	r.StallCauses = make([]uint8, len(c.StallList))
	arrivals := contentArrivals(c)
	byIndex := arrivals != nil && uint32(len(arrivals)) == c.ContentEvents &&
		c.ContentEvents == o.ContentEvents && o.EmitsDropped == 0
	offset := int64(0)
	if r.HasAddedTTFT {
		offset = r.AddedTTFTUs
	}
	for i, s := range c.StallList {
		cause := s.Cause
		r.StallCauses[i] = cause
		if len(o.EmitUs) < 2 {
			continue
		}
		og, ok := uint32(0), false
		if byIndex {
			og, ok = gapByIndex(arrivals, o.EmitUs, s)
			if ok {
				r.ByIndex++
			}
		}
		if !ok {
			og, ok = gapByTime(o.EmitUs, int64(s.StartUs)-offset, int64(s.EndUs)-offset)
		}
		if !ok {
			continue
		}
		cg := sub(s.EndUs, s.StartUs)
		switch {
		case float64(og) >= SameGapShare*float64(cg) || og > OriginStallUs:
			cause = uint8(meter.CauseOrigin)
		case meter.Cause(cause) == meter.CauseUnknown:
			cause = uint8(meter.CauseNetwork)
		}
		if cause != s.Cause && int(s.Cause) < meter.NumCauses && int(cause) < meter.NumCauses {
			r.StallsByCause[s.Cause] = dec32(r.StallsByCause[s.Cause], 1)
			r.StalledByCause[s.Cause] = dec64(r.StalledByCause[s.Cause], uint64(cg))
			r.StallsByCause[cause]++
			r.StalledByCause[cause] += uint64(cg)
		}
		r.StallCauses[i] = cause
	}
	return r
}

// contentArrivals returns the arrival times of every content event when the
// client kept its whole timeline, else nil.
func contentArrivals(c *beacon.Record) []uint32 {
	if c.TimelineDropped != 0 || len(c.Timeline) == 0 {
		return nil
	}
	var a []uint32
	for _, st := range c.Timeline {
		if st.Content {
			a = append(a, st.AtUs)
		}
	}
	return a
}

// gapByIndex finds the content events that bound stall s among the client's
// arrivals and returns the origin's gap between the same two events.
func gapByIndex(arrivals, emits []uint32, s beacon.Stall) (uint32, bool) {
	k, found := slices.BinarySearch(arrivals, s.EndUs)
	if !found {
		return 0, false
	}
	for k > 0 && arrivals[k-1] == s.EndUs { // several events in one read share a stamp
		k--
	}
	if k == 0 || arrivals[k-1] != s.StartUs || k >= len(emits) {
		return 0, false
	}
	return sub(emits[k], emits[k-1]), true
}

// gapByTime returns the longest origin gap overlapping [lo, hi] on the
// origin's clock.
func gapByTime(emits []uint32, lo, hi int64) (uint32, bool) {
	if hi <= lo {
		return 0, false
	}
	best, ok := uint32(0), false
	for j := 1; j < len(emits); j++ {
		a, b := int64(emits[j-1]), int64(emits[j])
		if b <= lo || a >= hi {
			continue
		}
		if g := sub(emits[j], emits[j-1]); !ok || g > best {
			best, ok = g, true
		}
	}
	return best, ok
}

// quantile of sorted values by nearest rank.
func quantile(sorted []uint32, q float64) uint32 {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func sub(a, b uint32) uint32 {
	if a < b {
		return 0
	}
	return a - b
}

func dec32(a, b uint32) uint32 { return sub(a, b) }

func dec64(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}
