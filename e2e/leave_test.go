package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/itlmon/itlmon/e2e/browsers"
	"github.com/itlmon/itlmon/e2e/nginx"
)

// leaveTokens is the answer's length in the leave matrix (TestLeaveAfterLastRead).
const leaveTokens = 20

// leaveAnswer is the matrix's answer: a role chunk, leaveTokens content
// chunks 2 ms apart (each flushed: without the proxy they would be reads of
// their own), and [DONE].
func leaveAnswer(w http.ResponseWriter, r *http.Request) {
	pacedAnswer(w, r, leaveChunks(), 2*time.Millisecond)
}

func leaveChunks() []string { return chatChunks(leaveTokens, "word") }

// chatChunks are an OpenAI Chat answer of n content chunks (prefix0,
// prefix1, ...): a role chunk first, [DONE] last.
func chatChunks(n int, prefix string) []string {
	out := []string{"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n"}
	for i := range n {
		out = append(out, fmt.Sprintf("data: {\"choices\":[{\"delta\":{\"content\":\"%s%d \"}}]}\n\n", prefix, i))
	}
	return append(out, "data: [DONE]\n\n")
}

// pacedAnswer writes chunks as an SSE answer, each flushed, every apart
// from the first content chunk on; it stops when the request ends.
func pacedAnswer(w http.ResponseWriter, r *http.Request, chunks []string, every time.Duration) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	for i, chunk := range chunks {
		if i > 1 {
			select {
			case <-time.After(every):
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, chunk)
		rc.Flush()
	}
}

// leaveDelays are the matrix's times from the answer's last read to the
// page leaving, ms.
var leaveDelays = []int{0, 5, 20, 100}

// leaveJS runs the matrix's cases (an array of {init, model, delay}) in
// iframes of the top page: it loads the test page in one iframe per case
// (itlmon in its Worker, or on the main thread), all at once, and waits for
// their modules, then runs the cases one after the other. Each, in its
// iframe's own realm, fetches the answer through the buffering proxy, reads
// it to its end and removes its own iframe delay ms after that last read: at
// once in the read's own task for 0, else from the iframe's setTimeout.
// Removing an iframe unloads its document there and then (pagehide,
// synchronously), so the time from the last read to pagehide is the delay
// itself, not a navigation's network round trip. A case resolves from the
// page's pagehide listener (it runs after itlmon's) with what the page saw:
// the module's mode, the body's bytes and reads, the time from the last read
// to pagehide, how long itlmon's pagehide took and how many streams it
// measured again on the page (itlmon.timing).
const leaveJS = `async (cases) => {
  const load = async (c) => {
    const f = document.createElement('iframe');
    f.src = '/?init=' + encodeURIComponent(JSON.stringify(c.init));
    const loaded = new Promise(r => { f.onload = r; });
    document.body.appendChild(f);
    await loaded;
    const w = f.contentWindow;
    while (!w.itlmon && w.e2e.loaded !== 'error') await new Promise(r => setTimeout(r, 5));
    if (!w.itlmon || !(await w.itlmon.ready)) throw new Error(c.model + ': itlmon not ready: ' + (w.itlmon && w.itlmon.timing.error));
    return w;
  };
  // All at once: a module loads once its page has loaded and the browser is
  // idle, or 1 s after load where there is no requestIdleCallback (WebKit),
  // and those waits overlap; the Worker starts that follow (each bounded,
  // 10 s) are 8 small ones.
  const frames = await Promise.all(cases.map(load));
  const results = [];
  for (let i = 0; i < cases.length; i++) {
    const w = frames[i], c = cases[i], mode = w.itlmon.timing.mode;
    const out = await new Promise((resolve, reject) => w.eval('(' + (async (model, delay, resolve) => {
      const out = { bytes: 0, reads: 0, lastRead: 0, pagehide: -1, itlmonMs: -1, replayed: 0 };
      addEventListener('pagehide', () => {
        const t = itlmon.timing;
        out.itlmonMs = t.pagehideMs;
        out.replayed = t.replayed;
        out.pagehide = performance.now() - t.pagehideMs - out.lastRead;
        resolve(out);
      });
      const resp = await fetch('/v1/leave', { method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ model: model, stream: true }) });
      const rd = resp.body.getReader();
      for (;;) {
        const x = await rd.read();
        out.lastRead = performance.now();
        if (x.done) break;
        out.bytes += x.value.byteLength;
        out.reads++;
      }
      const leave = () => { frameElement.remove(); };
      if (delay === 0) leave(); else setTimeout(leave, delay);
    }) + ')')(c.model, c.delay, resolve).catch(reject));
    results.push(Object.assign(out, { mode }));
  }
  return results;
}`

// leaveResult is what one case of the matrix saw in the page.
type leaveResult struct {
	Mode       string  `json:"mode"`
	Bytes      int     `json:"bytes"`
	Reads      int     `json:"reads"`
	PagehideMs float64 `json:"pagehide"` // from the last read to pagehide
	ItlmonMs   float64 `json:"itlmonMs"` // itlmon's pagehide listener
	Replayed   int     `json:"replayed"` // streams it measured again on the page
}

// TestLeaveAfterLastRead: behind a buffering proxy (nginx, proxy_buffering
// on, gzip on text/event-stream) the whole answer arrives in one read at
// its end, and the reader may leave right after it. Whatever the module
// holds then leaves with the pagehide beacon: the answer, read to its end,
// is stored as complete with every content event and byte, whether the page
// leaves 0, 5, 20 or 100 ms after that read, with the module in its Worker
// or on the main thread, in every engine. One browser per engine, one
// collector and proxy for all; each case is an iframe of one top page, which
// removes itself a known time after its last read (the page's own timer:
// the test waits for nothing but the pages and the rows).
func TestLeaveAfterLastRead(t *testing.T) {
	nginx.RequireReal(t)
	Browser(t)
	o := StartOrigin(t)
	o.Handle("/v1/leave", http.HandlerFunc(leaveAnswer))
	px := nginx.Start(t, nginx.Options{Upstream: o.URL, Buffering: true, Gzip: true})
	front := px.URL()
	c := StartCollector(t, "e2e="+front)
	o.SetCollector(c.URL, "e2e")
	wantBytes := len(strings.Join(leaveChunks(), ""))
	forEachEngine(t, func(t *testing.T, e browsers.Engine) {
		p := NewPage(t, e)
		NavigateIn(t, p, front+"/?nomodule=1")
		type leaveCase struct {
			Init  map[string]any `json:"init"`
			Model string         `json:"model"`
			Delay int            `json:"delay"`
			mode  string
			got   leaveResult
		}
		var cases []leaveCase
		for _, mode := range []string{"worker", "main"} {
			init := map[string]any{}
			if mode == "main" {
				init["worker"] = false
			}
			for _, d := range leaveDelays {
				cases = append(cases, leaveCase{Init: init, Model: "leave-" + e.Name() + "-" + mode + "-" + strconv.Itoa(d), Delay: d, mode: mode})
			}
		}
		arg, _ := json.Marshal(cases)
		got := evalFor[[]leaveResult](t, p, 2*time.Minute, `(`+leaveJS+`)(`+string(arg)+`)`)
		if len(got) != len(cases) {
			t.Fatalf("%d results for %d cases", len(got), len(cases))
		}
		for i := range cases {
			k := &cases[i]
			k.got = got[i]
			if k.got.Mode != k.mode || k.got.Bytes != wantBytes {
				t.Fatalf("%s: the page ran the module in mode %q and read %d bytes; want %q and %d", k.Model, k.got.Mode, k.got.Bytes, k.mode, wantBytes)
			}
			t.Logf("%s: %d bytes in %d reads, pagehide %.1f ms after the last read; itlmon's pagehide took %.1f ms, %d streams measured again",
				k.Model, k.got.Bytes, k.got.Reads, k.got.PagehideMs, k.got.ItlmonMs, k.got.Replayed)
		}
		// The rows: each case's stream once, found by its model.
		byModel := map[string]StoredStream{}
		for deadline := time.Now().Add(45 * time.Second); ; {
			rows, err := c.Streams(t, "e2e")
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				if strings.HasPrefix(r.Model, "leave-"+e.Name()+"-") {
					byModel[r.Model] = r
				}
			}
			if len(byModel) == len(cases) || time.Now().After(deadline) {
				break
			}
			<-time.After(100 * time.Millisecond)
		}
		for _, k := range cases {
			r, ok := byModel[k.Model]
			switch {
			case !ok:
				t.Errorf("%s: not stored (pagehide %.1f ms after the last read)", k.Model, k.got.PagehideMs)
			case r.Status != statusComplete || r.End != "body_end" || r.ContentEvents != leaveTokens || r.Bytes != uint64(wantBytes):
				t.Errorf("%s: stored %s/%s with %d content events and %d bytes; want %s/body_end with %d and %d (pagehide %.1f ms after the last read)",
					k.Model, r.Status, r.End, r.ContentEvents, r.Bytes, statusComplete, leaveTokens, wantBytes, k.got.PagehideMs)
			}
		}
	})
}

// replayChunks is the answer of TestLeaveReplaysInterleaved: a role chunk,
// replayTokens content chunks 10 ms apart (each flushed: a read of its
// own, so a stream's reads span several of the page's batches to the
// Worker, which are posted every 250 ms) and [DONE].
const replayTokens = 30

func replayAnswer(w http.ResponseWriter, r *http.Request) {
	pacedAnswer(w, r, replayChunks(), 10*time.Millisecond)
}

func replayChunks() []string { return chatChunks(replayTokens, "w") }

// TestLeaveReplaysInterleaved: the page keeps a copy of what it posts to
// the module's Worker until the Worker's mirror shows the stream ended;
// a page left before that measures the copy again on the main thread
// (itlmon.timing.replayed). Two streams read at once, their reads
// interleaved in the same batches and spread over several, and the page
// left in the task of the last read: the Worker's answer to the stream
// that ended last cannot have arrived, so at least that one is measured
// again (the other too when it ended a moment before; otherwise the
// Worker's mirror already had it whole), nothing fails, and both are
// stored complete with every content event, read and byte, as the page
// read them. Which copy is stored is not seen here: the Worker, which has
// every batch, may send its own record of a stream as it goes, and the
// collector keeps one per id. The page's copies are in arrays of 8 KB here
// (testKeepBytes 64 KB), so a stream's batches are in several.
func TestLeaveReplaysInterleaved(t *testing.T) {
	t.Parallel()
	Browser(t)
	o := StartOrigin(t)
	o.Handle("/v1/replay", http.HandlerFunc(replayAnswer))
	c, site := SharedCollector(t)
	o.SetCollector(c.URL, site)
	p := NewPage(t, BrowserEngine(t, "chromium"))
	NavigateIn(t, p, o.URL+"/?nomodule=1")
	type result struct {
		Mode     string     `json:"mode"`
		Replayed int        `json:"replayed"`
		Streams  []pageRead `json:"streams"`
	}
	got := evalFor[result](t, p, time.Minute, inFrameJS(`{"testHooks":true,"testKeepBytes":65536}`, `
    const out = { mode: itlmon.timing.mode, replayed: -1, streams: [] };
    addEventListener('pagehide', () => { out.replayed = itlmon.timing.replayed; resolve(out); });
    out.streams = await Promise.all([readStream('/v1/replay', 'replay-a'), readStream('/v1/replay', 'replay-b')]);
    frameElement.remove(); // pagehide, here and now`))
	if got.Mode != "worker" || len(got.Streams) != 2 {
		t.Fatalf("the page ran the module in mode %q and read %d streams; want the Worker and 2", got.Mode, len(got.Streams))
	}
	if got.Replayed < 1 || got.Replayed > 2 {
		t.Errorf("itlmon.timing.replayed = %d, want 1 or 2: the stream that ended last measured again on the page", got.Replayed)
	}
	t.Logf("%d of the 2 streams measured again on the page", got.Replayed)
	// The reads are the network's: several here (a read per chunk, 10 ms
	// apart), fewer on a starved machine; the stored row has as many.
	wantBytes := len(strings.Join(replayChunks(), ""))
	checkStoredReads(t, c, site, got.Streams, map[string]int{"replay-a": wantBytes, "replay-b": wantBytes}, replayTokens)
}

// pageRead is a stream as a test page read it (readStream).
type pageRead struct {
	Model string `json:"model"`
	Bytes int    `json:"bytes"`
	Reads int    `json:"reads"`
}

// readStreamJS defines readStream(path, model, each) in a page's script: it
// POSTs a streamed chat request for model to path and reads the answer to its
// end through the page's fetch, calling each (if given) after every read, and
// resolves to the page's read ({model, bytes, reads}).
const readStreamJS = `const readStream = async (path, model, each) => {
  const resp = await fetch(path, { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: model, stream: true }) });
  const rd = resp.body.getReader(), s = { model: model, bytes: 0, reads: 0 };
  for (;;) {
    const x = await rd.read();
    if (each) each();
    if (x.done) return s;
    s.bytes += x.value.byteLength;
    s.reads++;
  }
};
`

// inFrameJS is a script for the top test page: it loads the test page with
// itlmon.init(init) (JSON) in an iframe, waits for its module, and runs body
// in the iframe's own realm, as the body of an async function of resolve
// with readStream defined. The script returns what the function returns, or
// what it passes to resolve when it returns nothing (a page that leaves).
func inFrameJS(init, body string) string {
	fn := "(async (resolve) => {\n" + readStreamJS + body + "\n})"
	return `(async () => {
  const f = document.createElement('iframe');
  f.src = '/?init=' + encodeURIComponent(` + strconv.Quote(init) + `);
  const loaded = new Promise(r => { f.onload = r; });
  document.body.appendChild(f);
  await loaded;
  const w = f.contentWindow;
  while (!w.itlmon && w.e2e.loaded !== 'error') await new Promise(r => setTimeout(r, 5));
  if (!w.itlmon || !(await w.itlmon.ready)) throw new Error('itlmon not ready: ' + (w.itlmon && w.itlmon.timing.error));
  return await new Promise((resolve, reject) => w.eval(` + strconv.Quote(fn) + `)(resolve).then(v => { if (v !== undefined) resolve(v); }, reject));
})()`
}

// checkStoredReads waits for the streams the page read to be stored on site
// and fails t unless the page read of each the bytes want gives for its
// model, and each is stored complete, ended at its body's end, with those
// bytes in the page's reads and, when events is not 0, that many content
// events.
func checkStoredReads(t *testing.T, c *Collector, site string, reads []pageRead, want map[string]int, events int) {
	t.Helper()
	for _, s := range reads {
		if s.Bytes != want[s.Model] {
			t.Fatalf("%s: the page read %d bytes in %d reads; want %d", s.Model, s.Bytes, s.Reads, want[s.Model])
		}
		t.Logf("%s: %d bytes in %d reads", s.Model, s.Bytes, s.Reads)
	}
	rows := WaitStreams(t, c, site, len(reads))
	for _, s := range reads {
		var r *StoredStream
		for i := range rows {
			if rows[i].Model == s.Model {
				r = &rows[i]
			}
		}
		switch {
		case r == nil:
			t.Errorf("%s: not stored", s.Model)
		case r.Status != statusComplete || r.End != "body_end" || r.Bytes != uint64(s.Bytes) || int(r.Reads) != s.Reads ||
			events != 0 && int(r.ContentEvents) != events:
			t.Errorf("%s: stored %s/%s with %d content events, %d bytes in %d reads; want %s/body_end with %d bytes in the page's %d reads (and %d content events, 0: any)",
				s.Model, r.Status, r.End, r.ContentEvents, r.Bytes, r.Reads, statusComplete, s.Bytes, s.Reads, events)
		}
	}
}

// keptBound is the bound TestKeptCopyBounded sets on what the page keeps
// for a pagehide replay (testKeepBytes; its arrays are an eighth of it).
const keptBound = 32 << 10

// keptLongChunks is a long answer of TestKeptCopyBounded: 70 content
// chunks of ~1 KB, ~73 KB in all, past keptBound on its own.
func keptLongChunks() []string { return chatChunks(70, strings.Repeat("x", 1000)) }

// keptLongAnswer sends keptLongChunks in parts, each part's chunks 8 ms apart
// (paced) or at once, after waiting the part's wait, so that the page's
// batches of the test's streams have the sizes its comment says.
func keptLongAnswer(parts []int, waits []time.Duration, paced []bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		chunks, from := keptLongChunks(), 0
		for i, to := range parts {
			select {
			case <-time.After(waits[i]):
			case <-r.Context().Done():
				return
			}
			every := time.Duration(0)
			if paced[i] {
				every = 8 * time.Millisecond
			}
			pacedAnswer(w, r, chunks[from:to], every)
			from = to
		}
	}
}

// keptShortChunks is the short answer of TestKeptCopyBounded: 80 content
// chunks of ~50 bytes, 20 ms apart.
func keptShortChunks() []string { return chatChunks(80, "w") }

// TestKeptCopyBounded: with the module in a Worker, the page keeps a copy of
// the batches it posts until the Worker's mirror shows their streams ended,
// copied into arrays it reuses, within a bound, 32 KB here (testKeepBytes).
// Three streams read at once, their reads in the same batches: a short one
// (~4 KB over 1.6 s) and two long ones of ~73 KB (keptLongAnswer). The
// first long one sends ~43 KB at once at its start: the page's first batch
// is past the bound on its own, and only the other streams' reads of it are
// kept. The second sends ~29 KB over its first 230 ms (in the first batch,
// posted 250 ms after the page's first read, with the short one's reads),
// then ~43 KB at once 400 ms later: past the bound, it loses its copy and
// the reads it had in the first batch go too. Both long ones stay open
// while the short one goes on. At every read the page looks at what it
// keeps (itlmon._kept): the memory never passes the bound; both long
// streams lose their copies (they could no longer be measured again at
// pagehide) and the short one never does, its reads still kept after the
// long ones' went from the batches they shared; once the mirror shows the
// three ended nothing is kept. All are stored complete: the Worker's
// records.
func TestKeptCopyBounded(t *testing.T) {
	t.Parallel()
	Browser(t)
	o := StartOrigin(t)
	o.Handle("/v1/kept-burst", keptLongAnswer([]int{42, 72}, []time.Duration{0, 2400 * time.Millisecond}, []bool{false, false}))
	o.Handle("/v1/kept-long", keptLongAnswer([]int{29, 70, 72}, []time.Duration{0, 400 * time.Millisecond, 2 * time.Second}, []bool{true, false, false}))
	o.Handle("/v1/kept-short", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pacedAnswer(w, r, keptShortChunks(), 20*time.Millisecond)
	}))
	c, site := SharedCollector(t)
	o.SetCollector(c.URL, site)
	p := NewPage(t, BrowserEngine(t, "chromium"))
	NavigateIn(t, p, o.URL+"/?nomodule=1")
	type keptStream struct {
		Pid   int  `json:"pid"`
		Bytes int  `json:"bytes"`
		Lost  bool `json:"lost"`
	}
	type keptState struct {
		Streams   []keptStream `json:"streams"`
		Batches   int          `json:"batches"`
		Slabs     int          `json:"slabs"`
		SlabBytes int          `json:"slabBytes"`
		Spare     bool         `json:"spare"`
	}
	type result struct {
		Mode    string      `json:"mode"`
		Streams []pageRead  `json:"streams"`
		Seen    []keptState `json:"seen"`  // at each read
		After   keptState   `json:"after"` // once the mirror shows all ended
	}
	init, _ := json.Marshal(map[string]any{"testHooks": true, "testKeepBytes": keptBound})
	got := evalFor[result](t, p, time.Minute, inFrameJS(string(init), `
    const out = { mode: itlmon.timing.mode, streams: [], seen: [], after: null };
    const look = () => out.seen.push(itlmon._kept());
    out.streams = await Promise.all([readStream('/v1/kept-burst', 'kept-burst', look), readStream('/v1/kept-long', 'kept-long', look),
      readStream('/v1/kept-short', 'kept-short', look)]);
    for (;;) {
      const k = itlmon._kept();
      if (!k.streams.length) { out.after = k; return out; }
      await new Promise(r => setTimeout(r, 20));
    }`))
	if got.Mode != "worker" || len(got.Streams) != 3 {
		t.Fatalf("the page ran the module in mode %q and read %d streams; want the Worker and 3", got.Mode, len(got.Streams))
	}
	longBytes, shortBytes := len(strings.Join(keptLongChunks(), "")), len(strings.Join(keptShortChunks(), ""))
	lost := map[int]bool{} // the streams seen without a copy, by page id
	shortKeptAfter := false
	maxMem := 0
	for i, k := range got.Seen {
		maxMem = max(maxMem, k.SlabBytes)
		if k.SlabBytes > keptBound {
			t.Errorf("read %d: the page keeps %d bytes of copies (%d arrays, %d batches); the bound is %d", i, k.SlabBytes, k.Slabs, k.Batches, keptBound)
		}
		for _, s := range k.Streams {
			switch {
			case s.Lost && s.Bytes <= shortBytes:
				t.Errorf("read %d: a stream of %d bytes lost its copy (%+v); only the long ones (%d bytes) should", i, s.Bytes, k, longBytes)
			case s.Lost:
				lost[s.Pid] = true
			case len(lost) > 0 && s.Bytes > 0 && s.Bytes <= shortBytes && k.Batches > 0:
				shortKeptAfter = true
			}
		}
	}
	if len(lost) != 2 {
		t.Errorf("%d streams lost their copies past the bound of %d; want the 2 long ones (%d bytes each)", len(lost), keptBound, longBytes)
	}
	if !shortKeptAfter {
		t.Errorf("the short stream's reads were not kept after a long stream lost its copy")
	}
	if a := got.After; len(a.Streams) != 0 || a.Batches != 0 || a.Slabs != 0 || a.SlabBytes != 0 {
		t.Errorf("once all ended the page still keeps %+v; want nothing", a)
	}
	t.Logf("%d reads looked at; at most %d bytes of copies kept (bound %d); after: %+v", len(got.Seen), maxMem, keptBound, got.After)
	checkStoredReads(t, c, site, got.Streams, map[string]int{"kept-burst": longBytes, "kept-long": longBytes, "kept-short": shortBytes}, 0)
}
