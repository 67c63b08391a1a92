package e2e

import (
	"strings"
	"testing"

	"github.com/itlmon/itlmon/collector/demo"
)

// serveOpenAISDK serves the official OpenAI JS SDK (npm openai,
// $OPENAI_JS_DIR, make deps-openai-js) from the origin at /openai/ and
// returns the text its 25-token stream must give.
func serveOpenAISDK(t *testing.T, o *Origin) (want string) {
	t.Helper()
	serveOpenAI(t, o)
	var b strings.Builder
	for i := range 25 {
		b.WriteString(demo.Token(i))
	}
	return b.String()
}

// sdkJS(n, abortAfter) streams n tokens through the SDK's
// chat.completions.create and, when abortAfter > 0, aborts through the
// SDK's controller at chunk abortAfter (the server pauses 1 s before the
// token after it); the result is an sdkResult.
const sdkJS = `(async (n, abortAfter) => {
	const { default: OpenAI } = await import('/openai/index.mjs');
	const client = new OpenAI({ apiKey: 'sk-test', baseURL: location.origin + '/v1', dangerouslyAllowBrowser: true, maxRetries: 0 });
	const stream = await client.chat.completions.create({ model: 'sdk-model', stream: true, messages: [{ role: 'user', content: 'hi' }] },
		{ query: abortAfter ? { tokens: n, interval_ms: 5, pause_at: abortAfter - 1, pause_ms: 1000 } : { tokens: n, interval_ms: 5 } });
	let text = '', chunks = 0, err = '';
	try {
		for await (const c of stream) {
			chunks++;
			text += (c.choices[0] && c.choices[0].delta && c.choices[0].delta.content) || '';
			if (abortAfter && chunks === abortAfter) stream.controller.abort();
		}
	} catch (e) { err = e.constructor.name; }
	await new Promise(r => setTimeout(r, 50));
	if (window.itlmon) await itlmon.settled();
	return { text, chunks, err, summaries: e2e.summaries.length, last: e2e.summaries[e2e.summaries.length - 1] || null };
})`

// sdkResult is what sdkJS returns.
type sdkResult struct {
	Text      string   `json:"text"`
	Chunks    int      `json:"chunks"`
	Err       string   `json:"err"`
	Summaries int      `json:"summaries"`
	Last      *Summary `json:"last"`
}

// sdkCall is the expression that runs sdkJS for 25 tokens, aborting at
// the 5th chunk when abort is set.
func sdkCall(abort bool) string {
	return sdkJS + `(25, ` + map[bool]string{true: "5", false: "0"}[abort] + `)`
}

// TestOpenAISDK: the official OpenAI JS SDK (npm openai, $OPENAI_JS_DIR, make
// deps-openai-js) streams through the wrapped fetch exactly as without it, its
// abort works, and itlmon measures the stream.
func TestOpenAISDK(t *testing.T) {
	t.Parallel()
	o := StartOrigin(t)
	want := serveOpenAISDK(t, o)
	a := StartAssets(t)
	o.SetCollector(a.URL, "e2e")

	run := func(t *testing.T, module bool, abortAfter int) sdkResult {
		t.Helper()
		ctx := NewTab(t)
		if got := OpenPage(t, ctx, o.PageURL(nil, !module)); got != module {
			t.Fatalf("itlmon ready = %v, want %v", got, module)
		}
		return Eval[sdkResult](t, ctx, sdkCall(abortAfter > 0))
	}

	without := run(t, false, 0)
	with := run(t, true, 0)
	if without.Text != want || with.Text != without.Text || with.Chunks != without.Chunks || with.Err != "" {
		t.Fatalf("SDK stream with itlmon = %q (%d chunks, err %q), without = %q (%d chunks); want %q",
			with.Text, with.Chunks, with.Err, without.Text, without.Chunks, want)
	}
	if with.Summaries != 1 || with.Last.ContentEvents != 25 || with.Last.Model != "sdk-model" || with.Last.Status != "complete" {
		t.Fatalf("itlmon summary = %d, %+v; want one complete stream of 25 content events, model sdk-model", with.Summaries, with.Last)
	}

	// Abort at the 5th chunk (the role chunk, then tokens 0-3). The server
	// pauses before token 4, so no later event can already be in the SDK's
	// hands (a loaded machine coalesces reads, and the SDK yields every event
	// of a read it holds, with or without itlmon): both runs see exactly 5.
	// That chunks read ahead are discarded on abort: TestAbortDiscardsQueued.
	abWithout := run(t, false, 5)
	abWith := run(t, true, 5)
	if abWith.Err != abWithout.Err || abWith.Chunks != abWithout.Chunks || abWith.Chunks != 5 {
		t.Fatalf("SDK abort with itlmon: %d chunks, error %q; without: %d chunks, error %q", abWith.Chunks, abWith.Err, abWithout.Chunks, abWithout.Err)
	}
	t.Logf("SDK abort after 5 chunks: %d chunks, %q with itlmon; %d, %q without", abWith.Chunks, abWith.Err, abWithout.Chunks, abWithout.Err)
	if abWith.Last == nil || abWith.Last.Status != "aborted" {
		t.Fatalf("itlmon summary after SDK abort = %+v, want status aborted", abWith.Last)
	}
}
