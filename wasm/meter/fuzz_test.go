package meter

import (
	"testing"
)

// FuzzFeed feeds arbitrary bodies under every framing, once in one read and
// once split at fuzzed points: nothing may panic, the counts must agree and
// the summary must stay consistent.
func FuzzFeed(f *testing.F) {
	for _, fx := range loadFixtures(f) {
		f.Add(fx.body, uint8(0), uint64(0x9e3779b97f4a7c15))
	}
	f.Add([]byte("data: a\r\n\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n"), uint8(1), uint64(7))
	f.Add([]byte("{\"done\":true,\"response\":\"\",\"eval_count\":3}\n{"), uint8(2), uint64(3))
	f.Add([]byte("data: {\"type\":\"text-delta\",\"delta\":\"x\"}\n\ndata: {\"type\":\"finish\"}\n\ndata: [DONE]\r\n\r\n"), uint8(0), uint64(11))
	cts := []string{"", "text/event-stream", "application/x-ndjson", "text/plain"}
	f.Fuzz(func(t *testing.T, body []byte, ctSel uint8, seed uint64) {
		ct := cts[int(ctSel)%len(cts)]
		whole := New(Options{ContentType: ct})
		whole.Feed(body, Millisecond)
		whole.End(2*Millisecond, StatusComplete, 200)
		a := whole.Summary()

		split := New(Options{ContentType: ct})
		for i, at := 0, Duration(0); i < len(body); {
			seed = seed*6364136223846793005 + 1442695040888963407
			n := 1 + int(seed>>59) // 1..32 bytes
			n = min(n, len(body)-i)
			split.Feed(body[i:i+n], at)
			i += n
			at += Duration(seed>>40&0xffff) * Microsecond
		}
		split.End(Hour, StatusComplete, 200)
		b := split.Summary()

		for _, s := range []Summary{a, b} {
			if s.ContentEvents > s.Events || s.Events < 0 || s.Bytes != int64(len(body)) {
				t.Fatalf("inconsistent summary: %d content of %d events, %d bytes of %d", s.ContentEvents, s.Events, s.Bytes, len(body))
			}
			if s.ITL.Count() != uint64(max(s.ContentEvents-1, 0)) {
				t.Fatalf("ITL has %d samples for %d content events", s.ITL.Count(), s.ContentEvents)
			}
			if len(s.Timeline)+s.TimelineDropped != s.Events {
				t.Fatalf("timeline %d + dropped %d != %d events", len(s.Timeline), s.TimelineDropped, s.Events)
			}
		}
		if a.Format == FormatText || b.Format == FormatText {
			return // one read = one event: the counts depend on the split by definition
		}
		if a.Format != b.Format || a.Events != b.Events || a.ContentEvents != b.ContentEvents ||
			a.Tokens != b.Tokens || a.TokensReported != b.TokensReported || a.Terminal != b.Terminal {
			t.Fatalf("split changed the result: %v %d/%d tokens %d terminal %v vs %v %d/%d tokens %d terminal %v",
				a.Format, a.ContentEvents, a.Events, a.Tokens, a.Terminal, b.Format, b.ContentEvents, b.Events, b.Tokens, b.Terminal)
		}
		for i := range a.Timeline {
			if a.Timeline[i].Content != b.Timeline[i].Content {
				t.Fatalf("event %d content differs with the split", i)
			}
		}
	})
}
