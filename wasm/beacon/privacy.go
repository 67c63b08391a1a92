package beacon

// StripQuery splits a URL into its origin and path and drops everything a
// record must never carry: the query, the fragment and any user:password@.
// It is plain string code (net/url would add to the browser module).
//
//	"https://u:p@Chat.Example.com:443/c/42?q=secret#x" -> "https://chat.example.com", "/c/42"
//	"http://127.0.0.1:8080?x"                          -> "http://127.0.0.1:8080", "/"
//	"/api/chat?stream=1"                               -> "", "/api/chat"
//	"data:text/plain,hello"                            -> "data:", ""
//
// The scheme and host are lowercased and a default port (80 for http and ws,
// 443 for https and wss) is dropped, as location.origin does. A URL without
// "//" after its scheme (data:, blob:, about:) keeps only its scheme: its
// remainder may be content. A relative URL has an empty origin.
func StripQuery(url string) (origin, path string) {
	for i := 0; i < len(url); i++ {
		if url[i] == '?' || url[i] == '#' {
			url = url[:i]
			break
		}
	}
	scheme, rest := "", url
	if i := schemeEnd(url); i > 0 {
		scheme, rest = lower(url[:i]), url[i+1:]
		if len(rest) < 2 || rest[0] != '/' || rest[1] != '/' {
			return scheme + ":", ""
		}
	}
	if len(rest) < 2 || rest[0] != '/' || rest[1] != '/' {
		return "", rest // relative: a path
	}
	rest = rest[2:]
	end := len(rest)
	for i := 0; i < len(rest); i++ {
		if rest[i] == '/' || rest[i] == '\\' {
			end = i
			break
		}
	}
	host, path := rest[:end], rest[end:]
	for i := len(host) - 1; i >= 0; i-- {
		if host[i] == '@' {
			host = host[i+1:]
			break
		}
	}
	host = lower(host)
	if p := portStart(host); p >= 0 {
		port := host[p+1:]
		if port == "" || (port == "80" && (scheme == "http" || scheme == "ws")) ||
			(port == "443" && (scheme == "https" || scheme == "wss")) {
			host = host[:p]
		}
	}
	if path == "" {
		path = "/"
	}
	if scheme == "" {
		return "//" + host, path
	}
	return scheme + "://" + host, path
}

// schemeEnd returns the index of the ':' ending a URL scheme
// (ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )), or -1.
func schemeEnd(u string) int {
	for i := 0; i < len(u); i++ {
		c := u[i]
		switch {
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		case i > 0 && c == ':':
			return i
		default:
			return -1
		}
	}
	return -1
}

// portStart returns the index of the ':' before a port in host, or -1
// (an IPv6 literal's colons are inside brackets).
func portStart(host string) int {
	for i := len(host) - 1; i >= 0; i-- {
		switch host[i] {
		case ':':
			return i
		case ']':
			return -1
		}
	}
	return -1
}

// lower lowercases ASCII letters, without allocating when there are none.
func lower(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// RedactID replaces an id-like path segment.
const RedactID = ":id"

// RedactPath replaces each id-like segment of a URL path (see IDSegment) with
// RedactID, keeping the slashes, so that conversation and thread ids are
// neither sent nor stored and routes group:
//
//	"/c/550e8400-e29b-41d4-a716-446655440000/messages/12345" -> "/c/:id/messages/:id"
//	"/v1/chat/completions"                                   -> "/v1/chat/completions"
//
// It is the one rule of every vantage point: the browser's loader applies
// the same one (web/static/itl.js, ID_SEGMENT, checked against the same
// cases, testdata/redact_paths.txt), and the origin middleware applies this
// function. Give it a path, never a query. It does not allocate when nothing
// is replaced.
func RedactPath(path string) string {
	var b []byte
	start := 0
	for i := 0; i <= len(path); i++ {
		if i < len(path) && path[i] != '/' {
			continue
		}
		if seg := path[start:i]; IDSegment(seg) {
			if b == nil {
				b = make([]byte, 0, len(path))
				b = append(b, path[:start]...)
			}
			b = append(b, RedactID...)
		} else if b != nil {
			b = append(b, seg...)
		}
		if b != nil && i < len(path) {
			b = append(b, '/')
		}
		start = i + 1
	}
	if b == nil {
		return path
	}
	return string(b)
}

// IDSegment reports whether a path segment looks like an id: a UUID
// (8-4-4-4-12 hex digits, any case), a number of 3 or more ASCII digits, or a
// token of 16 or more ASCII letters, digits, '_' and '-' holding at least one
// digit. It matches exactly what itl.js's ID_SEGMENT regular expression
// matches, /^(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|
// \d{3,}|(?=[\w-]*\d)[\w-]{16,})$/i, written out by hand because package
// regexp would add to the browser module.
func IDSegment(seg string) bool {
	if isUUID(seg) {
		return true
	}
	digits, hasDigit := true, false
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		switch {
		case '0' <= c && c <= '9':
			hasDigit = true
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || c == '-':
			digits = false
		default:
			return false // neither a number nor a token
		}
	}
	return digits && len(seg) >= 3 || hasDigit && len(seg) >= 16
}

// isUUID reports whether s is 8-4-4-4-12 hex digits.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}
