package join

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/secret"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

const ms = 1000 // microseconds

// cadence returns n emit times `every` apart starting at first, with extra
// added before event `at` (0 = none).
func cadence(n int, first, every uint32, at int, extra uint32) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = first + uint32(i)*every
		if at > 0 && i >= at {
			t[i] += extra
		}
	}
	return t
}

// client builds a client record from content arrival times, finding its
// stalls (gaps > 200 ms) and giving each the cause `cause`.
func client(arrivals []uint32, cause, ttftCause meter.Cause) *beacon.Record {
	c := &beacon.Record{
		TTFTUs:        arrivals[0],
		ContentEvents: uint32(len(arrivals)),
		TTFTCause:     uint8(ttftCause),
	}
	var gaps []uint32
	for i, a := range arrivals {
		c.Timeline = append(c.Timeline, beacon.Stamp{AtUs: a, Content: true, Read: uint32(i)})
		if i == 0 {
			continue
		}
		g := a - arrivals[i-1]
		gaps = append(gaps, g)
		if g > OriginStallUs {
			c.StallList = append(c.StallList, beacon.Stall{StartUs: arrivals[i-1], EndUs: a, Cause: uint8(cause)})
			c.Stalls++
			c.StalledUs += uint64(g)
			c.StallsByCause[cause]++
			c.StalledByCause[cause] += uint64(g)
		}
	}
	if len(gaps) > 0 {
		s := append([]uint32(nil), gaps...)
		sortU32(s)
		c.GapP50Us, c.GapP99Us = quantile(s, 0.5), quantile(s, 0.99)
	}
	return c
}

func sortU32(s []uint32) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

func originOf(emits []uint32) *beacon.Origin {
	return &beacon.Origin{
		EmitUs: emits, TTFTUs: emits[0], ContentEvents: uint32(len(emits)),
		Events: uint32(len(emits)), Flushes: uint32(len(emits)),
	}
}

func shift(t []uint32, d uint32) []uint32 {
	out := make([]uint32, len(t))
	for i, v := range t {
		out[i] = v + d
	}
	return out
}

// hold returns arrivals where every event emitted in [from, from+d) arrives
// at from+d (a proxy holding the bytes, then releasing them in one read).
func hold(t []uint32, from, d uint32) []uint32 {
	out := make([]uint32, len(t))
	for i, v := range t {
		out[i] = v
		if v >= from && v < from+d {
			out[i] = from + d
		}
	}
	return out
}

func TestAttributeStalls(t *testing.T) {
	smooth := cadence(30, 100*ms, 20*ms, 0, 0)
	paused := cadence(30, 100*ms, 20*ms, 15, 600*ms)
	for _, tc := range []struct {
		name        string
		c           *beacon.Record
		o           *beacon.Origin
		dropped     bool // client timeline truncated: match by time
		want        meter.Cause
		wantByIndex int
	}{
		{"origin pause, client unknown", client(shift(paused, 40*ms), meter.CauseUnknown, meter.CauseNone), originOf(paused), false, meter.CauseOrigin, 1},
		{"origin pause, by time", client(shift(paused, 40*ms), meter.CauseUnknown, meter.CauseNone), originOf(paused), true, meter.CauseOrigin, 0},
		{"origin pause overrides page", client(shift(paused, 40*ms), meter.CausePage, meter.CauseNone), originOf(paused), false, meter.CauseOrigin, 1},
		{"origin pause seen as network", client(shift(paused, 40*ms), meter.CauseNetwork, meter.CauseNone), originOf(paused), false, meter.CauseOrigin, 1},
		{"proxy hold stays network", client(shift(hold(smooth, 300*ms, 400*ms), 40*ms), meter.CauseNetwork, meter.CauseNone), originOf(smooth), false, meter.CauseNetwork, 1},
		{"proxy hold unknown becomes network", client(shift(hold(smooth, 300*ms, 400*ms), 40*ms), meter.CauseUnknown, meter.CauseNone), originOf(smooth), true, meter.CauseNetwork, 0},
		{"busy page stays page", client(shift(hold(smooth, 300*ms, 400*ms), 40*ms), meter.CausePage, meter.CauseNone), originOf(smooth), false, meter.CausePage, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.dropped {
				tc.c.TimelineDropped = 1
			}
			r := Attribute(tc.c, tc.o)
			if got, want := len(r.StallCauses), len(tc.c.StallList); got != want || got == 0 {
				t.Fatalf("len(StallCauses) = %d, want %d (> 0)", got, want)
			}
			for i, got := range r.StallCauses {
				if meter.Cause(got) != tc.want {
					t.Fatalf("stall %d cause = %d, want %d", i, got, tc.want)
				}
			}
			if got, want := r.ByIndex, tc.wantByIndex; got != want {
				t.Fatalf("ByIndex = %d, want %d", got, want)
			}
			var n uint32
			var stalled uint64
			for cause := range meter.NumCauses {
				n += r.StallsByCause[cause]
				stalled += r.StalledByCause[cause]
				if cause != int(tc.want) && r.StallsByCause[cause] != 0 {
					t.Fatalf("StallsByCause[%d] = %d, want 0", cause, r.StallsByCause[cause])
				}
			}
			if n != tc.c.Stalls || stalled != tc.c.StalledUs {
				t.Fatalf("refined totals %d stalls %d us, want the client's %d, %d", n, stalled, tc.c.Stalls, tc.c.StalledUs)
			}
		})
	}
}

// The "same gap" rule: >= 70 % of the client's gap, or itself a stall.
func TestAttributeSameGapRule(t *testing.T) {
	for _, tc := range []struct {
		originPause, clientExtra uint32 // extra before event 10, at the origin and added on the path
		want                     meter.Cause
	}{
		{originPause: 180 * ms, clientExtra: 120 * ms, want: meter.CauseNetwork}, // origin gap 200 of 320: 62 %, not > 200 ms
		{originPause: 200 * ms, clientExtra: 60 * ms, want: meter.CauseOrigin},   // 220 of 280: 79 %
		{originPause: 220 * ms, clientExtra: 400 * ms, want: meter.CauseOrigin},  // 240 of 640: 38 %, but > 200 ms
	} {
		emits := cadence(20, 50*ms, 20*ms, 10, tc.originPause)
		arr := cadence(20, 60*ms, 20*ms, 10, tc.originPause+tc.clientExtra)
		r := Attribute(client(arr, meter.CauseUnknown, meter.CauseNone), originOf(emits))
		if len(r.StallCauses) != 1 || meter.Cause(r.StallCauses[0]) != tc.want {
			t.Fatalf("origin pause %d ms, path +%d ms: causes %v, want [%d]", tc.originPause/ms, tc.clientExtra/ms, r.StallCauses, tc.want)
		}
	}
}

func TestAttributeBufferingProxy(t *testing.T) {
	// nginx buffering + gzip: the origin streams 40 events over 800 ms, the
	// page gets all of them in one read at the end.
	emits := cadence(40, 5*ms, 20*ms, 0, 0)
	arr := make([]uint32, len(emits))
	for i := range arr {
		arr[i] = emits[len(emits)-1] + 3*ms
	}
	c := client(arr, meter.CauseUnknown, meter.CauseNetwork)
	r := Attribute(c, originOf(emits))
	if got, want := meter.Cause(r.TTFTCause), meter.CauseNetwork; got != want {
		t.Fatalf("TTFTCause = %d, want %d", got, want)
	}
	if !r.HasAddedTTFT || r.AddedTTFTUs < 700*ms {
		t.Fatalf("AddedTTFTUs = %d (has %v), want > 700 ms", r.AddedTTFTUs, r.HasAddedTTFT)
	}
	if got, want := r.OriginGapP50Us, uint32(20*ms); got != want {
		t.Fatalf("OriginGapP50Us = %d, want %d", got, want)
	}
	if got, want := r.AddedP50Us, int64(-20*ms); got != want {
		t.Fatalf("AddedP50Us = %d, want %d", got, want)
	}
	if r.OriginStalls != 0 || r.OriginTTFTUs != 5*ms || r.OriginEventsPerFlush != 1 {
		t.Fatalf("origin side: stalls %d, ttft %d, events/flush %v; want 0, 5000, 1", r.OriginStalls, r.OriginTTFTUs, r.OriginEventsPerFlush)
	}
	if got, want := r.OriginITL.Count(), uint64(39); got != want {
		t.Fatalf("OriginITL.Count() = %d, want %d", got, want)
	}
}

func TestAttributeTTFTCause(t *testing.T) {
	for _, tc := range []struct {
		clientTTFT, originTTFT uint32
		in, want               meter.Cause
	}{
		{1000 * ms, 900 * ms, meter.CauseUnknown, meter.CauseOrigin}, // the model was slow to start
		{1000 * ms, 900 * ms, meter.CauseNetwork, meter.CauseOrigin},
		{1000 * ms, 100 * ms, meter.CauseUnknown, meter.CauseNetwork},
		{1000 * ms, 100 * ms, meter.CausePage, meter.CausePage},
		{300 * ms, 280 * ms, meter.CauseNone, meter.CauseNone},      // nothing to explain
		{300 * ms, 10 * ms, meter.CauseUnknown, meter.CauseNetwork}, // the path added 290 ms
		{50 * ms, 10 * ms, meter.CauseUnknown, meter.CauseOrigin},   // the path added 40 ms, less than a stall
	} {
		c := client([]uint32{tc.clientTTFT, tc.clientTTFT + 20*ms}, meter.CauseUnknown, tc.in)
		r := Attribute(c, originOf([]uint32{tc.originTTFT, tc.originTTFT + 20*ms}))
		if got := meter.Cause(r.TTFTCause); got != tc.want {
			t.Fatalf("client TTFT %d ms (%d), origin %d ms: cause %d, want %d", tc.clientTTFT/ms, tc.in, tc.originTTFT/ms, got, tc.want)
		}
	}
}

func TestAttributeNoOriginContent(t *testing.T) {
	c := client(cadence(5, 10*ms, 300*ms, 0, 0), meter.CauseUnknown, meter.CauseUnknown)
	r := Attribute(c, &beacon.Origin{TTFTUs: beacon.NoTime})
	if r.OriginTTFTUs != beacon.NoTime || r.HasAddedTTFT || r.HasAddedITL {
		t.Fatalf("origin without content: %+v", r)
	}
	if r.StallsByCause != c.StallsByCause || r.TTFTCause != c.TTFTCause {
		t.Fatalf("causes changed without origin evidence: %v, want %v", r.StallsByCause, c.StallsByCause)
	}
}

func BenchmarkAttribute(b *testing.B) {
	emits := cadence(500, 100*ms, 20*ms, 250, 600*ms)
	c := client(shift(emits, 30*ms), meter.CauseUnknown, meter.CauseNone)
	o := originOf(emits)
	b.ReportAllocs()
	for b.Loop() {
		Attribute(c, o)
	}
}

func TestParseOriginKey(t *testing.T) {
	for _, tc := range []struct {
		in, site, key string
		ok            bool
	}{
		{"chat=0123456789abcdef", "chat", "0123456789abcdef", true},
		{"chat=short", "", "", false},
		{"=0123456789abcdef", "", "", false},
		{"chat", "", "", false},
		{"0123456789abcdef0123", "", "", false}, // a key without its site
	} {
		site, key, err := ParseOriginKey(tc.in)
		if (err == nil) != tc.ok || site != tc.site || key.Reveal() != tc.key {
			t.Fatalf("ParseOriginKey(%q) = %q, %q, %v; want %q, %q, ok %v", tc.in, site, key.Reveal(), err, tc.site, tc.key, tc.ok)
		}
		// The error names the site at most, never the value.
		if err != nil && len(tc.in) > 4 && strings.Contains(err.Error(), tc.in[len(tc.in)-5:]) {
			t.Errorf("ParseOriginKey(%q): the error quotes the key: %v", tc.in, err)
		}
	}
	keys := StaticKeys(map[string]secret.Token{"a": secret.New("k"), "b": {}})
	if k, ok := keys("a"); !ok || k.Reveal() != "k" {
		t.Fatalf("keys(a) = %q, %v", k.Reveal(), ok)
	}
	for _, s := range []string{"b", "c"} {
		if _, ok := keys(s); ok {
			t.Fatalf("keys(%q) ok, want refused", s)
		}
	}
}

func TestRegisterMetrics(t *testing.T) {
	in := NewIntake(nil, zerolog.Nop())
	reg := prometheus.NewRegistry()
	if err := in.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(mfs), 6; got != want {
		t.Fatalf("%d metric families, want %d", got, want)
	}
}
