package join

import (
	"strings"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

// The edge vantage point (wasm/edge): a Worker between the origin and the
// browser reports, for each stream, when each content event arrived from
// the origin (beacon.Origin with VantageEdge: EmitUs are arrival times at
// the edge, Flushes the reads of the origin's body). Put next to the
// browser's record, it splits the path in two hops, origin→edge
// (collector.HopOriginEdge) and edge→browser (collector.HopEdgeBrowser), and
// tells on which one a network delay happened.

// EdgeResult is the join of a client record with its edge timeline (and the
// origin's, when the origin reported too).
type EdgeResult struct {
	// The edge side (as Result's origin side, for the edge's arrivals).
	Edge Result

	// What each hop added: edge minus origin (OriginEdge*), client minus
	// edge (EdgeBrowser*). Valid when the matching Has* is set.
	OriginEdgeTTFTUs, EdgeBrowserTTFTUs            int64
	OriginEdgeP50Us, OriginEdgeP99Us               int64
	EdgeBrowserP50Us, EdgeBrowserP99Us             int64
	HasOriginEdgeTTFT, HasEdgeBrowserTTFT          bool
	HasOriginEdgeITL, HasEdgeBrowserITL, HasOrigin bool
	OriginTTFTUs, OriginGapP50Us, OriginGapP99Us   uint32 // the origin side (OriginTTFTUs NoTime without it)

	// The client's attribution once the edge's evidence is in, and the hop
	// of each network delay.
	Causes
	Hops collector.Hops
}

// AttributeEdge joins client record c with edge timeline e and, when not
// nil, origin timeline o. c's causes are taken as they stand: refine them
// with the origin's evidence first (Attribute, refine), so that a delay the
// origin's emit times show stays `origin`.
//
// A client stall (the gap between two content events) is looked up at the
// edge: the edge's gap between the same two events, found by index when
// both sides kept every content event and counted the same number, else by
// mapping the stall onto the edge's clock (offset = client TTFT - edge
// TTFT) and taking the longest edge gap that overlaps it. The edge saw the
// gap when its own gap is at least SameGapShare of the client's or a stall
// itself. Then:
//
//   - a `network` stall is on origin→edge when the edge saw the gap, else
//     on edge→browser;
//   - an `unknown` stall the edge did not see becomes `network` on
//     edge→browser (the page was not busy and the bytes had reached the edge
//     on time); one the edge saw and received coalesced (the read that ended
//     it carried several events) becomes `network` on origin→edge; one the
//     edge saw spaced stays `unknown` (the origin may have been late: only
//     its timeline can tell);
//   - `page` and `origin` stalls get no hop.
//
// The wait for the first token is placed the same way, except that a
// `network` wait the edge saw goes on origin→edge only when the edge
// received it coalesced too, else on edge→browser (every stream waits for
// its first token: that the edge waited as well is no evidence of where
// the browser's first read got coalesced). The edge saw the wait when its
// own TTFT is at least SameGapShare of the client's or the client's exceeds
// it by at most the stall threshold; coalesced means the edge's first
// content read carried several events.
func AttributeEdge(c *beacon.Record, e, o *beacon.Origin) EdgeResult {
	var zero beacon.Record
	zero.TTFTUs = beacon.NoTime
	r := EdgeResult{Edge: Attribute(&zero, e), OriginTTFTUs: beacon.NoTime}
	r.StallsByCause, r.StalledByCause, r.TTFTCause = c.StallsByCause, c.StalledByCause, c.TTFTCause
	edgeTTFT := r.Edge.OriginTTFTUs
	edgeGaps := len(e.EmitUs) >= 2

	// What each hop added.
	if c.TTFTUs != beacon.NoTime && edgeTTFT != beacon.NoTime {
		r.HasEdgeBrowserTTFT, r.EdgeBrowserTTFTUs = true, int64(c.TTFTUs)-int64(edgeTTFT)
	}
	if c.ContentEvents >= 2 && edgeGaps {
		r.HasEdgeBrowserITL = true
		r.EdgeBrowserP50Us = int64(c.GapP50Us) - int64(r.Edge.OriginGapP50Us)
		r.EdgeBrowserP99Us = int64(c.GapP99Us) - int64(r.Edge.OriginGapP99Us)
	}
	if o != nil {
		os := Attribute(&zero, o)
		r.HasOrigin = true
		r.OriginTTFTUs, r.OriginGapP50Us, r.OriginGapP99Us = os.OriginTTFTUs, os.OriginGapP50Us, os.OriginGapP99Us
		if os.OriginTTFTUs != beacon.NoTime && edgeTTFT != beacon.NoTime {
			r.HasOriginEdgeTTFT, r.OriginEdgeTTFTUs = true, int64(edgeTTFT)-int64(os.OriginTTFTUs)
		}
		if len(o.EmitUs) >= 2 && edgeGaps {
			r.HasOriginEdgeITL = true
			r.OriginEdgeP50Us = int64(r.Edge.OriginGapP50Us) - int64(os.OriginGapP50Us)
			r.OriginEdgeP99Us = int64(r.Edge.OriginGapP99Us) - int64(os.OriginGapP99Us)
		}
	}

	// The wait for the first token.
	if cause := meter.Cause(c.TTFTCause); (cause == meter.CauseNetwork || cause == meter.CauseUnknown) && r.HasEdgeBrowserTTFT {
		saw := float64(edgeTTFT) >= SameGapShare*float64(c.TTFTUs) || r.EdgeBrowserTTFTUs <= int64(OriginStallUs)
		first := 0
		if len(e.EmitUs) > 0 {
			first = sameRead(e.EmitUs, 0)
		}
		coalesced := first > 1 || len(e.EmitUs) == 0 && e.MaxEventsPerFlush > 1
		if cause == meter.CauseNetwork && saw && !coalesced {
			saw = false // the edge got it spaced: the browser's coalescing came after it
		}
		if hop, ok := place(cause, saw, coalesced); ok {
			r.TTFTCause, r.Hops.TTFT = uint8(meter.CauseNetwork), hop
		}
	}

	// Stalls.
	if len(c.StallList) == 0 {
		return r
	}
	r.StallCauses = make([]uint8, len(c.StallList))
	r.Hops.Stall = make([]string, len(c.StallList))
	arrivals := contentArrivals(c)
	byIndex := arrivals != nil && uint32(len(arrivals)) == c.ContentEvents &&
		c.ContentEvents == e.ContentEvents && e.EmitsDropped == 0
	offset := int64(0)
	if r.HasEdgeBrowserTTFT {
		offset = r.EdgeBrowserTTFTUs
	}
	for i, s := range c.StallList {
		cause := meter.Cause(s.Cause)
		r.StallCauses[i] = s.Cause
		if (cause != meter.CauseNetwork && cause != meter.CauseUnknown) || !edgeGaps {
			continue
		}
		k, ok := -1, false
		if byIndex {
			k, ok = endIndex(arrivals, s)
		}
		if !ok {
			k, ok = longestOverlap(e.EmitUs, int64(s.StartUs)-offset, int64(s.EndUs)-offset)
		}
		if !ok || k <= 0 || k >= len(e.EmitUs) {
			continue
		}
		eg, cg := sub(e.EmitUs[k], e.EmitUs[k-1]), sub(s.EndUs, s.StartUs)
		saw := float64(eg) >= SameGapShare*float64(cg) || eg > OriginStallUs
		hop, ok := place(cause, saw, sameRead(e.EmitUs, k) > 1)
		if !ok {
			continue
		}
		if cause != meter.CauseNetwork {
			r.StallsByCause[cause] = dec32(r.StallsByCause[cause], 1)
			r.StalledByCause[cause] = dec64(r.StalledByCause[cause], uint64(cg))
			r.StallsByCause[meter.CauseNetwork]++
			r.StalledByCause[meter.CauseNetwork] += uint64(cg)
		}
		r.StallCauses[i], r.Hops.Stall[i] = uint8(meter.CauseNetwork), hop
		if hop == collector.HopOriginEdge {
			r.Hops.OriginEdgeStalls++
			r.Hops.OriginEdgeStalledUs += uint64(cg)
		} else {
			r.Hops.EdgeBrowserStalls++
			r.Hops.EdgeBrowserStalledUs += uint64(cg)
		}
	}
	return r
}

// place returns the hop of a delay of cause (network or unknown) that the
// edge saw or not, and whose events the edge received coalesced or not;
// false when the edge cannot tell (an unknown delay it saw spaced).
func place(cause meter.Cause, saw, coalesced bool) (string, bool) {
	switch {
	case !saw:
		return collector.HopEdgeBrowser, true
	case cause == meter.CauseNetwork || coalesced:
		return collector.HopOriginEdge, true
	}
	return "", false
}

// sameRead counts the content events that arrived at the edge in the read
// of event k (the same arrival time) from k on.
func sameRead(arrive []uint32, k int) int {
	n := 1
	for j := k + 1; j < len(arrive) && arrive[j] == arrive[k]; j++ {
		n++
	}
	return n
}

// endIndex finds, among the client's content arrivals, the event that ends
// stall s (the first of those sharing its read), when the event before it
// starts s.
func endIndex(arrivals []uint32, s beacon.Stall) (int, bool) {
	k := 0
	for k < len(arrivals) && arrivals[k] < s.EndUs {
		k++
	}
	if k == 0 || k >= len(arrivals) || arrivals[k] != s.EndUs || arrivals[k-1] != s.StartUs {
		return 0, false
	}
	return k, true
}

// longestOverlap returns the index k of the longest gap (arrive[k-1],
// arrive[k]] overlapping [lo, hi].
func longestOverlap(arrive []uint32, lo, hi int64) (int, bool) {
	if hi <= lo {
		return 0, false
	}
	best, bestGap := -1, uint32(0)
	for j := 1; j < len(arrive); j++ {
		if int64(arrive[j]) <= lo || int64(arrive[j-1]) >= hi {
			continue
		}
		if g := sub(arrive[j], arrive[j-1]); best < 0 || g > bestGap {
			best, bestGap = j, g
		}
	}
	return best, best > 0
}

// ApplyEdge puts the edge's facts and attribution r into the client stream:
// colo, country and region from request.cf (more exact than a GeoIP guess),
// the refined causes and the hops.
func ApplyEdge(st *collector.Stream, e *beacon.Origin, r *EdgeResult) {
	st.Colo = CleanCode(e.Edge.Colo, 8)
	if c := CleanCode(e.Edge.Country, 2); len(c) == 2 && c != "XX" && c != "T1" && isAlpha(c) {
		if rc := strings.TrimPrefix(CleanCode(e.Edge.RegionCode, 6), c+"-"); rc != "" && len(rc) <= 3 {
			st.Region = c + "-" + rc
		} else if c != st.Country {
			st.Region = "unknown" // the GeoIP region was another country's
		}
		st.Country = c
	}
	r.Causes.Apply(st)
	st.Hops = r.Hops
}

// CleanCode is s trimmed and upper-cased, "" when longer than n bytes or
// not letters, digits and '-'.
func CleanCode(s string, n int) string {
	s = strings.ToUpper(strings.TrimSpace(s))
	if len(s) > n {
		return ""
	}
	for i := 0; i < len(s); i++ {
		if b := s[i]; !(b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '-') {
			return ""
		}
	}
	return s
}

func isAlpha(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}
