package meter

import (
	"strings"
	"testing"
	"unicode"
)

// TestASCIIHelpersMatchStrings: trimSpace, isSpace and equalFold are
// strings.TrimSpace, unicode.IsSpace and strings.EqualFold (for the lower-case
// ASCII media types framingFor compares with).
func TestASCIIHelpersMatchStrings(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if isSpace(r) != unicode.IsSpace(r) {
			t.Fatalf("isSpace(%U) = %v, unicode.IsSpace %v", r, isSpace(r), unicode.IsSpace(r))
		}
	}
	targets := []string{"application/octet-stream", "text/event-stream", "application/x-ndjson", "application/jsonl",
		"application/stream+json", "application/json", "k", "s", ""}
	inputs := []string{"", " ", "Text/Event-Stream", "TEXT/EVENT-STREAM", "text/event-\u017ftream", "application/x-ndjson",
		"application/x-ndjso", "application/x-ndjsonn", "\u212a", "K", "k", "S", "\u017f", "s", "\xff", "text/event-stream\xff",
		"APPLICATION/JSON", "application/json ", "\u00a0text/event-stream\u3000", " \t\r\ntext/event-stream\u0085",
		"text/event-stream\u200b", "\xe2\x80", "application/stream+JSON", "text/event\u2010stream", "Ｋ"}
	for _, in := range inputs {
		if got, want := trimSpace(in), strings.TrimSpace(in); got != want {
			t.Errorf("trimSpace(%q) = %q, want %q", in, got, want)
		}
		for _, tg := range targets {
			for _, s := range []string{in, strings.TrimSpace(in), tg, strings.ToUpper(tg), strings.ReplaceAll(tg, "s", "\u017f"), strings.ReplaceAll(tg, "k", "\u212a")} {
				if got, want := equalFold(s, tg), strings.EqualFold(s, tg); got != want {
					t.Errorf("equalFold(%q, %q) = %v, want %v", s, tg, got, want)
				}
			}
		}
	}
}

func FuzzEqualFold(f *testing.F) {
	f.Add("Text/Event-\u017ftream", "  x\u00a0")
	f.Fuzz(func(t *testing.T, s, pad string) {
		if got, want := trimSpace(pad+s+pad), strings.TrimSpace(pad+s+pad); got != want {
			t.Fatalf("trimSpace(%q) = %q, want %q", pad+s+pad, got, want)
		}
		for _, tg := range []string{"text/event-stream", "application/x-ndjson", "ks"} {
			if got, want := equalFold(s, tg), strings.EqualFold(s, tg); got != want {
				t.Fatalf("equalFold(%q, %q) = %v, want %v", s, tg, got, want)
			}
		}
	})
}
