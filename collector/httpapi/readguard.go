package httpapi

import (
	"net"
	"net/http"
	"path"
	"strings"

	"github.com/itlmon/itlmon/collector/secret"
)

// IsReadPath reports whether a request path belongs to the read side: what
// the collector stored and its own state (/api/..., /metrics and the
// dashboard), as opposed to ingest (/v1/...), the browser module's assets,
// the landing and demo pages, /healthz and /readyz, which stay public. The
// path is cleaned first, so no spelling of a read path escapes.
func IsReadPath(p string) bool {
	p = path.Clean("/" + p)
	return p == "/metrics" || p == "/api" || strings.HasPrefix(p, "/api/") ||
		p == "/dashboard" || strings.HasPrefix(p, "/dashboard/")
}

// ReadPolicy says who may use the read side on one listener. The zero
// value admits no one.
type ReadPolicy struct {
	// Token, when set, admits requests carrying it, as "Authorization:
	// Bearer TOKEN" or as the password of basic auth (any user name, so a
	// browser can open the dashboard). Compared in constant time.
	Token secret.Token
	// Local admits requests that look local: HTTP/1.1 or later, a
	// loopback peer, no Forwarded, X-Forwarded-For, X-Real-IP,
	// X-Forwarded-Host or X-Forwarded-Proto header, and a Host that is a
	// loopback name or address. That is not proof: a reverse proxy on the
	// same host that adds no header and sends the upstream's own Host
	// (nginx's default proxy_pass does both; with proxy_http_version 1.1
	// it speaks 1.1 too) looks just the same. So Local belongs on a
	// loopback listener no proxy is pointed at (the read side's own), or to
	// the demo that asks for it.
	Local bool
}

// ReadGuard wraps next so the read side (IsReadPath) answers only as p
// allows; every other path goes to next untouched. A refusal is 401 with a
// basic auth challenge when a token would be taken, else 403.
func ReadGuard(next http.Handler, p ReadPolicy) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !IsReadPath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		if p.Local && localRequest(r) {
			next.ServeHTTP(w, r)
			return
		}
		if !p.Token.IsZero() {
			if got, ok := readCredential(r); ok && p.Token.Equal(got) {
				next.ServeHTTP(w, r)
				return
			}
			w.Header().Set("WWW-Authenticate", `Basic realm="itlmon", charset="UTF-8"`)
			http.Error(w, "read token required (Authorization: Bearer TOKEN, or basic auth with the token as password)", http.StatusUnauthorized)
			return
		}
		http.Error(w, "the read side (dashboard, /api/, /metrics) is not served on this listener: "+
			"it is on the collector's loopback read listener (--read-addr), or start the collector with --read-token", http.StatusForbidden)
	})
}

// readCredential returns the token of a Bearer Authorization header, or
// the password of a Basic one.
func readCredential(r *http.Request) (string, bool) {
	if _, pass, ok := r.BasicAuth(); ok {
		return pass, true
	}
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// localRequest reports whether r looks like it comes from this host and no
// proxy (see ReadPolicy.Local): HTTP/1.1 or later (nginx speaks HTTP/1.0 to
// its upstreams unless told otherwise; browsers and curl speak 1.1), a
// loopback peer, no forwarding header, and a loopback Host (which also
// refuses a page whose name was rebound to 127.0.0.1 by DNS: its Host is
// its own name).
func localRequest(r *http.Request) bool {
	if !r.ProtoAtLeast(1, 1) {
		return false
	}
	for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Real-IP", "X-Forwarded-Host", "X-Forwarded-Proto"} {
		if len(r.Header.Values(h)) > 0 {
			return false
		}
	}
	return loopbackHostPort(r.RemoteAddr, true) && loopbackHostPort(r.Host, false)
}

// loopbackHostPort reports whether hostport (its port optional unless
// needPort) names a loopback address or localhost.
func loopbackHostPort(hostport string, needPort bool) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		if needPort {
			return false
		}
		host = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
