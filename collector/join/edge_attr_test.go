package join

import (
	"slices"
	"testing"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

// held returns t with events from at on held until t[at]+delay: the ones
// that were due by then arrive together, in one read, at that time.
func held(t []uint32, at int, delay uint32) []uint32 {
	out := slices.Clone(t)
	release := t[at] + delay
	for i := at; i < len(out); i++ {
		out[i] = max(out[i], release)
	}
	return out
}

// all returns n copies of at: a whole answer in one read.
func all(n int, at uint32) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = at
	}
	return t
}

func edgeOf(arrivals []uint32) *beacon.Origin {
	e := originOf(arrivals)
	e.Vantage = beacon.VantageEdge
	return e
}

func TestAttributeEdgeStalls(t *testing.T) {
	origin := cadence(30, 100*ms, 20*ms, 0, 0)
	paused := cadence(30, 100*ms, 20*ms, 15, 600*ms)
	atEdge := shift(origin, 5*ms)
	heldBeforeEdge := held(atEdge, 15, 600*ms)
	tests := []struct {
		name        string
		origin      []uint32 // nil: no origin timeline
		edge, cli   []uint32
		cause       meter.Cause // the client's cause of its stall
		wantCause   meter.Cause
		wantHop     string
		originEdge  uint32 // network stalls per hop
		edgeBrowser uint32
	}{
		{"network, held before the edge", origin, heldBeforeEdge, shift(heldBeforeEdge, 40*ms), meter.CauseNetwork,
			meter.CauseNetwork, collector.HopOriginEdge, 1, 0},
		{"network, held after the edge", origin, atEdge, held(shift(atEdge, 40*ms), 15, 600*ms), meter.CauseNetwork,
			meter.CauseNetwork, collector.HopEdgeBrowser, 0, 1},
		{"unknown, the edge on time: after it", nil, atEdge, held(shift(atEdge, 40*ms), 15, 600*ms), meter.CauseUnknown,
			meter.CauseNetwork, collector.HopEdgeBrowser, 0, 1},
		{"unknown, the edge got it coalesced: before it", nil, heldBeforeEdge, shift(heldBeforeEdge, 40*ms), meter.CauseUnknown,
			meter.CauseNetwork, collector.HopOriginEdge, 1, 0},
		{"unknown, the edge got it spaced: the origin's, maybe", nil, shift(paused, 5*ms), shift(paused, 45*ms), meter.CauseUnknown,
			meter.CauseUnknown, "", 0, 0},
		{"page: no hop", nil, atEdge, held(shift(atEdge, 40*ms), 15, 600*ms), meter.CausePage,
			meter.CausePage, "", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := client(tt.cli, tt.cause, meter.CauseNone)
			if len(c.StallList) != 1 {
				t.Fatalf("client has %d stalls, want 1", len(c.StallList))
			}
			var o *beacon.Origin
			if tt.origin != nil {
				o = originOf(tt.origin)
			}
			r := AttributeEdge(c, edgeOf(tt.edge), o)
			if got := meter.Cause(r.StallCauses[0]); got != tt.wantCause {
				t.Errorf("cause = %v, want %v", got, tt.wantCause)
			}
			if got := r.Hops.Stall[0]; got != tt.wantHop {
				t.Errorf("hop = %q, want %q", got, tt.wantHop)
			}
			if r.Hops.OriginEdgeStalls != tt.originEdge || r.Hops.EdgeBrowserStalls != tt.edgeBrowser {
				t.Errorf("stalls per hop = %d, %d; want %d, %d", r.Hops.OriginEdgeStalls, r.Hops.EdgeBrowserStalls, tt.originEdge, tt.edgeBrowser)
			}
			if got, want := r.StallsByCause[tt.wantCause], uint32(1); got != want {
				t.Errorf("StallsByCause[%v] = %d, want %d", tt.wantCause, got, want)
			}
			if tt.wantCause != tt.cause && r.StallsByCause[tt.cause] != 0 {
				t.Errorf("StallsByCause[%v] = %d, want 0 (moved)", tt.cause, r.StallsByCause[tt.cause])
			}
		})
	}
}

// A buffering proxy holds the whole answer: no gaps anywhere, only a TTFT
// as long as the answer. Its hop is where the answer first arrived whole.
func TestAttributeEdgeTTFT(t *testing.T) {
	origin := cadence(30, 100*ms, 20*ms, 0, 0)
	end := origin[29]
	tests := []struct {
		name      string
		edge, cli []uint32
		cause     meter.Cause
		wantCause meter.Cause
		wantHop   string
	}{
		{"buffered before the edge", all(30, end+5*ms), all(30, end+45*ms), meter.CauseNetwork, meter.CauseNetwork, collector.HopOriginEdge},
		{"buffered after the edge", shift(origin, 5*ms), all(30, end+45*ms), meter.CauseNetwork, meter.CauseNetwork, collector.HopEdgeBrowser},
		{"unknown, coalesced at the edge", all(30, end+5*ms), all(30, end+45*ms), meter.CauseUnknown, meter.CauseNetwork, collector.HopOriginEdge},
		{"unknown, after the edge", shift(origin, 5*ms), all(30, end+45*ms), meter.CauseUnknown, meter.CauseNetwork, collector.HopEdgeBrowser},
		{"network, a fast first token the browser got coalesced, the edge spaced", shift(origin, 5*ms), append([]uint32{origin[1] + 45*ms}, shift(origin[1:], 45*ms)...), meter.CauseNetwork, meter.CauseNetwork, collector.HopEdgeBrowser},
		{"network, a fast first token coalesced at the edge already", append([]uint32{origin[1] + 5*ms}, shift(origin[1:], 5*ms)...), append([]uint32{origin[1] + 45*ms}, shift(origin[1:], 45*ms)...), meter.CauseNetwork, meter.CauseNetwork, collector.HopOriginEdge},
		{"unknown, the edge waited as long, spaced", shift(cadence(30, 700*ms, 20*ms, 0, 0), 0), shift(cadence(30, 700*ms, 20*ms, 0, 0), 40*ms), meter.CauseUnknown, meter.CauseUnknown, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := client(tt.cli, meter.CauseNetwork, tt.cause)
			r := AttributeEdge(c, edgeOf(tt.edge), originOf(origin))
			if got := meter.Cause(r.TTFTCause); got != tt.wantCause {
				t.Errorf("TTFT cause = %v, want %v", got, tt.wantCause)
			}
			if r.Hops.TTFT != tt.wantHop {
				t.Errorf("TTFT hop = %q, want %q", r.Hops.TTFT, tt.wantHop)
			}
			if !r.HasEdgeBrowserTTFT || r.EdgeBrowserTTFTUs != int64(tt.cli[0])-int64(tt.edge[0]) {
				t.Errorf("edge→browser TTFT = %d (%v), want %d", r.EdgeBrowserTTFTUs, r.HasEdgeBrowserTTFT, int64(tt.cli[0])-int64(tt.edge[0]))
			}
			if !r.HasOriginEdgeTTFT || r.OriginEdgeTTFTUs != int64(tt.edge[0])-int64(origin[0]) {
				t.Errorf("origin→edge TTFT = %d (%v), want %d", r.OriginEdgeTTFTUs, r.HasOriginEdgeTTFT, int64(tt.edge[0])-int64(origin[0]))
			}
		})
	}
}

// The edge's request.cf wins over the GeoIP guess; a region of another
// country is dropped.
func TestApplyEdgeLocation(t *testing.T) {
	tests := []struct {
		geoCountry, geoRegion string
		edge                  beacon.Edge
		country, region, colo string
	}{
		{"DE", "DE-BY", beacon.Edge{Colo: "fra", Country: "DE", RegionCode: "BE"}, "DE", "DE-BE", "FRA"},
		{"DE", "DE-BY", beacon.Edge{Colo: "FRA", Country: "DE"}, "DE", "DE-BY", "FRA"},
		{"NL", "NL-NH", beacon.Edge{Colo: "AMS", Country: "BE"}, "BE", "unknown", "AMS"},
		{"NL", "NL-NH", beacon.Edge{Colo: "AMS", Country: "XX"}, "NL", "NL-NH", "AMS"},
		{"NL", "NL-NH", beacon.Edge{Colo: "<script>", Country: "FR", RegionCode: "FR-IDF"}, "FR", "FR-IDF", ""},
	}
	for _, tt := range tests {
		st := collector.Stream{Country: tt.geoCountry, Region: tt.geoRegion}
		e := beacon.Origin{Vantage: beacon.VantageEdge, Edge: tt.edge}
		r := AttributeEdge(&st.Record, &e, nil)
		ApplyEdge(&st, &e, &r)
		if st.Country != tt.country || st.Region != tt.region || st.Colo != tt.colo {
			t.Errorf("%+v on %s/%s: %s %s %q, want %s %s %q", tt.edge, tt.geoCountry, tt.geoRegion,
				st.Country, st.Region, st.Colo, tt.country, tt.region, tt.colo)
		}
	}
}
