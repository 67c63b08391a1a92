package meter

import "unicode/utf8"

// The meter imports neither strings nor bytes: either one links package
// unicode, whose init builds its case-folding maps (3 KB of brotli in the
// browser module). indexByte, indexByteString and hasPrefix are the few
// functions of theirs it needs.

// indexByte is bytes.IndexByte.
func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// indexByteString is strings.IndexByte.
func indexByteString(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// hasPrefix is strings.HasPrefix.
func hasPrefix(s, prefix string) bool {
	return len(s) >= len(prefix) && s[:len(prefix)] == prefix
}

// trimSpace is strings.TrimSpace and equalFold is strings.EqualFold for a
// lower-case ASCII t, without the Unicode tables those pull into the browser
// module (isSpace is unicode.IsSpace: the White_Space property).
func trimSpace(s string) string {
	for s != "" {
		r, n := utf8.DecodeRuneInString(s)
		if !isSpace(r) {
			break
		}
		s = s[n:]
	}
	for s != "" {
		r, n := utf8.DecodeLastRuneInString(s)
		if !isSpace(r) {
			break
		}
		s = s[:len(s)-n]
	}
	return s
}

func isSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000:
		return true
	}
	return 0x2000 <= r && r <= 0x200A
}

// equalFold reports whether s equals the lower-case ASCII t under Unicode
// simple case folding: ASCII letters in either case, and the two non-ASCII
// runes that fold to ASCII, U+212A KELVIN SIGN (k) and U+017F LONG S (s).
func equalFold(s, t string) bool {
	for i := 0; i < len(t); i++ {
		if s == "" {
			return false
		}
		r, n := rune(s[0]), 1
		if r >= utf8.RuneSelf {
			r, n = utf8.DecodeRuneInString(s)
		}
		s = s[n:]
		c := rune(t[i])
		switch {
		case r == c, 'A' <= r && r <= 'Z' && r+('a'-'A') == c:
		case r == 0x212A && c == 'k', r == 0x017F && c == 's':
		default:
			return false
		}
	}
	return s == ""
}

var formatNames = [...]string{
	FormatUnknown:         "unknown",
	FormatOpenAIChat:      "openai-chat",
	FormatOpenAIResponses: "openai-responses",
	FormatAnthropic:       "anthropic",
	FormatVercelAI:        "vercel-ai",
	FormatOllama:          "ollama",
	FormatSSE:             "sse",
	FormatNDJSON:          "ndjson",
	FormatText:            "text",
	FormatCohere:          "cohere",
	FormatGemini:          "gemini",
	FormatTGI:             "tgi",
	FormatVercelAIData:    "vercel-ai-data",
}

// String returns the format's short name ("openai-chat", "anthropic", ...).
func (f Format) String() string {
	if int(f) < len(formatNames) {
		return formatNames[f]
	}
	return "invalid"
}

var statusNames = [...]string{
	StatusOpen:         "open",
	StatusComplete:     "complete",
	StatusAborted:      "aborted",
	StatusNetworkError: "network-error",
	StatusHTTPError:    "http-error",
}

// String returns the status's short name.
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "invalid"
}

var causeNames = [...]string{
	CauseNone:    "none",
	CauseUnknown: "unknown",
	CauseNetwork: "network",
	CausePage:    "page",
	CauseOrigin:  "origin",
}

// String returns the cause's short name.
func (c Cause) String() string {
	if int(c) < len(causeNames) {
		return causeNames[c]
	}
	return "invalid"
}
