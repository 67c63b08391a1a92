package main

// Run under node: GOOS=js GOARCH=wasm go test -exec "$(go env GOROOT)/lib/wasm/go_js_wasm_exec" ./wasm/browser

import (
	"math"
	"slices"
	"strings"
	"syscall/js"
	"testing"
	"unicode/utf8"

	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

func TestLimit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abc", 2, "ab"},
		{"abc", 0, ""},
		{"aé", 2, "a"},     // é is 2 bytes: not split
		{"aé", 3, "aé"},    // exactly
		{"ab€", 4, "ab"},   // € is 3 bytes
		{"ab€x", 5, "ab€"}, // cut after it
		{"🚀🚀", 7, "🚀"},     // 4-byte runes
		{"🚀", 3, ""},       // none fits
	} {
		got := limit(tc.in, tc.n)
		if got != tc.want || len(got) > tc.n {
			t.Errorf("limit(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// TestJSStrings: what syscall/js hands Go for strings the page may pass:
// Latin-1 header bytes (a ByteString: one char per byte) arrive as UTF-8,
// and a lone surrogate as U+FFFD (wasm_exec.js encodes with TextEncoder),
// so every string from JS is valid UTF-8; only a byte cut could break one.
func TestJSStrings(t *testing.T) {
	fromCodes := func(codes ...any) string {
		return argString([]js.Value{js.Global().Get("String").Call("fromCharCode", codes...)}, 0)
	}
	if got := fromCodes(0x6d, 0xe9, 0xff); got != "méÿ" {
		t.Errorf("Latin-1 string: %q, want %q", got, "méÿ")
	}
	if got := fromCodes(0x61, 0xd800, 0x62); got != "a\uFFFDb" {
		t.Errorf("lone surrogate: %q, want %q", got, "a\uFFFDb")
	}
	if got := fromCodes(0xd83d, 0xde80); got != "🚀" {
		t.Errorf("surrogate pair: %q", got)
	}
}

// testModule is a configured module whose sender never connects (hidden),
// so its records stay where beaconWire finds them.
func testModule(t *testing.T) *module {
	t.Helper()
	app = newModule()
	a := app
	a.configured = true
	a.pageOrigin = "https://chat.example.com"
	a.send = newSender("pk_test", "ws://127.0.0.1:1/v1/ws", "", beacon.Client{ModuleVersion: Version})
	a.send.hidden = true
	t.Cleanup(func() { a.send.close() })
	return a
}

func u8(b []byte) js.Value {
	v := js.Global().Get("Uint8Array").New(len(b))
	js.CopyBytesToJS(v, b)
	return v
}

// startArgs returns start's arguments; headersAt nil passes 10 of them.
func startArgs(id byte, model, contentType, originID string, httpStatus float64, headersAt any) []js.Value {
	sid := make([]byte, 16)
	sid[0] = id
	args := []js.Value{
		js.ValueOf(1000.0), js.ValueOf(1767225600000.0), js.ValueOf("https://api.example.com/v1/chat/completions?key=secret"),
		js.ValueOf("POST"), js.ValueOf(model), js.ValueOf(contentType), js.ValueOf(httpStatus), js.ValueOf(originID),
		u8(sid), js.ValueOf("/c/1"),
	}
	if headersAt != nil {
		args = append(args, js.ValueOf(headersAt))
	}
	return args
}

// feedOne feeds one read of stream id at time at (performance.now() ms).
func feedOne(a *module, id int, at float64, body string) {
	ops := make([]byte, 32)
	for j, f := range [4]float64{float64(id), float64(len(body)), at, 0} {
		u := math.Float64bits(f)
		for k := range 8 {
			ops[8*j+k] = byte(u >> (8 * k))
		}
	}
	a.feed([]js.Value{u8([]byte(body)), u8(ops), js.ValueOf(1)})
}

// endStream ends stream id and returns the summary floats.
func endStream(t *testing.T, a *module, id int, at float64, kind int) []float64 {
	t.Helper()
	out := js.Global().Get("Uint8Array").New(summaryFields * 8)
	if ok := a.end([]js.Value{js.ValueOf(id), js.ValueOf(at), js.ValueOf(kind), js.ValueOf(0), js.ValueOf("h2"), out}); ok != true {
		t.Fatalf("end(%d) = %v", id, ok)
	}
	b := make([]byte, summaryFields*8)
	js.CopyBytesToGo(b, out)
	v := make([]float64, summaryFields)
	for i := range v {
		var u uint64
		for k := range 8 {
			u |= uint64(b[8*i+k]) << (8 * k)
		}
		v[i] = math.Float64frombits(u)
	}
	return v
}

// held decodes what the sender holds (and the open streams, as mirror
// encodes them) as the collector would.
func held(t *testing.T, a *module, open []beacon.Record) *beacon.Batch {
	t.Helper()
	wire := a.send.beaconWire(open)
	if wire == nil {
		t.Fatal("nothing to send")
	}
	b, err := beacon.DecodeBatch(wire, beacon.Limits{})
	if err != nil {
		t.Fatalf("the collector would refuse the batch: %v", err)
	}
	return b
}

const chatSSE = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\" there\"}}]}\n\n"

// TestEndKinds: the five kinds, with and without the terminal event, before
// the headers, and the summary's end and headersMs.
func TestEndKinds(t *testing.T) {
	a := testModule(t)
	type want struct {
		st        meter.Status
		end       meter.End
		headersMs float64
	}
	cases := []struct {
		name      string
		body      string
		headersAt any
		kind      int
		want      want
	}{
		{"done, body end", chatSSE + "data: [DONE]\n\n", 1005.5, 1, want{meter.StatusComplete, meter.EndBody, 5.5}},
		{"done, cancelled (SDK)", chatSSE + "data: [DONE]\n\n", 1005.5, 4, want{meter.StatusComplete, meter.EndClosedAfterEnd, 5.5}},
		{"done, aborted", chatSSE + "data: [DONE]\n\n", 1005.5, 2, want{meter.StatusComplete, meter.EndClosedAfterEnd, 5.5}},
		{"done, page gone", chatSSE + "data: [DONE]\n\n", 1005.5, 5, want{meter.StatusComplete, meter.EndClosedAfterEnd, 5.5}},
		{"done, network error", chatSSE + "data: [DONE]\n\n", 1005.5, 3, want{meter.StatusComplete, meter.EndError, 5.5}},
		{"cancelled mid-stream", chatSSE, 1005.5, 4, want{meter.StatusAborted, meter.EndAbort, 5.5}},
		{"aborted mid-stream", chatSSE, 1005.5, 2, want{meter.StatusAborted, meter.EndAbort, 5.5}},
		{"error mid-stream", chatSSE, 1005.5, 3, want{meter.StatusNetworkError, meter.EndError, 5.5}},
		{"aborted before headers", "", -1, 2, want{meter.StatusAborted, meter.EndAbort, -1}},
		{"failed before headers", "", -1, 3, want{meter.StatusNetworkError, meter.EndError, -1}},
		{"page gone before headers", "", -1, 5, want{meter.StatusAborted, meter.EndAbort, -1}},
		// An older itl.js: 10 arguments, kinds 1-3. HeadersUs is the
		// first body byte's time (the bound), never NoTime.
		{"10 args, body end", chatSSE, nil, 1, want{meter.StatusComplete, meter.EndBody, 20}},
		{"10 args, aborted", chatSSE, nil, 2, want{meter.StatusAborted, meter.EndAbort, 20}},
		{"10 args, empty body", "", nil, 1, want{meter.StatusComplete, meter.EndBody, 50}},
	}
	for i, tc := range cases {
		ct, hs := "text/event-stream", 200.0
		if tc.headersAt == -1 {
			ct, hs = "", 0
		}
		id, _ := a.start(startArgs(byte(i), "gpt-4o-mini", ct, "", hs, tc.headersAt)).(int)
		if id < 0 {
			t.Fatalf("%s: start = %d", tc.name, id)
		}
		if tc.body != "" {
			feedOne(a, id, 1020, tc.body)
		}
		v := endStream(t, a, id, 1050, tc.kind)
		got := want{meter.Status(v[0]), meter.End(v[26]), v[27]}
		if got != tc.want {
			t.Errorf("%s: status %v end %v headersMs %v, want %+v", tc.name, got.st, got.end, got.headersMs, tc.want)
		}
		if tc.headersAt == -1 && (v[6] != 50 || v[1] != 0 || v[3] != -1) {
			t.Errorf("%s: duration %v ms, http %v, ttfb %v: want the 50 ms waited, 0, -1", tc.name, v[6], v[1], v[3])
		}
	}
	b := held(t, a, nil)
	if len(b.Records) != len(cases) || b.Dropped != 0 {
		t.Fatalf("%d records (%d dropped), want %d", len(b.Records), b.Dropped, len(cases))
	}
	for i, r := range b.Records {
		tc := cases[i]
		wantHeaders := uint32(tc.want.headersMs * 1000)
		if tc.want.headersMs < 0 {
			wantHeaders = beacon.NoTime
		}
		if r.Status != uint8(tc.want.st) || r.End != uint8(tc.want.end) || r.HeadersUs != wantHeaders {
			t.Errorf("%s: record status %d end %d headers_us %d, want %d %d %d", tc.name, r.Status, r.End, r.HeadersUs, tc.want.st, tc.want.end, wantHeaders)
		}
		if r.URLPath != "/v1/chat/completions" {
			t.Errorf("%s: url_path %q", tc.name, r.URLPath)
		}
	}
}

// TestMirrorOpen: pagehide's view of open streams follows the rule: complete
// (closed after end) once the terminal event arrived, else aborted; a
// request still waiting for its headers is an abort before headers, with the
// time waited up to now.
func TestMirrorOpen(t *testing.T) {
	a := testModule(t)
	done, _ := a.start(startArgs(1, "m", "text/event-stream", "", 200, 1004.0)).(int)
	feedOne(a, done, 1020, chatSSE+"data: [DONE]\n\n")
	mid, _ := a.start(startArgs(2, "m", "text/event-stream", "", 200, 1004.0)).(int)
	feedOne(a, mid, 1030, chatSSE)
	a.start(startArgs(3, "m", "", "", 0, -1))
	a.dirty = true // the export wrapper sets it on every call
	wire := a.mirror([]js.Value{js.ValueOf(1300.0)})
	if v, ok := wire.(js.Value); !ok || v.Type() != js.TypeObject || v.Length() != 2 {
		t.Fatalf("mirror() = %v, want [held, open]", wire)
	}
	if h := wire.(js.Value).Index(0); !h.IsNull() {
		t.Fatalf("mirror()[0] = %v, want null: nothing ended, nothing held", h)
	}
	u := wire.(js.Value).Index(1)
	buf := make([]byte, u.Length())
	js.CopyBytesToGo(buf, u)
	b, err := beacon.DecodeBatch(buf, beacon.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[byte]beacon.Record{}
	for _, r := range b.Records {
		byID[r.StreamID[0]] = r
	}
	for _, tc := range []struct {
		id         byte
		st         meter.Status
		end        meter.End
		headers    uint32
		durationUs uint32
	}{
		{1, meter.StatusComplete, meter.EndClosedAfterEnd, 4000, 20000},
		{2, meter.StatusAborted, meter.EndAbort, 4000, 30000},
		{3, meter.StatusAborted, meter.EndAbort, beacon.NoTime, 300000},
	} {
		r, ok := byID[tc.id]
		if !ok {
			t.Fatalf("stream %d missing from the mirror", tc.id)
		}
		if r.Status != uint8(tc.st) || r.End != uint8(tc.end) || r.HeadersUs != tc.headers || r.DurationUs != tc.durationUs {
			t.Errorf("stream %d: status %d end %d headers %d duration %d, want %d %d %d %d",
				tc.id, r.Status, r.End, r.HeadersUs, r.DurationUs, tc.st, tc.end, tc.headers, tc.durationUs)
		}
	}
}

// TestMultibyteCuts: strings the page passes with multibyte characters where
// the module cuts them (a model name, a Content-Type or X-Request-Id made of
// Latin-1 bytes, a long path) never make a record the collector refuses, and
// never cost another record.
func TestMultibyteCuts(t *testing.T) {
	a := testModule(t)
	latin1 := js.Global().Get("String").Call("fromCharCode", 0x72, 0x65, 0x71, 0xe9).String() // "reqé" as a header gives it
	models := []string{
		strings.Repeat("m", 127) + "é",  // é across byte 128
		strings.Repeat("m", 126) + "€x", // € across byte 128
		strings.Repeat("模", 50),         // 3-byte runes
		strings.Repeat("🚀", 40),         // 4-byte runes
		"gpt-4o-mini",
	}
	for i, model := range models {
		ct := strings.Repeat("t", 63) + latin1
		origin := strings.Repeat("r", 127) + latin1
		if i == len(models)-1 {
			ct, origin = "text/event-stream", "req_1"
		}
		args := startArgs(byte(i), model, ct, origin, 200, 1001.0)
		args[9] = js.ValueOf("/" + strings.Repeat("ü", 300)) // a long path, cut at 512 bytes
		id, _ := a.start(args).(int)
		feedOne(a, id, 1010, chatSSE)
		endStream(t, a, id, 1020, 1)
	}
	b := held(t, a, nil)
	if len(b.Records) != len(models) || b.Dropped != 0 {
		t.Fatalf("%d records, %d dropped; want %d, 0", len(b.Records), b.Dropped, len(models))
	}
	for i, r := range b.Records[:len(models)-1] {
		for _, f := range []struct {
			name, v string
			max     int
		}{{"model", r.Model, 128}, {"content_type", r.ContentType, 64}, {"origin_id", r.OriginID, 128}, {"page_path", r.PagePath, 512}} {
			if !utf8.ValidString(f.v) || len(f.v) > f.max || len(f.v) < f.max-3 {
				t.Errorf("record %d %s: %d bytes %q", i, f.name, len(f.v), f.v)
			}
		}
		if !strings.HasPrefix(models[i], r.Model) {
			t.Errorf("record %d: model %q is not a prefix of %q", i, r.Model, models[i])
		}
	}
	if r := b.Records[len(models)-1]; r.Model != "gpt-4o-mini" || r.ContentType != "text/event-stream" || r.OriginID != "req_1" {
		t.Errorf("short strings changed: %q %q %q", r.Model, r.ContentType, r.OriginID)
	}
}

// TestBadRecordAlone: a record the wire format refuses (built here by hand:
// the module makes none) is left out alone, counted as dropped; the records
// around it are sent, by WebSocket batch and by beacon.
func TestBadRecordAlone(t *testing.T) {
	a := testModule(t)
	for i := range 5 {
		id, _ := a.start(startArgs(byte(i), "m", "text/event-stream", "", 200, 1001.0)).(int)
		feedOne(a, id, 1010, chatSSE)
		endStream(t, a, id, 1020, 1)
	}
	a.send.pending[2].Model = "bad\xff" // as a byte cut would have made it
	a.send.pending[4].Jank = float32(math.NaN())
	b := held(t, a, nil)
	if len(b.Records) != 3 || b.Dropped != 2 {
		t.Fatalf("beacon: %d records, %d dropped; want 3, 2", len(b.Records), b.Dropped)
	}
	for i, want := range []byte{0, 1, 3} {
		if b.Records[i].StreamID[0] != want {
			t.Fatalf("beacon record %d is stream %d, want %d", i, b.Records[i].StreamID[0], want)
		}
	}
	wire, kept, dropped := a.send.encode(7, a.send.pending, 0)
	if wire == nil || len(kept) != 3 || dropped != 2 {
		t.Fatalf("batch: %d records kept, %d dropped; want 3, 2", len(kept), dropped)
	}
	if a.send.pending[2].Model != "bad\xff" || len(a.send.pending) != 5 {
		t.Fatal("encode changed the records it was given")
	}
}

func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		reason string
		want   meter.Duration
		ok     bool
	}{
		{"retry-after=15; collector over its ingest memory budget", 15 * meter.Second, true},
		{"retry-after=3", 3 * meter.Second, true},
		{"rate limit; retry-after=2; site", 2 * meter.Second, true},
		{"retry-after=99999999", maxRetryAfter, true}, // bounded
		{"retry-after=; x", 0, false},
		{"retry-after=x", 0, false},
		{"rate limit: connection is over 100 records/s", 0, false},
		{"", 0, false},
	} {
		got, ok := retryAfter(tc.reason)
		if got != tc.want || ok != tc.ok {
			t.Errorf("retryAfter(%q) = %v %v, want %v %v", tc.reason, got, ok, tc.want, tc.ok)
		}
	}
}

// TestTimerLongWait: a wait longer than setTimeout can take (2^31-1 ms)
// is armed at that bound, not run at once (browsers and Node run such a
// timer immediately: a socketIdleMs of days spun the idle check).
func TestTimerLongWait(t *testing.T) {
	fired := false
	tm := newTimer(func() { fired = true })
	defer tm.release()
	tm.arm(1e10 * meter.Millisecond)
	// A second timer, armed after it for 10 ms: the event loop runs timers
	// in the order they are due, so when this one fires the first has too
	// if it was armed to run at once.
	done := make(chan struct{})
	ref := newTimer(func() { close(done) })
	defer ref.release()
	ref.arm(10 * meter.Millisecond)
	<-done
	if fired {
		t.Fatal("a timer armed for 1e10 ms fired before one armed for 10 ms")
	}
}

// TestConfigureBeaconOnly: the module the page starts at pagehide to replay
// what its Worker had not answered (itl-module.js) opens no socket: its
// records wait for the beacon, and the mirror splits what it holds from the
// streams still open.
func TestConfigureBeaconOnly(t *testing.T) {
	app = newModule()
	a := app
	c := js.Global().Get("Object").New()
	c.Set("site", "pk_test")
	c.Set("wsURL", "ws://127.0.0.1:1/v1/ws")
	c.Set("beaconOnly", true)
	if got := a.configure([]js.Value{c}); got != true {
		t.Fatalf("configure = %v", got)
	}
	t.Cleanup(func() { a.send.close() })
	id, _ := a.start(startArgs(1, "m", "text/event-stream", "", 200, 1004.0)).(int)
	feedOne(a, id, 1020, chatSSE+"data: [DONE]\n\n")
	endStream(t, a, id, 1030, 1)
	open, _ := a.start(startArgs(2, "m", "text/event-stream", "", 200, 1004.0)).(int)
	feedOne(a, open, 1040, chatSSE)
	if s := a.send; s.connects != 0 || !s.ws.IsNull() || len(s.pending) != 1 {
		t.Fatalf("sender: %d connects, socket %v, %d pending; want no socket and the record waiting", s.connects, s.ws, len(s.pending))
	}
	a.dirty = true
	m := a.mirror(nil).(js.Value)
	for i, want := range []byte{1, 2} {
		u := m.Index(i)
		buf := make([]byte, u.Length())
		js.CopyBytesToGo(buf, u)
		b, err := beacon.DecodeBatch(buf, beacon.Limits{})
		if err != nil {
			t.Fatalf("mirror()[%d]: %v", i, err)
		}
		if len(b.Records) != 1 || b.Records[0].StreamID[0] != want {
			t.Fatalf("mirror()[%d] holds %d records, want stream %d alone", i, len(b.Records), want)
		}
	}
}

// TestBusyBeforeStart: a busy interval the module got before a stream
// started (the page busy while the request waited for its headers) counts
// for the stream from its t0 on: the wait for the first token, 1000 ms of
// which 900 ms busy, is the page's. One that ended before t0 does not
// count, and the module keeps only the last recentBusyN.
func TestBusyBeforeStart(t *testing.T) {
	busy := func(a *module, start, end float64) {
		ops := make([]byte, 32)
		for j, f := range [4]float64{-1, 0, start, end} {
			u := math.Float64bits(f)
			for k := range 8 {
				ops[8*j+k] = byte(u >> (8 * k))
			}
		}
		a.feed([]js.Value{u8(nil), u8(ops), js.ValueOf(1)})
	}
	ttftCause := func(t *testing.T, a *module, id byte) meter.Cause {
		t.Helper()
		sid := a.start(startArgs(id, "m", "text/event-stream", "", 200, 1005.0)).(int) // t0 = 1000
		feedOne(a, sid, 2000, chatSSE)
		return meter.Cause(endStream(t, a, sid, 2001, 1)[23])
	}
	for _, tc := range []struct {
		name  string
		spans [][2]float64
		page  bool
	}{
		{"busy while waiting", [][2]float64{{1050, 1950}}, true},
		{"busy before the request", [][2]float64{{900, 999}}, false},
		{"pushed out by later ones", append([][2]float64{{1050, 1950}}, slices.Repeat([][2]float64{{100, 200}}, recentBusyN)...), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := testModule(t)
			for _, s := range tc.spans {
				busy(a, s[0], s[1])
			}
			if got := ttftCause(t, a, 1); (got == meter.CausePage) != tc.page {
				t.Errorf("first-token cause %v, want page: %v", got, tc.page)
			}
		})
	}
}
