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
