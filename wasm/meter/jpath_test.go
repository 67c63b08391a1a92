package meter

import (
	"encoding/json"
	"strings"
	"testing"
)

// refScan notes what scanJSON should note for p, the slow way: validJSON,
// then a recursive walk with the jobject/jarray iterators. Occurrences of a
// node are visited in document order, so the last one wins as in scanJSON.
func refScan(b []byte, p *jpath) jscan {
	var r jscan
	base := cap(b)
	var visit func(n int8, v []byte)
	members := func(parent int8, v []byte) {
		for it := jobject(v); it.next(); {
			if c := p.child(parent, it.key, false); c >= 0 {
				visit(c, it.val)
			}
		}
	}
	visit = func(n int8, v []byte) {
		switch v[0] {
		case '{':
			members(n, v)
		case '[':
			if c := p.child(n, nil, true); c >= 0 {
				for it := jarray(v); it.next(); {
					visit(c, it.elem)
				}
			}
		}
		s := base - cap(v)
		r.log = append(r.log, jnote{n, int32(s), int32(s + len(v))})
	}
	members(-1, b)
	r.replay(p, b)
	return r
}

// same compares what two scans noted.
func same(a, b *jscan) bool { return a.span == b.span && a.hits == b.hits }

var jpaths = map[string]*jpath{
	"chat": chatPath, "responses": responsesPath, "anthropic": anthropicPath,
	"vercel": vercelPath, "ollama": ollamaPath,
}

func TestScanJSONNotes(t *testing.T) {
	doc := []byte(`{"choices":[{"delta":{"role":"assistant","content":""}},` +
		`{"delta":{"c\u006fntent":"x","tool_calls":[]}},` +
		`{"text":"", "delta":{"function_call":{"name":"f"}}}],` +
		`"usage":{"completion_tokens":1},"usage":{"completion_tokens":7}}`)
	var r jscan
	if !scanJSON(doc, chatPath, &r) {
		t.Fatal("valid document rejected")
	}
	hit := func(n int) bool { return r.hit(n) }
	if !hit(3) { // content "x" under an escaped key
		t.Error("escaped key \"c\\u006fntent\" not matched")
	}
	if hit(7) || hit(11) {
		t.Error("an empty array or string counted as a hit")
	}
	if !hit(10) {
		t.Error("function_call.name not noted")
	}
	if got := string(r.val(doc, 13)); got != "7" {
		t.Errorf("completion_tokens = %q, want the last one, 7", got)
	}
	if got := string(r.val(doc, 2)); got != `{"function_call":{"name":"f"}}` {
		t.Errorf("last delta = %q", got)
	}
	if want := refScan(doc, chatPath); !same(&r, &want) {
		t.Error("scanJSON and refScan disagree")
	}

	// Paths hold only where the shape does: "choices" as an object has no
	// elements, a root array has no members.
	for _, s := range []string{`{"choices":{"delta":{"content":"x"}}}`, `[{"choices":[{"delta":{"content":"x"}}]}]`, `"x"`} {
		if !scanJSON([]byte(s), chatPath, &r) || r.hits != 0 {
			t.Errorf("%s: valid %v, hits %b; want valid, none", s, scanJSON([]byte(s), chatPath, &r), r.hits)
		}
	}
	// Invalid documents are rejected whatever they hold.
	for _, s := range []string{`{"choices":[{"delta":{"content":"x"}}]`, `{"choices":[{"delta":{"content":"x"}}]}}`, `{"usage":{"completion_tokens":01}}`} {
		if scanJSON([]byte(s), chatPath, &r) {
			t.Errorf("%s accepted", s)
		}
	}
}

func TestJPathLayout(t *testing.T) {
	for name, p := range jpaths {
		if len(p.nodes) > maxJNodes {
			t.Errorf("%s: %d nodes > %d", name, len(p.nodes), maxJNodes)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("newJPath accepted a child before its parent")
		}
	}()
	newJPath([]jnode{{key: "a", parent: 1}, {key: "b", parent: -1}})
}

// FuzzScanJSON checks the one-pass scan against encoding/json (validity) and
// against refScan (what it notes), for every classifier's jpath.
func FuzzScanJSON(f *testing.F) {
	for _, fx := range loadFixtures(f) {
		for _, line := range strings.Split(string(fx.body), "\n") {
			if i := strings.IndexByte(line, '{'); i >= 0 {
				f.Add([]byte(line[i:]))
			}
		}
	}
	f.Add([]byte(`{"choices":[{"delta":{"content":"a","tool_calls":[{}]}}],"usage":{"completion_tokens":3}}`))
	f.Add([]byte(`{"type":"response.completed","response":{"usage":{"output_tokens":9}}}`))
	f.Add([]byte(`{"message":{"content":"","tool_calls":[1]},"done":true,"eval_count":4}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		valid := validJSON(b)
		if std := json.Valid(b); valid != std && !(std && !valid) { // deeper than maxJSONDepth: the one intended difference
			t.Fatalf("validJSON(%q) = %v, encoding/json says %v", b, valid, std)
		}
		var r jscan
		for name, p := range jpaths {
			if got := scanJSON(b, p, &r); got != valid {
				t.Fatalf("%s: scanJSON(%q) = %v, validJSON %v", name, b, got, valid)
			}
			if valid {
				if want := refScan(b, p); !same(&r, &want) {
					t.Fatalf("%s: scanJSON(%q) noted %+v, refScan %+v", name, b, r, want)
				}
			}
		}
	})
}

// FuzzScanJSONResume checks that a scan resumed from the previous document
// notes what a fresh scan does: documents b and c share a fuzzed prefix with
// the one before them (as an SSE stream's events do).
func FuzzScanJSONResume(f *testing.F) {
	f.Add([]byte(`{"id":"x","object":"chat.completion.chunk","choices":[{"delta":{"content":"a"}}]}`), []byte(`"b"}}]}`), uint16(60), uint16(20))
	f.Add([]byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}`), []byte(` "usage":{"output_tokens":3}}`), uint16(41), uint16(1))
	f.Add([]byte(`{"a":1,"choices":[]}`), []byte(`, "usage":{"completion_tokens":2}}`), uint16(6), uint16(5))
	f.Fuzz(func(t *testing.T, a, tail []byte, cut1, cut2 uint16) {
		b := append(append([]byte(nil), a[:min(int(cut1), len(a))]...), tail...)
		c := append(append([]byte(nil), b[:min(int(cut2), len(b))]...), a[min(int(cut2), len(a)):]...)
		for name, p := range jpaths {
			var resumed jscan
			resumed.keep = true
			for _, doc := range [][]byte{a, b, c} {
				var fresh jscan
				want := scanJSON(doc, p, &fresh)
				if got := scanJSON(doc, p, &resumed); got != want {
					t.Fatalf("%s: resumed scan of %q = %v, fresh %v (after %q)", name, doc, got, want, a)
				}
				if want && !same(&resumed, &fresh) {
					t.Fatalf("%s: resumed scan of %q noted %+v, fresh %+v", name, doc, resumed.span, fresh.span)
				}
			}
		}
	})
}

func TestScanJSONResumes(t *testing.T) {
	var r jscan
	r.keep = true
	a := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"delta":{"content":"a"}}]}`)
	b := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"delta":{"content":""}}],"usage":{"completion_tokens":5}}`)
	if !scanJSON(a, chatPath, &r) || !r.hit(3) {
		t.Fatal("first document")
	}
	if cp, ok := r.resumeAt(b, chatPath); !ok || string(b[cp.pos:cp.pos+9]) != `"choices"` {
		t.Fatalf("resume point %+v %v, want the \"choices\" member", cp, ok)
	}
	if !scanJSON(b, chatPath, &r) || r.hit(3) || string(r.val(b, 13)) != "5" {
		t.Errorf("resumed scan: hits %b, tokens %q", r.hits, r.val(b, 13))
	}
}

// TestResumeAfterUnscannedEvent: an event the classifier does not scan
// ([DONE] here) sits between two that it does; the buffer of the first is
// then reused for the third, so the third must not resume from the first.
func TestResumeAfterUnscannedEvent(t *testing.T) {
	// The third is shorter than the first, so it is written over it.
	first := `{"usage":{"completion_tokens":5},"choices":[{"delta":{"content":"x"}}],"x":"` + strings.Repeat("z", 40) + `"}`
	third := `{"usage":null,"choices":[{"delta":{"content":"y"}}]}`
	m := New(Options{ContentType: "text/event-stream"})
	var got []bool
	m.trace = func(_ []byte, c bool) { got = append(got, c) }
	m.Feed([]byte("data: "+first+"\n\ndata: [DONE]\n\ndata: "+third+"\n\n"), Millisecond)
	if want := []bool{true, false, true}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("content per event = %v, want %v", got, want)
	}
}

// FuzzResumeAgrees feeds one SSE body to a meter that resumes scans and to
// one that scans every event from its start: every event's classification
// and the reported tokens must agree.
func FuzzResumeAgrees(f *testing.F) {
	for _, fx := range loadFixtures(f) {
		f.Add(fx.body)
	}
	f.Add([]byte("data: {\"usage\":{\"completion_tokens\":5},\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"x\":\"zzzzzzzzzzzzzzzzzzzzzz\"}\n\ndata: [DONE]\n\ndata: {\"usage\":null,\"choices\":[{\"delta\":{\"content\":\"y\"}}]}\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		var out [2][]bool
		var sums [2]Summary
		for k := range out {
			m := New(Options{ContentType: "text/event-stream"})
			m.noResume = k == 1
			m.trace = func(_ []byte, c bool) { out[k] = append(out[k], c) }
			m.Feed(body, Millisecond)
			m.End(2*Millisecond, StatusComplete, 200)
			sums[k] = m.Summary()
		}
		if len(out[0]) != len(out[1]) {
			t.Fatalf("%d events resumed, %d fresh", len(out[0]), len(out[1]))
		}
		for i := range out[0] {
			if out[0][i] != out[1][i] {
				t.Fatalf("event %d: content %v resumed, %v fresh", i, out[0][i], out[1][i])
			}
		}
		if sums[0].Tokens != sums[1].Tokens || sums[0].TokensReported != sums[1].TokensReported {
			t.Fatalf("tokens %d/%v resumed, %d/%v fresh", sums[0].Tokens, sums[0].TokensReported, sums[1].Tokens, sums[1].TokensReported)
		}
	})
}
