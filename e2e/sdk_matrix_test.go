package e2e

// The real-SDK matrix: each browser SDK, pinned exactly (e2e/sdkjs) and
// bundled by `make deps-sdk-js` ($SDK_JS_DIR), streams from collector/demo's endpoint for its
// API in headless Chromium, on the same page with and without itlmon, and the
// real collector stores what the module measured.
//
// What each SDK does to the body (read in the installed sources), and so why
// each scenario exists:
//
//   - openai 7.60.0, Chat Completions (POST {baseURL}/chat/completions) and
//     Responses (POST {baseURL}/responses), both through Stream.fromSSEResponse:
//     the client keeps the global fetch it saw when constructed
//     (Shims.getDefaultFetch() in the constructor); the body is read with
//     body.getReader() and parsed by its own LineDecoder/SSEDecoder. At
//     `data: [DONE]` it stops reading and, as it has not read the body's end,
//     its cleanup calls reader.cancel(): every Chat stream is CANCELLED after
//     its terminal event. Whether that cancel or the server's end of the body
//     comes first is a race; scenario "tail" makes the cancel come first (it
//     must not count as an abort). Responses has no [DONE]: its iterator
//     reads until the body ends, after response.completed.
//     stream.controller.abort() aborts the AbortController whose signal went
//     to fetch, then cancels the reader.
//   - @anthropic-ai/sdk 1.17.0 (POST {baseURL}/v1/messages): keeps the fetch
//     it saw when constructed; parses SSE itself over iterBody(body)
//     (ReadableStreamToAsyncIterable; in 1.17, unlike 1.15, a TypeError the read
//     throws becomes an APIConnectionError) and skips events without an
//     `event:` line and `ping`s, so the endpoint must name every event. It
//     reads until the body ends (no cancel after message_stop; an iterator
//     dropped unfinished has its body cancelled by a FinalizationRegistry).
//     stream.controller.abort() aborts the signal given to fetch.
//   - ai 7.0.185, AbstractChat + DefaultChatTransport (what useChat runs):
//     the transport calls `this.fetch ?? globalThis.fetch` at request time
//     (never a stale reference), POSTs {id, messages, trigger, messageId} plus
//     the request's body option to `api`, and pipes the body through
//     TextDecoderStream and eventsource-parser's EventSourceParserStream,
//     dropping `data: [DONE]` and validating each part against its zod schema
//     (start, start-step, text-start, text-delta{id, delta}, text-end,
//     finish-step, finish{finishReason}). It reads to the end of the body
//     (the pipe chain never cancels after finish). chat.stop() aborts the
//     request's AbortController (the fetch signal) and cancels the reader.
//     The UI message stream reports no usage: stored tokens are content events.
//   - @ai-sdk/ui-utils 1.2.11, callChatApi (what AI SDK 4's useChat runs):
//     calls the global fetch at each call (getOriginalFetch), POSTs the
//     request's body to `api`, and reads the data stream protocol (text/plain,
//     X-Vercel-AI-Data-Stream: v1, a part a line: f: ... 0:"text" ... e:, d:)
//     with body.getReader() until the body ends, never cancelling or
//     releasing it; useChat's stop() aborts the AbortController whose signal
//     went to fetch. The finish message (d:) reports completionTokens.
//   - ollama 0.6.4, browser build (POST {host}/api/chat): keeps the fetch it
//     saw when constructed (`config.fetch ?? fetch`); splits NDJSON on "\n"
//     itself. At the line with `done: true` its iterator returns without
//     cancelling or releasing the reader: the rest of the body is left to
//     end on its own (with itlmon, the pass-through still reads it to the
//     end). ollama.abort() aborts the AbortController of every stream in
//     flight (the fetch signal); the next read rejects with AbortError.
//
// Scenarios, each run on both pages and compared: "smooth"; "hitch" (a 600 ms
// pause before content event 12: one stall); "abort" through the SDK's own
// abort after 8 content events (the server pauses there, so both pages see
// exactly 8); "tail" (300 ms between the terminal event's write and the end
// of the body); "early" (a client constructed at the moment itl.js has run,
// before its module is ready: itl.js must have wrapped fetch by then and hold
// the request until the module is ready). Abort, tail and early run again
// with the module on the page's main thread (the fallback under a CSP
// without blob: workers), where ends and the wait for the module differ.
//
// Stored format, status and end are compared as the names /api/streams gives
// (meter.FormatNames, StatusNames, EndNames).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/itlmon/itlmon/collector/demo"
)

// sdkDrivers is the page's code for each bundle: make() builds a client, and
// each API's function streams one answer with it and returns what the SDK
// gave the page (out) plus the page's own timing (out.page).
const sdkDrivers = `
function state() { // a ChatState for AbstractChat, as @ai-sdk/react's, without React
  return { status: 'ready', error: undefined, messages: [],
    pushMessage(m) { this.messages = this.messages.concat([m]); },
    popMessage() { this.messages = this.messages.slice(0, -1); },
    replaceMessage(i, m) { this.messages = this.messages.slice(); this.messages[i] = m; },
    snapshot: (x) => structuredClone(x) };
}
// newOut returns the SDK's output record and a function to call per content
// item: it counts the page's own gaps over 100 ms between content items
// (see slowGapMs).
function newOut() {
  const out = { text: '', items: 0, content: 0, usage: -1, err: '', parts: '', status: '' };
  const page = { slowGaps: 0 };
  let last = -1;
  const content = (t) => {
    const now = performance.now();
    if (last >= 0 && now - last > 100) page.slowGaps++;
    last = now; out.text += t; out.content++;
  };
  return { out, page, content };
}
const msgs = [{ role: 'user', content: 'hi' }];
const drivers = {
  openai: {
    make: () => new SDK.default({ apiKey: 'sk-test', baseURL: location.origin + '/v1', dangerouslyAllowBrowser: true, maxRetries: 0 }),
    async chat(client, o) {
      const { out, page, content } = newOut();
      try {
        const stream = await client.chat.completions.create({ model: o.model, stream: true,
          stream_options: { include_usage: true }, messages: msgs }, { query: o.cadence });
        for await (const c of stream) {
          out.items++;
          const t = c.choices[0] && c.choices[0].delta && c.choices[0].delta.content;
          if (t) content(t);
          if (c.usage) out.usage = c.usage.completion_tokens;
          if (o.abortAt && out.content === o.abortAt && t) stream.controller.abort();
        }
      } catch (e) { out.err = e.name || String(e); }
      return { out, page };
    },
    async responses(client, o) {
      const { out, page, content } = newOut();
      try {
        const stream = await client.responses.create({ model: o.model, stream: true, input: 'hi' }, { query: o.cadence });
        for await (const ev of stream) {
          out.items++;
          if (ev.type === 'response.output_text.delta') content(ev.delta);
          if (ev.type === 'response.completed') { out.usage = ev.response.usage.output_tokens; out.status = ev.response.status; }
          if (o.abortAt && out.content === o.abortAt && ev.type === 'response.output_text.delta') stream.controller.abort();
        }
      } catch (e) { out.err = e.name || String(e); }
      return { out, page };
    },
  },
  anthropic: {
    make: () => new SDK.default({ apiKey: 'sk-ant-test', baseURL: location.origin, dangerouslyAllowBrowser: true, maxRetries: 0 }),
    async messages(client, o) {
      const { out, page, content } = newOut();
      try {
        const stream = await client.messages.create({ model: o.model, max_tokens: 1024, stream: true, messages: msgs }, { query: o.cadence });
        for await (const ev of stream) {
          out.items++;
          const text = ev.type === 'content_block_delta' && ev.delta.type === 'text_delta';
          if (text) content(ev.delta.text);
          if (ev.type === 'message_delta') { out.usage = ev.usage.output_tokens; out.status = ev.delta.stop_reason; }
          if (o.abortAt && out.content === o.abortAt && text) stream.controller.abort();
        }
      } catch (e) { out.err = e.name || String(e); }
      return { out, page };
    },
  },
  ai: {
    make: () => new SDK.AbstractChat({ transport: new SDK.DefaultChatTransport({ api: '/api/ui-chat' }), state: state() }),
    async ui(chat, o) {
      const { out, page, content } = newOut();
      const textOf = () => {
        const m = chat.messages[chat.messages.length - 1];
        return m && m.role === 'assistant' ? m.parts.filter(p => p.type === 'text').map(p => p.text).join('') : '';
      };
      // The page's gaps: the assistant text as the chat's state changes.
      const st = chat.state, replace = st.replaceMessage, push = st.pushMessage;
      let seen = '';
      const watch = () => { const t = textOf(); if (t.length > seen.length) { content(''); seen = t; } };
      st.replaceMessage = function (i, m) { replace.call(this, i, m); watch(); };
      st.pushMessage = function (m) { push.call(this, m); watch(); };
      const sent = chat.sendMessage({ text: 'hi' }, { body: Object.assign({ model: o.model }, o.cadence) });
      if (o.abortAt) {
        const t0 = performance.now();
        while (textOf() !== o.abortText && performance.now() - t0 < 10000) await new Promise(r => setTimeout(r, 2));
        await chat.stop();
      }
      try { await sent; } catch (e) { out.err = e.name || String(e); }
      st.replaceMessage = replace; st.pushMessage = push;
      const m = chat.messages[chat.messages.length - 1];
      out.text = textOf();
      out.content = 0; // counted by state changes above: timing, not output
      out.parts = JSON.stringify(m && m.role === 'assistant' ? m.parts : null);
      out.status = chat.status;
      if (chat.error) out.err = chat.error.name;
      return { out, page };
    },
  },
  ai4: {
    make: () => ({}), // nothing kept: callChatApi takes the global fetch at each call
    async data(_, o) {
      const { out, page, content } = newOut();
      const ctrl = new AbortController();
      let seen = '', n = 0;
      try {
        await SDK.callChatApi({
          api: '/api/data-chat', body: Object.assign({ messages: msgs, model: o.model }, o.cadence), streamProtocol: 'data',
          abortController: () => ctrl, restoreMessagesOnFailure() {}, generateId: () => 'id-' + n++,
          onUpdate({ message }) {
            out.items++;
            if (message.content.length > seen.length) { content(message.content.slice(seen.length)); seen = message.content; }
            if (o.abortAt && out.content === o.abortAt) ctrl.abort(); // what useChat's stop() does
          },
          onFinish(message, { usage, finishReason }) { out.usage = usage.completionTokens; out.status = finishReason; },
        });
      } catch (e) { out.err = e.name || String(e); }
      return { out, page };
    },
  },
  ollama: {
    make: () => new SDK.Ollama({ host: location.origin }),
    async chat(client, o) {
      const { out, page, content } = newOut();
      try {
        const stream = await client.chat(Object.assign({ model: o.model, stream: true, messages: msgs }, o.cadence));
        for await (const part of stream) {
          out.items++;
          if (part.message.content) content(part.message.content);
          if (part.done) { out.usage = part.eval_count; out.status = part.done_reason; }
          if (o.abortAt && out.content === o.abortAt && part.message.content) client.abort();
        }
      } catch (e) { out.err = e.name || String(e); }
      return { out, page };
    },
  },
};
`

var sdkPageTmpl = template.Must(template.New("sdk").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>itlmon sdk e2e</title>
<script type="module">
import * as SDK from '/sdk-js/{{.Bundle}}.mjs';
{{.Drivers}}
const d = drivers[{{.Bundle}}];
window.e2e = { summaries: [], loaded: false, early: null, earlyBeforeReady: null };
// run streams one answer through the SDK (opts.early: with a client made at
// page load) and returns what the SDK gave, the page's timing and the
// itlmon.onStream summaries of this run.
e2e.run = async function (api, opts) {
  const before = e2e.summaries.length;
  const r = await d[api](opts.early ? e2e.early.shift() : d.make(), opts);
  if (window.itlmon) {
    // A body the SDK left open (ollama after done: true) ends later.
    const t0 = performance.now();
    while (e2e.summaries.length === before && performance.now() - t0 < 3000) await new Promise(r => setTimeout(r, 10));
    await itlmon.settled();
  }
  r.summaries = e2e.summaries.slice(before);
  return r;
};
{{if .NoModule}}
e2e.early = Array.from({ length: 4 }, () => d.make()); // one per early run on this page
{{else}}
// The tag a site would have (async), added here so that the SDK is loaded
// first: its onload runs right after itl.js has run, long before the module
// (itl.wasm in its Worker) is ready. The early clients are made there, one for
// early run (an AbstractChat is one conversation): 2 APIs x 2 modes at most.
const tag = document.createElement('script');
tag.src = {{.Src}}; tag.async = true; tag.dataset.site = {{.Site}};{{if .MainThread}} tag.dataset.worker = 'false';{{end}}
tag.onload = () => {
  e2e.earlyBeforeReady = !(itlmon.timing && itlmon.timing.readyAt > 0);
  e2e.early = Array.from({ length: 4 }, () => d.make()); // one per early run on this page
  itlmon.onStream(s => e2e.summaries.push(s));
  e2e.loaded = true;
};
tag.onerror = () => { e2e.loaded = 'error'; };
document.head.appendChild(tag);
{{end}}
</script></head><body><p>itlmon sdk e2e</p></body></html>`))

// sdkCase is one row of the matrix: an API through its SDK.
type sdkCase struct {
	name   string
	bundle string // e2e/sdkjs/{bundle}.mjs, bundled into $SDK_JS_DIR
	call   string // the driver's function
	format string // the stored format's name
	usage  bool   // the API reports output tokens (else stored tokens = content events)
	// call only: no client object (a function that takes the global fetch
	// at each call), so no early run, and no main-thread runs, which test
	// the module's place, not the format (the other SDKs run them).
	callOnly bool
}

var sdkCases = []sdkCase{
	{"openai-chat", "openai", "chat", "openai_chat", true, false},
	{"openai-responses", "openai", "responses", "openai_responses", true, false},
	{"anthropic", "anthropic", "messages", "anthropic", true, false},
	{"ai-ui", "ai", "ui", "vercel_ai", false, false},
	{"ai4-data", "ai4", "data", "vercel_ai_data", true, true},
	{"ollama", "ollama", "chat", "ollama", true, false},
}

// sdkScenario is one column: a cadence and what the stored row must say.
type sdkScenario struct {
	name     string
	cadence  map[string]any
	abortAt  int // abort through the SDK after this many content events
	early    bool
	status   string
	content  int
	stalls   int
	reported bool // the usage event was read (tokens = usage_tokens)
}

const (
	sdkTokens = 24
	sdkUsage  = 53 // usage_tokens: a count the meter can only have from the usage event
	sdkModel  = "sdk-model"
)

func sdkScenarios() []sdkScenario {
	base := func(kv ...any) map[string]any {
		m := map[string]any{"tokens": sdkTokens, "interval_ms": 6, "usage_tokens": sdkUsage}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	return []sdkScenario{
		{name: "smooth", cadence: base(), status: "complete", content: sdkTokens, reported: true},
		{name: "hitch", cadence: base("pause_at", 12, "pause_ms", 600), status: "complete", content: sdkTokens, stalls: 1, reported: true},
		{name: "abort", cadence: base("pause_at", 8, "pause_ms", 5000), abortAt: 8, status: "aborted", content: 8},
		{name: "tail", cadence: base("tail_ms", 300), status: "complete", content: sdkTokens, reported: true},
		{name: "early", cadence: base(), early: true, status: "complete", content: sdkTokens, reported: true},
	}
}

// sdkOut is what the SDK gave the page: identical with and without itlmon.
type sdkOut struct {
	Text    string `json:"text"`
	Items   int    `json:"items"`
	Content int    `json:"content"`
	Usage   int    `json:"usage"`
	Err     string `json:"err"`
	Parts   string `json:"parts"`
	Status  string `json:"status"`
}

// sdkSummary is what itlmon.onStream gave the page for one stream.
type sdkSummary struct {
	ID            string `json:"id"`
	Status        string `json:"status"`
	End           string `json:"end"`
	ContentEvents int    `json:"contentEvents"`
	Stalls        int    `json:"stalls"`
}

type sdkRun struct {
	Out  sdkOut `json:"out"`
	Page struct {
		SlowGaps    int
		FirstTextMs float64 // the providers' drivers (sdk_providers_test.go)
	} `json:"page"`
	Summaries []sdkSummary `json:"summaries"`
}

// TestSDKMatrix: every SDK x scenario (see the file comment) gives the page
// the same output with and without itlmon, and the collector stores the
// stream with the right format, status, content events, tokens and stalls.
func TestSDKMatrix(t *testing.T) {
	dir := os.Getenv("SDK_JS_DIR")
	if _, err := os.Stat(filepath.Join(dir, "versions.json")); dir == "" || err != nil {
		requireReal(t, "browser SDK bundles (SDK_JS_DIR)", errors.Join(errors.New("run make deps-sdk-js"), err))
	}
	if v, err := os.ReadFile(filepath.Join(dir, "versions.json")); err == nil {
		t.Logf("SDKs: %s", strings.TrimSpace(string(v)))
	}
	Browser(t)
	o := StartOrigin(t)
	c := StartCollectorArgs(t, []string{"--origin-key", "e2e=" + sdkOriginKey, "--log-level", "info"}, "e2e="+o.URL)
	o.SetCollector(c.URL, "e2e")
	files := http.StripPrefix("/sdk-js/", http.FileServer(http.Dir(dir)))
	o.Handle("/sdk-js/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		files.ServeHTTP(w, r)
	}))
	o.Handle("GET /sdk-page", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		q := r.URL.Query()
		data := struct {
			Bundle, Src, Site    string
			Drivers              template.JS
			NoModule, MainThread bool
		}{q.Get("sdk"), o.collector + "/itl.js", o.site, template.JS(sdkDrivers), q.Get("nomodule") == "1", asksMainThread(q.Get("init"))}
		o.mu.Unlock()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err := sdkPageTmpl.Execute(w, data); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	}))

	// The clients (openai, @anthropic-ai/sdk, ai, AI SDK 4's, ollama) against the demo's
	// endpoints, each scenario; then the providers (sdk_providers_test.go).
	t.Run("clients", func(t *testing.T) {
		type check struct {
			name string
			c    sdkCase
			s    sdkScenario
			id   string
		}
		var checks []check
		// run runs one SDK x scenario on the page without itlmon and on one with
		// it, at the same time, and keeps the stream to check in the store.
		run := func(name string, without, with context.Context, sc sdkCase, s sdkScenario) {
			opts := map[string]any{"model": sdkModel, "cadence": s.cadence, "abortAt": s.abortAt, "abortText": demo.Text(s.abortAt), "early": s.early}
			js, _ := json.Marshal(opts)
			expr := `e2e.run(` + strconv.Quote(sc.call) + `, ` + string(js) + `)`
			for attempt := 1; ; attempt++ {
				ref, got := bothRuns(t, without, with, expr)
				if ref.Out != got.Out {
					t.Errorf("%s: the SDK gave the page\n%+v with itlmon,\n%+v without", name, got.Out, ref.Out)
				}
				if want := demo.Text(s.content); ref.Out.Text != want {
					t.Errorf("%s: the SDK's text without itlmon = %q (err %q), want %q", name, ref.Out.Text, ref.Out.Err, want)
				}
				if len(got.Summaries) != 1 {
					t.Errorf("%s: %d itlmon.onStream summaries, want 1 (the stream was not measured)", name, len(got.Summaries))
					return
				}
				sum := got.Summaries[0]
				// A page that itself saw another number of gaps over slowGapMs
				// between content items than the cadence has pauses was
				// starved (2 busy cores): run again, at most three times.
				if sum.Stalls != s.stalls && got.Page.SlowGaps != s.stalls && attempt < 3 {
					t.Logf("%s run %d: %d stalls measured, the page itself saw %d gaps over %d ms: starved, running again", name, attempt, sum.Stalls, got.Page.SlowGaps, slowGapMs)
					continue
				}
				if sum.Status != s.status || sum.ContentEvents != s.content || sum.Stalls != s.stalls ||
					!slices.Contains(wantEnds(sc, s), sum.End) {
					t.Errorf("%s: itlmon.onStream summary: status %s, end %q, %d content events, %d stalls; want %s, %s, %d, %d",
						name, sum.Status, sum.End, sum.ContentEvents, sum.Stalls, s.status, strings.Join(wantEnds(sc, s), " or "), s.content, s.stalls)
				}
				checks = append(checks, check{name, sc, s, sum.ID})
				return
			}
		}
		// openWith opens the bundle's page with itlmon (the module in its Worker,
		// or on the main thread) and checks that the early client came first.
		openWith := func(bundle, query string) context.Context {
			ctx := NewTab(t)
			if !OpenPage(t, ctx, o.URL+"/sdk-page?sdk="+bundle+query) {
				t.Fatalf("%s: itlmon did not become ready: %s", bundle, Eval[string](t, ctx, `itlmon.timing.error`))
			}
			if !Eval[bool](t, ctx, `e2e.earlyBeforeReady`) {
				t.Fatalf("%s: the early client was made after the module was ready", bundle)
			}
			return ctx
		}
		start := time.Now()
		for _, bundle := range []string{"openai", "anthropic", "ai", "ai4", "ollama"} {
			without := NewTab(t)
			if OpenPage(t, without, o.URL+"/sdk-page?sdk="+bundle+"&nomodule=1") {
				t.Fatalf("%s: itlmon ready on the page without it", bundle)
			}
			Eval[bool](t, without, `(async () => { while (!window.e2e || !e2e.early) await new Promise(r => setTimeout(r, 5)); return true; })()`)
			with := openWith(bundle, "")
			var main context.Context
			for _, sc := range sdkCases {
				if sc.bundle != bundle {
					continue
				}
				for _, s := range sdkScenarios() {
					if !(sc.callOnly && s.early) {
						run(sc.name+"/"+s.name, without, with, sc, s)
					}
				}
				if sc.callOnly {
					continue
				}
				// The module on the main thread (a CSP without blob: workers):
				// the scenarios whose end or start differ there.
				if main == nil {
					main = openWith(bundle, "&init="+url.QueryEscape(`{"worker":false}`))
				}
				for _, s := range sdkScenarios() {
					if s.abortAt > 0 || s.early || s.cadence["tail_ms"] != nil {
						run(sc.name+"/main/"+s.name, without, main, sc, s)
					}
				}
			}
		}
		t.Logf("matrix: %d runs in %v", 2*len(checks), time.Since(start).Round(time.Millisecond))

		ids := make([]string, len(checks))
		for i, ck := range checks {
			ids[i] = ck.id
		}
		rows := waitSDKRows(t, c, "e2e", ids)
		for _, ck := range checks {
			row, ok := rows[ck.id]
			if !ok {
				t.Errorf("%s: stream %s not stored", ck.name, ck.id)
				continue
			}
			s := ck.s
			wantTokens := uint32(s.content)
			if ck.c.usage && s.reported {
				wantTokens = sdkUsage
			}
			got := fmt.Sprintf("format %s, status %s, content events %d, tokens %d, stalls %d, model %q",
				row.Format, row.Status, row.ContentEvents, row.Tokens, row.Stalls, row.Model)
			want := fmt.Sprintf("format %s, status %s, content events %d, tokens %d, stalls %d, model %q",
				ck.c.format, s.status, s.content, wantTokens, s.stalls, sdkModel)
			t.Logf("%-28s stored %s, end %q", ck.name, got, row.End)
			if got != want {
				t.Errorf("%s: stored %s;\n%*s want %s", ck.name, got, len(ck.name)+1, "", want)
			}
			if ends := wantEnds(ck.c, s); !slices.Contains(ends, row.End) {
				t.Errorf("%s: stored end %s, want %s", ck.name, row.End, strings.Join(ends, " or "))
			}
		}
	})
	t.Run("providers", func(t *testing.T) { sdkProviders(t, o, c) })
}

// wantEnds returns how the body may have ended (meter.EndNames): through the
// SDK's abort; cancelled by the OpenAI SDK at [DONE] before the server ended
// the body (always with a tail, a race without one); else read to its end
// (ollama leaves the rest of the body unread: the pass-through still reads
// it to the end).
func wantEnds(c sdkCase, s sdkScenario) []string {
	switch {
	case s.abortAt > 0:
		return []string{"abort"}
	case c.name == "openai-chat" && s.cadence["tail_ms"] != nil:
		return []string{"closed_after_end"}
	case c.name == "openai-chat":
		return []string{"body_end", "closed_after_end"}
	}
	return []string{"body_end"}
}

// sdkRow is the part of an /api/streams row the matrix checks.
type sdkRow struct {
	StreamID      string `json:"stream_id"`
	Model         string `json:"model"`
	Format        string `json:"format"`
	Status        string `json:"status"`
	End           string `json:"end"` // how the body ended
	ContentEvents uint32 `json:"content_events"`
	Tokens        uint32 `json:"tokens"`
	Stalls        uint32 `json:"stalls"`
	// For the providers (sdk_providers_test.go).
	TokensReported bool     `json:"tokens_reported"`
	TTFTMs         *float64 `json:"ttft_ms"`
	OriginID       string   `json:"origin_id"`
}

// waitSDKRows polls /api/streams until the site's streams with these ids are
// all stored (deadline 45 s) and returns the site's rows by stream id.
func waitSDKRows(t *testing.T, c *Collector, site string, ids []string) map[string]sdkRow {
	t.Helper()
	var rows map[string]sdkRow
	var err error
	Eventually(45*time.Second, 50*time.Millisecond, func() bool {
		rows = map[string]sdkRow{}
		var resp *http.Response
		resp, err = http.Get(c.URL + "/api/streams?" + url.Values{"site": {site}, "since": {"1h"}, "limit": {"1000"}}.Encode())
		if err == nil {
			var out struct {
				Streams []sdkRow `json:"streams"`
			}
			err = json.NewDecoder(resp.Body).Decode(&out)
			resp.Body.Close()
			for _, r := range out.Streams {
				rows[r.StreamID] = r
			}
		}
		all := err == nil
		for _, id := range ids {
			_, ok := rows[id]
			all = all && ok
		}
		return all
	})
	if err != nil {
		t.Errorf("/api/streams: %v", err)
	}
	return rows
}

// bothRuns evaluates expr (an e2e.run call) in both tabs at once: the page
// without itlmon and the page with it stream at the same time, from separate
// requests, so the matrix takes half as long.
func bothRuns(t *testing.T, without, with context.Context, expr string) (ref, got sdkRun) {
	t.Helper()
	var wg sync.WaitGroup
	var errRef, errGot error
	run := func(ctx context.Context, out *sdkRun, err *error) {
		defer wg.Done()
		sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		*out, *err = chromedp.Run(sctx, chromedp.Evaluate[sdkRun](expr, chromedp.EvalAwaitPromise))
	}
	wg.Add(2)
	go run(without, &ref, &errRef)
	go run(with, &got, &errGot)
	wg.Wait()
	if err := errors.Join(errRef, errGot); err != nil {
		t.Fatalf("eval %s: %v", expr, err)
	}
	return ref, got
}
