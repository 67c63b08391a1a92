package meter

import (
	"strconv"
	"strings"
	"testing"

	"github.com/itlmon/itlmon/internal/cpubench"
)

// chatStream returns an OpenAI chat stream of n content chunks (role chunk
// first, usage chunk and [DONE] last) cut into reads of 1 to perRead events
// (1-3 is what a browser sees of a streaming response).
func chatStream(n, perRead int) (reads [][]byte, events int) {
	var evs []string
	base := `{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_06737a9306","choices":[{"index":0,"delta":`
	evs = append(evs, base+`{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}`)
	for i := range n {
		evs = append(evs, base+`{"content":" tok`+strconv.Itoa(i%100)+`"},"logprobs":null,"finish_reason":null}],"usage":null}`)
	}
	evs = append(evs, `{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":19,"completion_tokens":`+strconv.Itoa(n)+`,"total_tokens":`+strconv.Itoa(n+19)+`}}`, "[DONE]")
	for i := 0; i < len(evs); {
		k := min(1+i%perRead, len(evs)-i)
		var b strings.Builder
		for _, e := range evs[i : i+k] {
			b.WriteString("data: " + e + "\n\n")
		}
		reads = append(reads, []byte(b.String()))
		i += k
	}
	return reads, len(evs)
}

// BenchmarkFeed is the cost of one network read (1-3 OpenAI chat events),
// including the share of Reset/End of a 500-token stream.
func BenchmarkFeed(b *testing.B) {
	for _, f := range []struct {
		name  string
		reads func() ([][]byte, int)
		ct    string
	}{
		{"openai-chat", func() ([][]byte, int) { return chatStream(500, 3) }, "text/event-stream"},
		{"openai-chat-1-event-per-read", func() ([][]byte, int) { return chatStream(500, 1) }, "text/event-stream"},
		{"anthropic", func() ([][]byte, int) { return fixtureReads(b, "anthropic.sse", 60) }, "text/event-stream"},
		{"ollama", func() ([][]byte, int) { return fixtureReads(b, "ollama_chat.ndjson", 60) }, "application/x-ndjson"},
		{"cohere", func() ([][]byte, int) { return fixtureReads(b, "cohere.sse", 60) }, "text/event-stream"},
		{"gemini", func() ([][]byte, int) { return fixtureReads(b, "gemini.sse", 60) }, "text/event-stream"},
		{"sse-typed", func() ([][]byte, int) { return fixtureReads(b, "generic_typed.sse", 60) }, "text/event-stream"},
	} {
		b.Run(f.name, func(b *testing.B) {
			reads, events := f.reads()
			var total int
			for _, r := range reads {
				total += len(r)
			}
			b.SetBytes(int64(total / len(reads)))
			opts := Options{ContentType: f.ct}
			m := New(opts)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpubench.Now()
			k := 0
			for i := 0; i < b.N; i++ {
				if k == len(reads) {
					m.End(Duration(i)*Millisecond, StatusComplete, 200)
					m.Reset(opts)
					k = 0
				}
				m.Feed(reads[k], Duration(i)*Millisecond)
				k++
			}
			b.StopTimer()
			readsPerEvent := float64(len(reads)) / float64(events)
			cpubench.Report(b, cpu0, 0)
			if d := cpubench.Now() - cpu0; d > 0 {
				b.ReportMetric(float64(d.Nanoseconds())/float64(b.N)*readsPerEvent, "cpu-ns/event")
			}
		})
	}
}

// fixtureReads repeats a fixture's events (the stream between its first and
// last events) so a long stream exercises the steady state, cut in reads of
// 1-3 events.
func fixtureReads(b *testing.B, name string, repeat int) ([][]byte, int) {
	b.Helper()
	var f fixture
	for _, fx := range loadFixtures(b) {
		if fx.name == name {
			f = fx
		}
	}
	evs := discover(b, f)
	var chunks [][]byte
	prev := 0
	for _, e := range evs {
		if e.off+1 > prev && e.off < len(f.body) {
			chunks = append(chunks, f.body[prev:e.off+1])
			prev = e.off + 1
		}
	}
	var all [][]byte
	for range repeat {
		all = append(all, chunks...)
	}
	var reads [][]byte
	for i := 0; i < len(all); {
		k := min(1+i%3, len(all)-i)
		var r []byte
		for _, c := range all[i : i+k] {
			r = append(r, c...)
		}
		reads = append(reads, r)
		i += k
	}
	return reads, len(all)
}

// BenchmarkFeedByteByByte is the worst case for the carry-over buffer.
func BenchmarkFeedByteByByte(b *testing.B) {
	reads, _ := chatStream(50, 3)
	var body []byte
	for _, r := range reads {
		body = append(body, r...)
	}
	opts := Options{ContentType: "text/event-stream"}
	m := New(opts)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	cpu0 := cpubench.Now()
	defer func() { cpubench.Report(b, cpu0, 0) }()
	for i := 0; i < b.N; i++ {
		m.Reset(opts)
		for j := range body {
			m.Feed(body[j:j+1], Duration(j)*Microsecond)
		}
		m.End(Second, StatusComplete, 200)
	}
}

// BenchmarkSummary is SummaryInto (reused) and Summary (fresh) of a finished
// 1000-token stream with a few stalls and busy intervals.
func BenchmarkSummary(b *testing.B) {
	reads, _ := chatStream(1000, 3)
	m := New(Options{ContentType: "text/event-stream"})
	at := Duration(0)
	for i, r := range reads {
		at += 20 * Millisecond
		if i%97 == 0 {
			at += 300 * Millisecond
			m.MarkBusy(at-250*Millisecond, at-50*Millisecond)
		}
		m.Feed(r, at)
	}
	m.End(at+Millisecond, StatusComplete, 200)
	b.Run("into", func(b *testing.B) {
		var s Summary
		m.SummaryInto(&s)
		b.ReportAllocs()
		cpu0 := cpubench.Now()
		for i := 0; i < b.N; i++ {
			m.SummaryInto(&s)
		}
		cpubench.Report(b, cpu0, 0)
	})
	b.Run("fresh", func(b *testing.B) {
		b.ReportAllocs()
		cpu0 := cpubench.Now()
		for i := 0; i < b.N; i++ {
			_ = m.Summary()
		}
		cpubench.Report(b, cpu0, 0)
	})
}

// apiChatChunk is one OpenAI chat content chunk, as the API sends it.
const apiChatChunk = `{"id":"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_06737a9306","choices":[{"index":0,"delta":{"content":" tok42"},"logprobs":null,"finish_reason":null}],"usage":null}`

// BenchmarkClassifyChat is the JSON scan of one OpenAI chat chunk.
func BenchmarkClassifyChat(b *testing.B) {
	data := []byte(apiChatChunk)
	m := New(Options{ContentType: "text/event-stream"})
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	cpu0 := cpubench.Now()
	for i := 0; i < b.N; i++ {
		if !m.openAIChat(data) {
			b.Fatal("not content")
		}
	}
	cpubench.Report(b, cpu0, 0)
}
