package meter

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

type fixture struct {
	name string // file name in testdata
	ct   string // Content-Type the stream is served with
	body []byte
}

func (f fixture) text() bool { return strings.HasSuffix(f.name, ".txt") }

func loadFixtures(t testing.TB) []fixture {
	t.Helper()
	paths, err := filepath.Glob("testdata/*")
	if err != nil {
		t.Fatal(err)
	}
	var fs []fixture
	for _, p := range paths {
		var ct string
		switch filepath.Ext(p) {
		case ".sse":
			ct = "text/event-stream; charset=utf-8"
		case ".ndjson":
			ct = "application/x-ndjson"
		case ".txt", ".datastream": // .datastream: the AI SDK's data stream protocol, served as text/plain
			ct = "text/plain; charset=utf-8"
		default:
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, fixture{name: filepath.Base(p), ct: ct, body: b})
	}
	if len(fs) < 12 {
		t.Fatalf("found %d fixtures, want at least 12", len(fs))
	}
	return fs
}

// evInfo is one event as the byte-by-byte feed discovers it.
type evInfo struct {
	off     int // index of the byte that completed it; len(body) when End did
	content bool
	payload string
}

// discover feeds the body one byte at a time, byte i arriving at (i+1)µs, and
// returns every event with the offset of the byte that completed it.
func discover(t testing.TB, f fixture) []evInfo {
	t.Helper()
	m := New(Options{ContentType: f.ct, MaxTimeline: 1 << 20})
	var payloads []string
	m.trace = func(p []byte, _ bool) { payloads = append(payloads, string(p)) }
	for i := range f.body {
		m.Feed(f.body[i:i+1], Duration(i+1)*Microsecond)
	}
	m.End(Duration(len(f.body)+1)*Microsecond, StatusComplete, 200)
	s := m.Summary()
	if s.TimelineDropped != 0 {
		t.Fatalf("%s: timeline dropped %d", f.name, s.TimelineDropped)
	}
	evs := make([]evInfo, len(s.Timeline))
	for i, st := range s.Timeline {
		evs[i] = evInfo{off: int(st.At/Microsecond) - 1, content: st.Content}
		if i < len(payloads) {
			evs[i].payload = payloads[i]
		}
	}
	return evs
}

// run feeds body split at cuts (ascending, inside (0, len)), read k arriving
// at times[k], ends at endAt, and returns the summary.
func run(f fixture, ct string, cuts []int, times []Duration, endAt Duration, opts Options) Summary {
	opts.ContentType = ct
	m := New(opts)
	prev := 0
	for k, c := range append(cuts, len(f.body)) {
		m.Feed(f.body[prev:c], times[k])
		prev = c
	}
	m.End(endAt, StatusComplete, 200)
	return m.Summary()
}

// refTime is the deterministic arrival time of read k in the golden feeds:
// every 30 ms from 250 ms, with a 400 ms hold-up before read 5.
func refTime(k int) Duration {
	d := 250*Millisecond + Duration(k)*30*Millisecond
	if k >= 5 {
		d += 400 * Millisecond
	}
	return d
}

// perEventCuts splits right after each event's last byte.
func perEventCuts(evs []evInfo, n int) []int {
	var cuts []int
	for _, e := range evs {
		if c := e.off + 1; c < n && (len(cuts) == 0 || cuts[len(cuts)-1] < c) {
			cuts = append(cuts, c)
		}
	}
	return cuts
}

// textCuts splits a text fixture into 23-byte reads.
func textCuts(n int) []int {
	var cuts []int
	for c := 23; c < n; c += 23 {
		cuts = append(cuts, c)
	}
	return cuts
}

func TestGolden(t *testing.T) {
	for _, f := range loadFixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			var evs []evInfo
			var cuts []int
			if f.text() {
				cuts = textCuts(len(f.body))
			} else {
				evs = discover(t, f)
				cuts = perEventCuts(evs, len(f.body))
			}
			times := make([]Duration, len(cuts)+1)
			for k := range times {
				times[k] = refTime(k)
			}
			endAt := times[len(times)-1] + 10*Millisecond
			s := run(f, f.ct, cuts, times, endAt, Options{MaxTimeline: 1 << 20})
			got := goldenText(f, s, evs)
			path := filepath.Join("testdata", f.name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from the golden file (run with -update and review the diff):\n%s", f.name, lineDiff(string(want), got))
			}
		})
	}
}

func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n  want %s\n  got  %s\n", i+1, wl, gl)
		}
	}
	return b.String()
}

func ms(d Duration) string {
	if d < 0 {
		return "-"
	}
	return fmt.Sprintf("%.3fms", float64(d)/float64(Millisecond))
}

func goldenText(f fixture, s Summary, evs []evInfo) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	p("# %s (%s, %d bytes). The expectations for this stream: review by hand.", f.name, f.ct, len(f.body))
	if f.text() {
		p("# Feed: 23-byte reads, read k at 250ms + 30ms*k (+400ms from read 5 on), End 10ms after the last read.")
	} else {
		p("# Feed: one read per event (cut after the byte completing each event), read k at 250ms + 30ms*k")
		p("# (+400ms from read 5 on), End 10ms after the last read.")
	}
	tokSrc := "content events"
	if s.TokensReported {
		tokSrc = "usage"
	}
	p("format           %s", s.Format)
	p("status           %s http=%d", s.Status, s.HTTPStatus)
	p("events           %d", s.Events)
	p("content_events   %d", s.ContentEvents)
	p("tokens           %d (%s)", s.Tokens, tokSrc)
	p("reads            %d", s.Reads)
	p("bytes            %d", s.Bytes)
	p("ttfb ttfc ttft   %s %s %s", ms(s.TTFB), ms(s.TTFC), ms(s.TTFT))
	p("duration         %s", ms(s.Duration))
	p("tpot             %s", ms(s.TPOT))
	p("tpot_token       %s", ms(s.TPOTToken))
	p("tokens_per_sec   %.3f", s.TokensPerSec)
	p("gap p50 p95 p99  %s %s %s", ms(s.GapP50), ms(s.GapP95), ms(s.GapP99))
	p("gap max          %s", ms(s.GapMax))
	p("itl              count=%d sum=%.0fus", s.ITL.Count(), s.ITL.Sum())
	p("itl_tokens       count=%d sum=%.0fus", s.ITLTokens.Count(), s.ITLTokens.Sum())
	p("stalls           %d stalled=%s", s.Stalls, ms(s.StalledFor))
	p("jank smooth      %.3f %v", s.Jank, s.Smooth)
	p("events_per_read  %.3f max=%d", s.EventsPerRead, s.MaxEventsPerRead)
	p("bytes_per_read   %.3f", s.BytesPerRead)
	p("subfloor_share   %.3f", s.SubFloorShare)
	p("ttft_cause       %s", s.TTFTCause)
	for c := range NumCauses {
		if s.StallsByCause[c] > 0 {
			p("stalls_by_cause  %s %d %s", Cause(c), s.StallsByCause[c], ms(s.StalledByCause[c]))
		}
	}
	for _, st := range s.StallList {
		p("stall            %s..%s cause=%s next_read_events=%d", ms(st.Start), ms(st.End), st.Cause, st.NextReadEvents)
	}
	p("timeline         %d kept, %d dropped", len(s.Timeline), s.TimelineDropped)
	if len(evs) > 0 {
		p("# Events: index, offset of the byte completing it, content?, payload (truncated).")
		for i, e := range evs {
			c := "-      "
			if e.content {
				c = "content"
			}
			pl := e.payload
			if len(pl) > 120 {
				pl = pl[:30] + "…" + pl[len(pl)-90:]
			}
			p("event %2d @%5d %s %q", i, e.off, c, pl)
		}
	}
	return b.String()
}

// stable clears what depends on how the body was split into reads (by
// definition) and compares histograms separately.
func stable(t *testing.T, s Summary) Summary {
	t.Helper()
	s.Reads, s.TTFB, s.EventsPerRead, s.MaxEventsPerRead, s.BytesPerRead = 0, 0, 0, 0, 0
	s.StallsByCause, s.StalledByCause, s.TTFTCause = [NumCauses]int{}, [NumCauses]Duration{}, 0
	sl := make([]Stall, len(s.StallList))
	for i, st := range s.StallList {
		sl[i] = Stall{Start: st.Start, End: st.End}
	}
	s.StallList = sl
	tl := make([]Stamp, len(s.Timeline))
	for i, st := range s.Timeline {
		tl[i] = Stamp{At: st.At, Content: st.Content}
	}
	s.Timeline = tl
	return s
}

func sameMetrics(t *testing.T, label string, got, want Summary) {
	t.Helper()
	if !got.ITL.Equal(&want.ITL) {
		t.Fatalf("%s: ITL histograms differ", label)
	}
	if !got.ITLTokens.Equal(&want.ITLTokens) {
		t.Fatalf("%s: ITLTokens histograms differ", label)
	}
	g, w := stable(t, got), stable(t, want)
	g.ITL, g.ITLTokens = w.ITL, w.ITLTokens
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s: metrics differ\n got  %+v\n want %+v", label, g, w)
	}
}

// checkSplit feeds f split at cuts with read times, and checks that every
// event gets the time of the read holding its last byte and that all metrics
// equal those of the one-read-per-event reference feed with those times.
func checkSplit(t *testing.T, f fixture, ct string, evs []evInfo, cuts []int, times []Duration, label string) {
	t.Helper()
	endAt := times[len(times)-1] + 5*Millisecond
	opts := Options{MaxTimeline: 1 << 20, MaxStalls: 1 << 10}
	got := run(f, ct, cuts, times, endAt, opts)

	// Expected event times and the reference feed.
	readOf := func(off int) int { // index of the read holding byte off
		k := 0
		for k < len(cuts) && cuts[k] <= off {
			k++
		}
		return k
	}
	evTimes := make([]Duration, len(evs))
	for i, e := range evs {
		if e.off >= len(f.body) {
			evTimes[i] = endAt
		} else {
			evTimes[i] = times[readOf(e.off)]
		}
	}
	if len(got.Timeline) != len(evs) {
		t.Fatalf("%s: %d events, want %d", label, len(got.Timeline), len(evs))
	}
	for i, st := range got.Timeline {
		if st.At != evTimes[i] || st.Content != evs[i].content {
			t.Fatalf("%s: event %d at %v content=%v, want at %v content=%v", label, i, st.At, st.Content, evTimes[i], evs[i].content)
		}
	}
	refCuts := perEventCuts(evs, len(f.body))
	refTimes := make([]Duration, 0, len(refCuts)+1)
	for i, e := range evs {
		if e.off+1 < len(f.body) && (i == 0 || evs[i-1].off != e.off) {
			refTimes = append(refTimes, evTimes[i])
		}
	}
	refTimes = append(refTimes, times[len(times)-1]) // the bytes after the last cut
	want := run(f, ct, refCuts, refTimes, endAt, opts)
	sameMetrics(t, label, got, want)
}

// randomTimes returns n non-decreasing arrival times with a mix of
// back-to-back reads, normal token gaps and stalls.
func randomTimes(r *rand.Rand, n int) []Duration {
	ts := make([]Duration, n)
	at := Duration(r.IntN(500)) * Millisecond
	for k := range ts {
		switch x := r.IntN(10); {
		case x < 5:
			at += Duration(r.IntN(3000)) * Microsecond
		case x < 9:
			at += Duration(10+r.IntN(70)) * Millisecond
		default:
			at += Duration(200+r.IntN(500)) * Millisecond
		}
		ts[k] = at
	}
	return ts
}

func TestResplit(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 25))
	for _, f := range loadFixtures(t) {
		if f.text() {
			// Plain text: one read = one event, so the events depend on the
			// split by definition; check exactly that.
			for range 50 {
				var cuts []int
				for c := 1 + r.IntN(40); c < len(f.body); c += 1 + r.IntN(40) {
					cuts = append(cuts, c)
				}
				times := randomTimes(r, len(cuts)+1)
				s := run(f, f.ct, cuts, times, times[len(times)-1], Options{MaxTimeline: 1 << 20})
				if s.Events != len(cuts)+1 || s.ContentEvents != s.Events || s.Bytes != int64(len(f.body)) {
					t.Fatalf("%s: %d events (%d content) for %d reads", f.name, s.Events, s.ContentEvents, len(cuts)+1)
				}
				for k, st := range s.Timeline {
					if st.At != times[k] || st.Read != uint32(k) {
						t.Fatalf("%s: stamp %d = %+v, want read %d at %v", f.name, k, st, k, times[k])
					}
				}
			}
			continue
		}
		t.Run(f.name, func(t *testing.T) {
			evs := discover(t, f)
			n := len(f.body)
			for _, ct := range []string{f.ct, ""} { // "" makes the meter sniff the framing
				// Byte by byte.
				cuts := make([]int, n-1)
				for i := range cuts {
					cuts[i] = i + 1
				}
				checkSplit(t, f, ct, evs, cuts, randomTimes(r, n), "byte-by-byte")
				// Every single split point.
				step := 1
				if testing.Short() {
					step = 7
				}
				for c := 1; c < n; c += step {
					checkSplit(t, f, ct, evs, []int{c}, randomTimes(r, 2), fmt.Sprintf("split at %d", c))
				}
				// Random splits.
				for range 200 {
					k := 1 + r.IntN(n/4)
					set := map[int]bool{}
					for range k {
						set[1+r.IntN(n-1)] = true
					}
					cuts := cuts[:0:0]
					for c := range set {
						cuts = append(cuts, c)
					}
					slices.Sort(cuts)
					checkSplit(t, f, ct, evs, cuts, randomTimes(r, len(cuts)+1), fmt.Sprintf("random cuts %v", cuts))
				}
			}
		})
	}
}

// The sniffed framing (no Content-Type) finds the same events as the
// declared one, for every stream format, and plain text stays text.
func TestSniffMatchesDeclared(t *testing.T) {
	for _, f := range loadFixtures(t) {
		cuts := textCuts(len(f.body))
		times := make([]Duration, len(cuts)+1)
		for k := range times {
			times[k] = refTime(k)
		}
		endAt := times[len(times)-1] + Millisecond
		want := run(f, f.ct, cuts, times, endAt, Options{})
		got := run(f, "", cuts, times, endAt, Options{})
		if got.Format != want.Format || got.Events != want.Events || got.ContentEvents != want.ContentEvents || got.TTFT != want.TTFT {
			t.Errorf("%s sniffed: %v %d/%d ttft %v, declared: %v %d/%d ttft %v", f.name,
				got.Format, got.ContentEvents, got.Events, got.TTFT, want.Format, want.ContentEvents, want.Events, want.TTFT)
		}
	}
}
