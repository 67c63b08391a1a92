package e2e

import (
	"html/template"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/itlmon/itlmon/collector/demo"
	"github.com/itlmon/itlmon/e2e/browsers"
)

// The inline snippet (web/static/itl-snippet.js): fetch wrapped before the
// app's first script, itl.js loaded after the page's load event or at its
// first stream, what happened before it ran handed over, and the page's own
// fetch, byte for byte, when itl.js never comes.

// snippetRawQuery is the stream the snippet tests also read raw through the
// fetch the app kept at import, to compare its bytes with the server's.
const snippetRawQuery = "tokens=30&interval_ms=2&crlf=1&split=1&comments=1"

// snippetApp is the app's module script: an OpenAI client constructed at
// import (it keeps the fetch it sees then: the snippet's), which streams at
// once, before itl.js has run; then a raw read through the fetch the app kept.
const snippetApp = `
	import OpenAI from '/openai/index.mjs';
	const kept = window.fetch;
	e2e.keptWrapped = kept !== itlmon.originalFetch;
	const client = new OpenAI({ apiKey: 'sk-test', baseURL: location.origin + '/held/v1', dangerouslyAllowBrowser: true, maxRetries: 0 });
	const hex = (b) => Array.from(new Uint8Array(b), (x) => x.toString(16).padStart(2, '0')).join('');
	e2e.result = (async () => {
		let text = '';
		try {
			const stream = await client.chat.completions.create({ model: 'sdk-model', stream: true, messages: [{ role: 'user', content: 'hi' }] },
				{ query: { tokens: 25, interval_ms: 5 } });
			for await (const c of stream) text += (c.choices[0] && c.choices[0].delta && c.choices[0].delta.content) || '';
		} catch (e) { text = 'error: ' + e; }
		const r = await kept('/v1/chat/completions?` + snippetRawQuery + `', { method: 'POST', headers: { 'content-type': 'application/json' },
			body: JSON.stringify({ model: 'e2e-model', stream: true, messages: [{ role: 'user', content: 'hi' }] }) });
		const raw = await r.arrayBuffer();
		const ready = await itlmon.ready;
		await itlmon.settled();
		return { text, ready, bytes: raw.byteLength, sha256: hex(await crypto.subtle.digest('SHA-256', raw)), late: itlmon.timing.late || 0,
			restored: window.fetch === itlmon.originalFetch, error: itlmon.timing.error, keptWrapped: e2e.keptWrapped,
			wrappedAtOnce: e2e.wrappedAtOnce, summaries: e2e.summaries };
	})();`

type snippetResult struct {
	Text          string        `json:"text"`
	Ready         bool          `json:"ready"`
	Bytes         int           `json:"bytes"`
	SHA256        string        `json:"sha256"`
	Late          int           `json:"late"`
	Restored      bool          `json:"restored"`
	Error         string        `json:"error"`
	KeptWrapped   bool          `json:"keptWrapped"`
	WrappedAtOnce bool          `json:"wrappedAtOnce"`
	Summaries     []pageSummary `json:"summaries"`
}

// TestEnginesSnippet, in each engine: with itl.js held back until the
// app's stream has its response headers, that stream (from a client that
// kept the snippet's fetch) waits for itl.js and is measured in full; with
// itl.js missing, the same page streams exactly as without itlmon, through
// the fetch the client kept, and gets its own fetch back.
func TestEnginesSnippet(t *testing.T) {
	t.Parallel() // it times nothing (each engine's session takes one command at a time)
	forEachEngine(t, func(t *testing.T, e browsers.Engine) {
		var want string
		for i := range 25 {
			want += demo.Token(i)
		}
		wantN, wantSum := wantBody(t, snippetRawQuery)
		// run opens the page with itl.js answered by the assets server a:
		// held until the app's stream has sent its headers (the page's load
		// event waits for it too: itl.js was added before it), or missing.
		run := func(t *testing.T, missing bool) snippetResult {
			o := StartOrigin(t)
			serveOpenAI(t, o)
			a := StartAssets(t)
			if missing {
				a.Missing["itl.js"] = true
			}
			hold := make(chan struct{})
			var once sync.Once
			release := func() { once.Do(func() { close(hold) }) }
			t.Cleanup(release)
			a.Hold["itl.js"] = hold
			o.Handle("/held/v1/chat/completions", http.StripPrefix("/held", demo.Endpoint(demo.OpenAIChat)))
			// itl.js is released once the page has the SDK's stream's
			// headers (heldSignal), not when the server sent them: the
			// page may run itl.js before they reach it.
			o.Handle("POST /release-itl", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { release() }))
			pageURL := servePage(t, o, "/snippet", loaderPage{Src: a.URL + "/itl.js", Snippet: true, Before: heldSignal, App: template.JS(snippetApp)})
			p := NewPage(t, e)
			NavigateIn(t, p, pageURL)
			return evalFor[snippetResult](t, p, 60*time.Second,
				`(async () => { while (!window.e2e || !e2e.result) await new Promise(r => setTimeout(r, 5)); return await e2e.result; })()`)
		}
		check := func(t *testing.T, got snippetResult) {
			t.Helper()
			if !got.WrappedAtOnce || !got.KeptWrapped {
				t.Fatalf("fetch wrapped right after the snippet: %v; the fetch the app kept at import is the snippet's: %v", got.WrappedAtOnce, got.KeptWrapped)
			}
			if got.Text != want {
				t.Fatalf("SDK text = %q, want %q", got.Text, want)
			}
			if got.Bytes != wantN || got.SHA256 != wantSum {
				t.Fatalf("raw read through the kept fetch: %d bytes sha256 %s, server sent %d bytes sha256 %s", got.Bytes, got.SHA256, wantN, wantSum)
			}
		}
		t.Run("held", func(t *testing.T) {
			got := run(t, false)
			check(t, got)
			if !got.Ready || got.Error != "" {
				t.Fatalf("itlmon ready = %v (error %q), want true", got.Ready, got.Error)
			}
			if got.Late != 1 {
				t.Fatalf("itlmon.timing.late = %d, want 1: the SDK's stream had its headers before itl.js ran", got.Late)
			}
			if len(got.Summaries) != 2 {
				t.Fatalf("summaries = %+v, want 2: the SDK's stream and the raw read", got.Summaries)
			}
			if s := got.Summaries[0]; s.Status != "complete" || s.ContentEvents != 25 || s.Model != "sdk-model" || s.HeadersMs < 0 {
				t.Fatalf("the SDK's stream: %+v, want complete, 25 content events, model sdk-model, with its headers' time", s)
			}
		})
		t.Run("missing", func(t *testing.T) {
			got := run(t, true)
			check(t, got)
			if got.Ready || got.Error == "" || !got.Restored || len(got.Summaries) != 0 {
				t.Fatalf("itl.js missing: ready %v, error %q, window.fetch the page's own again %v, summaries %d; want false, an error, true, 0",
					got.Ready, got.Error, got.Restored, len(got.Summaries))
			}
		})
	})
}

// heldSignal is a fetch wrapper of the page's own, older than the snippet
// (which keeps it as the page's fetch): when the response to a request of
// the held path has its headers in the page, it asks the test's origin to
// release itl.js.
const heldSignal = `(function () {
  var f = window.fetch;
  window.fetch = function (input) {
    var p = f.apply(this, arguments);
    if (String((input && input.url) || input).indexOf('/held/') >= 0) {
      p.then(function () { f('/release-itl', { method: 'POST' }); }, function () {});
    }
    return p;
  };
})();`
