package meter

import (
	"math"
	"strings"
	"testing"
)

const msec = Millisecond

// sseData returns one SSE event per payload.
func sseData(payloads ...string) []byte {
	var b strings.Builder
	for _, p := range payloads {
		b.WriteString("data: " + p + "\n\n")
	}
	return []byte(b.String())
}

// feedReads feeds a generic SSE stream where each read carries the given
// number of content events ("x") at the given time (ms).
type read struct {
	atMs   float64
	events int
}

func genericStream(t *testing.T, opts Options, reads ...read) *Meter {
	t.Helper()
	opts.ContentType = "text/event-stream"
	m := New(opts)
	for _, r := range reads {
		ps := make([]string, r.events)
		for i := range ps {
			ps[i] = "x"
		}
		m.Feed(sseData(ps...), dur(r.atMs))
	}
	return m
}

func dur(ms float64) Duration { return Duration(math.Round(ms * float64(Millisecond))) }

func chatChunk(delta string) string {
	return `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":` + delta + `,"finish_reason":null}]}`
}

func TestTTFTExcludesRoleOnlyAndEmptyDeltas(t *testing.T) {
	m := New(Options{ContentType: "text/event-stream"})
	m.Feed(sseData(chatChunk(`{"role":"assistant","content":""}`)), 100*msec)
	m.Feed(sseData(chatChunk(`{"content":""}`)), 150*msec)
	m.Feed(sseData(chatChunk(`{}`)), 170*msec)
	m.Feed(sseData(chatChunk(`{"content":"Hi"}`)), 300*msec)
	m.Feed(sseData(`[DONE]`), 310*msec)
	m.End(320*msec, StatusComplete, 200)
	s := m.Summary()
	if got, want := s.Format, FormatOpenAIChat; got != want {
		t.Fatalf("Format = %v, want %v", got, want)
	}
	if got, want := s.TTFB, 100*msec; got != want {
		t.Errorf("TTFB = %v, want %v", got, want)
	}
	if got, want := s.TTFC, 100*msec; got != want {
		t.Errorf("TTFC = %v, want %v", got, want)
	}
	if got, want := s.TTFT, 300*msec; got != want {
		t.Errorf("TTFT = %v, want %v", got, want)
	}
	if got, want := s.Events, 5; got != want {
		t.Errorf("Events = %d, want %d", got, want)
	}
	if got, want := s.ContentEvents, 1; got != want {
		t.Errorf("ContentEvents = %d, want %d", got, want)
	}
}

func TestNothingHappened(t *testing.T) {
	m := New(Options{ContentType: "text/event-stream"})
	s := m.Summary()
	if s.TTFB != -1 || s.TTFC != -1 || s.TTFT != -1 || s.Duration != -1 || s.Status != StatusOpen {
		t.Fatalf("fresh summary = %+v, want -1 times and StatusOpen", s)
	}
	m.Feed([]byte(": comment only\n\n"), 50*msec)
	m.End(60*msec, StatusComplete, 200)
	s = m.Summary()
	if s.TTFB != 50*msec || s.TTFC != -1 || s.TTFT != -1 || s.Duration != 60*msec {
		t.Fatalf("comment-only summary: TTFB %v TTFC %v TTFT %v Duration %v", s.TTFB, s.TTFC, s.TTFT, s.Duration)
	}
	if s.TTFTCause != CauseNone || s.Smooth || s.Jank != 0 {
		t.Fatalf("comment-only: TTFTCause %v Smooth %v Jank %v", s.TTFTCause, s.Smooth, s.Jank)
	}
}

func TestTPOTExcludesTTFT(t *testing.T) {
	// TTFT 1000 ms, then content at 1100 and 1300: TPOT = 300/2 = 150 ms.
	m := genericStream(t, Options{}, read{1000, 1}, read{1100, 1}, read{1300, 1})
	s := m.Summary()
	if got, want := s.TPOT, 150*msec; got != want {
		t.Errorf("TPOT = %v, want %v", got, want)
	}
	if got, want := s.TokensPerSec, 2/0.3; math.Abs(got-want) > 1e-9 {
		t.Errorf("TokensPerSec = %v, want %v", got, want)
	}
	if got, want := s.TPOTToken, Duration(0); got != want {
		t.Errorf("TPOTToken = %v, want %v (tokens unknown)", got, want)
	}
}

func TestTokensPerSecWithUsage(t *testing.T) {
	// 4 content events over 300 ms after the first; usage says 10 tokens:
	// TPOTToken = 300ms/9, tokens/s = 9/0.3 = 30.
	m := New(Options{ContentType: "text/event-stream"})
	for i, at := range []Duration{200 * msec, 300 * msec, 400 * msec, 500 * msec} {
		m.Feed(sseData(chatChunk(`{"content":"t`+string(rune('a'+i))+`"}`)), at)
	}
	m.Feed(sseData(`{"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":10,"total_tokens":13}}`, `[DONE]`), 510*msec)
	m.End(520*msec, StatusComplete, 200)
	s := m.Summary()
	if !s.TokensReported || s.Tokens != 10 {
		t.Fatalf("Tokens = %d reported=%v, want 10 reported", s.Tokens, s.TokensReported)
	}
	if got, want := s.TPOT, 100*msec; got != want {
		t.Errorf("TPOT = %v, want %v", got, want)
	}
	if got, want := s.TPOTToken, 300*msec/9; got != want {
		t.Errorf("TPOTToken = %v, want %v", got, want)
	}
	if got, want := s.TokensPerSec, 30.0; math.Abs(got-want) > 1e-9 {
		t.Errorf("TokensPerSec = %v, want %v", got, want)
	}
	// k = 10/4 = 2.5 tokens per event: each of the 3 gaps becomes round(2.5)=3
	// samples of 100ms/2.5 = 40ms.
	if got, want := s.ITLTokens.Count(), uint64(9); got != want {
		t.Errorf("ITLTokens.Count = %d, want %d", got, want)
	}
	if got, want := s.ITLTokens.Max(), 40000.0; math.Abs(got-want) > 1e-6 {
		t.Errorf("ITLTokens.Max = %v µs, want %v", got, want)
	}
}

func TestTokensPerEventOption(t *testing.T) {
	m := genericStream(t, Options{TokensPerEvent: 3}, read{100, 1}, read{130, 1}, read{190, 1})
	s := m.Summary()
	if got, want := s.Tokens, 9; got != want {
		t.Errorf("Tokens = %d, want %d", got, want)
	}
	if s.TokensReported {
		t.Errorf("TokensReported = true, want false")
	}
	if got, want := s.ITLTokens.Count(), uint64(6); got != want {
		t.Errorf("ITLTokens.Count = %d, want %d", got, want)
	}
	if got, want := s.ITLTokens.Sum(), 90000.0; math.Abs(got-want) > 1e-6 {
		t.Errorf("ITLTokens.Sum = %v µs, want %v", got, want)
	}
	if got, want := s.ITL.Count(), uint64(2); got != want {
		t.Errorf("ITL.Count = %d, want %d", got, want)
	}
	// (190-100) ms over 9-1 tokens.
	if got, want := s.TPOTToken, 90*msec/8; got != want {
		t.Errorf("TPOTToken = %v, want %v", got, want)
	}
	// Without usage or the option, ITLTokens is empty.
	s = genericStream(t, Options{}, read{100, 1}, read{130, 1}).Summary()
	if got := s.ITLTokens.Count(); got != 0 {
		t.Errorf("ITLTokens.Count = %d without token knowledge, want 0", got)
	}
}

func TestJank(t *testing.T) {
	tests := []struct {
		name string
		gaps []float64 // ms between consecutive content events (one event per read)
		want float64
	}{
		// Below 100 gaps: max/median.
		{"steady", []float64{20, 20, 20, 20}, 1},
		{"one slow gap", []float64{20, 20, 20, 80}, 4},
		// Median under 1 ms is floored at 1 ms (re-chunked stream).
		{"median floored", []float64{0.1, 0.1, 0.1, 10}, 10},
		{"all zero", []float64{0, 0, 0}, 0},
		// 99 gaps still max/median: 98 x 10 ms and one 500 ms.
		{"99 gaps max/median", append(repeat(10, 98), 500), 50},
		// 100 gaps: p99/p50; numpy: h = 99*0.99 = 98.01 -> 10 + 0.01*490 = 14.9.
		{"100 gaps p99/p50", append(repeat(10, 99), 500), 1.49},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reads := []read{{100, 1}}
			at := 100.0
			for _, g := range tt.gaps {
				at += g
				reads = append(reads, read{at, 1})
			}
			s := genericStream(t, Options{}, reads...).Summary()
			if math.Abs(s.Jank-tt.want) > 1e-6 {
				t.Fatalf("Jank = %v, want %v", s.Jank, tt.want)
			}
		})
	}
}

func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestSmooth(t *testing.T) {
	tests := []struct {
		name  string
		gapMs float64
		n     int
		want  bool
	}{
		{"fast steady", 20, 30, true},    // 50 tokens/s, jank 1
		{"slow steady", 200, 30, false},  // 5 tokens/s
		{"just over 7/s", 140, 30, true}, // 7.14 tokens/s
		{"single event", 0, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var reads []read
			for i := range tt.n {
				reads = append(reads, read{100 + float64(i)*tt.gapMs, 1})
			}
			s := genericStream(t, Options{}, reads...).Summary()
			if s.Smooth != tt.want {
				t.Fatalf("Smooth = %v (jank %v, %v tokens/s), want %v", s.Smooth, s.Jank, s.TokensPerSec, tt.want)
			}
		})
	}
}

func TestGapQuantilesExact(t *testing.T) {
	// Gaps 10, 20, ..., 100 ms: numpy p50 = 55, p95 = 95.5, p99 = 99.1.
	reads := []read{{0, 1}}
	at := 0.0
	for g := 10.0; g <= 100; g += 10 {
		at += g
		reads = append(reads, read{at, 1})
	}
	s := genericStream(t, Options{}, reads...).Summary()
	for _, c := range []struct {
		name      string
		got, want Duration
	}{
		{"p50", s.GapP50, dur(55)}, {"p95", s.GapP95, dur(95.5)}, {"p99", s.GapP99, dur(99.1)}, {"max", s.GapMax, dur(100)},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestStalls(t *testing.T) {
	// Gaps 250 (stall), 100, 600 (stall), 200 (not a stall: > is strict).
	m := genericStream(t, Options{}, read{100, 1}, read{350, 1}, read{450, 1}, read{1050, 1}, read{1250, 1})
	s := m.Summary()
	if got, want := s.Stalls, 2; got != want {
		t.Fatalf("Stalls = %d, want %d", got, want)
	}
	if got, want := s.StalledFor, 850*msec; got != want {
		t.Errorf("StalledFor = %v, want %v", got, want)
	}
	if got, want := s.GapMax, 600*msec; got != want {
		t.Errorf("GapMax = %v, want %v", got, want)
	}
	want := []Stall{
		{Start: 100 * msec, End: 350 * msec, Cause: CauseUnknown, NextReadEvents: 1},
		{Start: 450 * msec, End: 1050 * msec, Cause: CauseUnknown, NextReadEvents: 1},
	}
	if len(s.StallList) != len(want) {
		t.Fatalf("StallList = %+v, want %+v", s.StallList, want)
	}
	for i := range want {
		if s.StallList[i] != want[i] {
			t.Errorf("StallList[%d] = %+v, want %+v", i, s.StallList[i], want[i])
		}
	}
	if got, want := s.StallsByCause[CauseUnknown], 2; got != want {
		t.Errorf("StallsByCause[unknown] = %d, want %d", got, want)
	}
}

func TestStallListKeepsLongest(t *testing.T) {
	// Stalls of 300, 900, 400, 800 ms; MaxStalls 2 keeps 900 and 800 in time order.
	m := genericStream(t, Options{MaxStalls: 2}, read{0, 1}, read{300, 1}, read{1200, 1}, read{1600, 1}, read{2400, 1})
	s := m.Summary()
	if got, want := len(s.StallList), 2; got != want {
		t.Fatalf("len(StallList) = %d, want %d", got, want)
	}
	if s.StallList[0].Start != 300*msec || s.StallList[1].Start != 1600*msec {
		t.Fatalf("StallList = %+v, want the 900 ms and 800 ms stalls in time order", s.StallList)
	}
	if got, want := s.Stalls, 4; got != want {
		t.Errorf("Stalls = %d, want %d (all counted)", got, want)
	}
}

func TestSubFloorShare(t *testing.T) {
	// Timer floor 1 ms; gaps 0, 0.5, 2, 5 ms: half are below the floor.
	m := genericStream(t, Options{TimerFloor: Millisecond}, read{10, 1}, read{10, 1}, read{10.5, 1}, read{12.5, 1}, read{17.5, 1})
	if got, want := m.Summary().SubFloorShare, 0.5; got != want {
		t.Fatalf("SubFloorShare = %v, want %v", got, want)
	}
	// The default floor is 100 µs: a 0.5 ms gap is above it.
	m = genericStream(t, Options{}, read{10, 1}, read{10, 1}, read{10.5, 1})
	if got, want := m.Summary().SubFloorShare, 0.5; got != want {
		t.Fatalf("SubFloorShare (default floor) = %v, want %v", got, want)
	}
}

func TestRechunkingSignals(t *testing.T) {
	m := New(Options{ContentType: "text/event-stream"})
	m.Feed([]byte(": no events in this read\n"), 10*msec)
	m.Feed(sseData("a", "b", "c"), 20*msec)
	m.Feed(sseData("d"), 30*msec)
	m.Feed([]byte("data: e\n"), 40*msec) // completes nothing
	m.Feed([]byte("\n"), 50*msec)
	m.End(60*msec, StatusComplete, 200)
	s := m.Summary()
	if got, want := s.Reads, 5; got != want {
		t.Errorf("Reads = %d, want %d", got, want)
	}
	if got, want := s.EventsPerRead, 5.0/3; math.Abs(got-want) > 1e-12 {
		t.Errorf("EventsPerRead = %v, want %v", got, want)
	}
	if got, want := s.MaxEventsPerRead, 3; got != want {
		t.Errorf("MaxEventsPerRead = %d, want %d", got, want)
	}
	if got, want := s.BytesPerRead, float64(s.Bytes)/5; got != want {
		t.Errorf("BytesPerRead = %v, want %v", got, want)
	}
	// Gaps 0, 0 (a, b, c share a read), 10, 20 ms: numpy median 5 ms.
	if got, want := s.GapP50, 5*msec; got != want {
		t.Errorf("GapP50 = %v, want %v", got, want)
	}
}

func TestAttribution(t *testing.T) {
	type busy struct{ start, end float64 }
	tests := []struct {
		name  string
		reads []read
		busy  []busy
		want  Cause
	}{
		{"no evidence", []read{{100, 1}, {500, 1}}, nil, CauseUnknown},
		{"coalesced next read", []read{{100, 1}, {500, 3}}, nil, CauseNetwork},
		{"busy covers most", []read{{100, 1}, {500, 1}}, []busy{{150, 450}}, CausePage},
		{"busy covers most, coalesced too", []read{{100, 1}, {500, 3}}, []busy{{150, 450}}, CausePage},
		{"busy covers half (two merged intervals)", []read{{100, 1}, {500, 3}}, []busy{{200, 350}, {300, 400}}, CausePage},
		{"small busy, coalesced", []read{{100, 1}, {500, 3}}, []busy{{150, 200}}, CauseNetwork},
		{"small busy, single event", []read{{100, 1}, {500, 1}}, []busy{{150, 200}}, CausePage},
		{"busy outside the gap", []read{{100, 1}, {500, 1}}, []busy{{10, 90}, {510, 600}}, CauseUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := genericStream(t, Options{}, tt.reads...)
			m.End(dur(700), StatusComplete, 200)
			// MarkBusy arrives after the events (and after End), as
			// PerformanceObserver entries do.
			for _, b := range tt.busy {
				m.MarkBusy(dur(b.start), dur(b.end))
			}
			s := m.Summary()
			if len(s.StallList) != 1 {
				t.Fatalf("StallList = %+v, want one stall", s.StallList)
			}
			if got := s.StallList[0].Cause; got != tt.want {
				t.Errorf("cause = %v, want %v", got, tt.want)
			}
			if got := s.StallsByCause[tt.want]; got != 1 {
				t.Errorf("StallsByCause[%v] = %d, want 1", tt.want, got)
			}
			if got, want := s.StalledByCause[tt.want], dur(400); got != want {
				t.Errorf("StalledByCause[%v] = %v, want %v", tt.want, got, want)
			}
			if got, want := s.StallList[0].NextReadEvents, uint32(tt.reads[1].events); got != want {
				t.Errorf("NextReadEvents = %d, want %d", got, want)
			}
		})
	}
}

func TestTTFTCause(t *testing.T) {
	// A buffering proxy: the whole answer arrives in one read at the end.
	m := genericStream(t, Options{}, read{3000, 40})
	s := m.Summary()
	if got, want := s.TTFTCause, CauseNetwork; got != want {
		t.Errorf("buffered: TTFTCause = %v, want %v", got, want)
	}
	if s.Stalls != 0 || s.GapMax != 0 {
		t.Errorf("buffered: Stalls %d GapMax %v, want none", s.Stalls, s.GapMax)
	}
	// A normal first token, then the page was busy for most of the wait.
	m = genericStream(t, Options{}, read{800, 1}, read{820, 1})
	if got, want := m.Summary().TTFTCause, CauseUnknown; got != want {
		t.Errorf("plain: TTFTCause = %v, want %v", got, want)
	}
	m.MarkBusy(100*msec, 700*msec)
	if got, want := m.Summary().TTFTCause, CausePage; got != want {
		t.Errorf("busy: TTFTCause = %v, want %v", got, want)
	}
	// The read with the first content is still the current one when the
	// summary is taken: its count must be seen too.
	m = New(Options{ContentType: "text/event-stream"})
	m.Feed(sseData("a", "b"), 900*msec)
	if got, want := m.Summary().TTFTCause, CauseNetwork; got != want {
		t.Errorf("current read: TTFTCause = %v, want %v", got, want)
	}
}

func TestEndStatus(t *testing.T) {
	tests := []struct {
		st   Status
		http int
		want Status
	}{
		{StatusComplete, 200, StatusComplete},
		{StatusComplete, 503, StatusHTTPError},
		{StatusOpen, 200, StatusComplete},
		{StatusHTTPError, 429, StatusHTTPError},
		{StatusAborted, 200, StatusAborted},
		{StatusNetworkError, 500, StatusNetworkError},
	}
	for _, tt := range tests {
		m := New(Options{ContentType: "text/event-stream"})
		m.Feed(sseData("a"), 10*msec)
		m.End(20*msec, tt.st, tt.http)
		m.End(30*msec, StatusAborted, 0) // ignored
		m.Feed(sseData("b"), 40*msec)    // ignored
		s := m.Summary()
		if s.Status != tt.want || s.HTTPStatus != tt.http || s.Duration != 20*msec || s.Events != 1 {
			t.Errorf("End(%v, %d): status %v http %d duration %v events %d, want %v %d 20ms 1",
				tt.st, tt.http, s.Status, s.HTTPStatus, s.Duration, s.Events, tt.want, tt.http)
		}
	}
}

func TestTimelineSampling(t *testing.T) {
	// 21 events one per read 10 ms apart, a stall before event 12.
	var reads []read
	at := 0.0
	for i := range 21 {
		if i == 12 {
			at += 500
		} else {
			at += 10
		}
		reads = append(reads, read{at, 1})
	}
	s := genericStream(t, Options{MaxTimeline: 3}, reads...).Summary()
	// Kept: events 0..2, then 8..11 before the stall, 12, and 13..16 after.
	var idx []int
	for _, st := range s.Timeline {
		for i, r := range reads {
			if dur(r.atMs) == st.At {
				idx = append(idx, i)
			}
		}
	}
	want := []int{0, 1, 2, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	if len(idx) != len(want) {
		t.Fatalf("timeline events %v, want %v", idx, want)
	}
	for i := range want {
		if idx[i] != want[i] {
			t.Fatalf("timeline events %v, want %v", idx, want)
		}
	}
	if got, want := s.TimelineDropped, 21-12; got != want {
		t.Errorf("TimelineDropped = %d, want %d", got, want)
	}
	if s.Timeline[7].Read != 12 || !s.Timeline[7].Content {
		t.Errorf("stamp of the stall's event = %+v, want read 12, content", s.Timeline[7])
	}
}

func TestTimelineBounded(t *testing.T) {
	// Every gap a stall: the timeline stops at MaxTimeline + MaxStalls*9.
	var reads []read
	for i := range 500 {
		reads = append(reads, read{float64(i) * 300, 1})
	}
	s := genericStream(t, Options{MaxTimeline: 10, MaxStalls: 4}, reads...).Summary()
	if got, want := len(s.Timeline), 10+4*(2*Neighbourhood+1); got != want {
		t.Fatalf("len(Timeline) = %d, want %d", got, want)
	}
	if got, want := s.TimelineDropped, 500-len(s.Timeline); got != want {
		t.Fatalf("TimelineDropped = %d, want %d", got, want)
	}
}

func TestManyGapsFallBackToHistogram(t *testing.T) {
	if testing.Short() {
		t.Skip("feeds 70k events")
	}
	m := New(Options{ContentType: "text/plain"})
	n := MaxExactGaps + 5000
	for i := range n + 1 {
		// Alternating 10 ms and 30 ms gaps.
		at := Duration(i/2)*40*msec + Duration(i%2)*10*msec
		m.Feed([]byte("x"), at)
	}
	s := m.Summary()
	if got, want := s.ITL.Count(), uint64(n); got != want {
		t.Fatalf("ITL.Count = %d, want %d", got, want)
	}
	// p95 and p99 are 30 ms; p50 is between (numpy: 20 ms on an even split,
	// the histogram answers with one of the two modes).
	for _, q := range []struct {
		name string
		got  Duration
	}{{"p95", s.GapP95}, {"p99", s.GapP99}} {
		if rel := math.Abs(float64(q.got-30*msec)) / float64(30*msec); rel > 0.0219 {
			t.Errorf("%s = %v, want 30ms within 2.19%%", q.name, q.got)
		}
	}
	if got, want := s.GapMax, 30*msec; got != want {
		t.Errorf("GapMax = %v, want %v (exact)", got, want)
	}
	if got, want := s.TPOT, (Duration(n/2)*40*msec)/Duration(n); got != want {
		t.Errorf("TPOT = %v, want %v", got, want)
	}
	// With tokens known, the gaps beyond the cap still reach ITLTokens.
	m.Reset(Options{ContentType: "text/plain", TokensPerEvent: 2})
	for i := range n + 1 {
		m.Feed([]byte("x"), Duration(i)*10*msec)
	}
	s = m.Summary()
	if got, want := s.ITLTokens.Count(), uint64(2*n); got != want {
		t.Errorf("ITLTokens.Count = %d, want %d", got, want)
	}
}

func TestArrivalTimesNeverGoBack(t *testing.T) {
	m := genericStream(t, Options{}, read{100, 1}, read{90, 1}, read{150, 1})
	s := m.Summary()
	if s.GapMax != 50*msec || s.GapP50 < 0 {
		t.Fatalf("GapMax %v P50 %v: an earlier arrival must count as the previous one", s.GapMax, s.GapP50)
	}
}
