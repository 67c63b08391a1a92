package meter

import (
	"bytes"
	"strings"
	"testing"
	"unicode"
)

// TestIndexHelpersMatchStd: indexByte, indexByteString and hasPrefix are
// bytes.IndexByte, strings.IndexByte and strings.HasPrefix.
func TestIndexHelpersMatchStd(t *testing.T) {
	inputs := []string{"", ":", "a", "data:", "data: {}", "\\x00\xff:", "event", "text/event-stream; charset=utf-8", ";",
		"\x00", strings.Repeat("x", 1000) + ":", "é:ü", "\xff\xfe;"}
	for _, in := range inputs {
		for c := range 256 {
			if got, want := indexByte([]byte(in), byte(c)), bytes.IndexByte([]byte(in), byte(c)); got != want {
				t.Fatalf("indexByte(%q, %#x) = %d, want %d", in, c, got, want)
			}
			if got, want := indexByteString(in, byte(c)), strings.IndexByte(in, byte(c)); got != want {
				t.Fatalf("indexByteString(%q, %#x) = %d, want %d", in, c, got, want)
			}
		}
		for _, p := range inputs {
			if got, want := hasPrefix(in, p), strings.HasPrefix(in, p); got != want {
				t.Fatalf("hasPrefix(%q, %q) = %v, want %v", in, p, got, want)
			}
		}
	}
	if got := indexByte(nil, 0); got != -1 {
		t.Fatalf("indexByte(nil, 0) = %d, want -1", got)
	}
}

func FuzzIndexHelpers(f *testing.F) {
	f.Add("data: x", "data:", byte(':'))
	f.Fuzz(func(t *testing.T, s, p string, c byte) {
		if got, want := indexByte([]byte(s), c), bytes.IndexByte([]byte(s), c); got != want {
			t.Fatalf("indexByte(%q, %q) = %d, want %d", s, c, got, want)
		}
		if got, want := indexByteString(s, c), strings.IndexByte(s, c); got != want {
			t.Fatalf("indexByteString(%q, %q) = %d, want %d", s, c, got, want)
		}
		if got, want := hasPrefix(s, p), strings.HasPrefix(s, p); got != want {
			t.Fatalf("hasPrefix(%q, %q) = %v, want %v", s, p, got, want)
		}
	})
}

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
