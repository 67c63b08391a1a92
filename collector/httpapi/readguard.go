package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"path"
	"strings"
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

// ReadAccess says who may use the read side of a listener.
type ReadAccess int

const (
	// ReadToken: requests carrying the token, as "Authorization: Bearer
	// TOKEN" or as the password of basic auth (any user name), so a
	// browser can open the dashboard.
	ReadToken ReadAccess = iota
	// ReadLoopback: requests from a loopback peer that no proxy forwarded
	// (no Forwarded, X-Forwarded-For or X-Real-IP header): a reverse proxy
	// on the same host would otherwise make every client look local.
	ReadLoopback
	// ReadNowhere: no one; the read side is served on another listener,
	// named in the refusal.
	ReadNowhere
)

// ReadGuard wraps next so the read side (IsReadPath) answers only as access
// allows; every other path goes to next untouched. token is used with
// ReadToken and compared in constant time; elsewhere names the listener
// that serves the read side with ReadNowhere.
func ReadGuard(next http.Handler, access ReadAccess, token, elsewhere string) http.Handler {
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !IsReadPath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		switch access {
		case ReadToken:
			if got, ok := readCredential(r); ok {
				sum := sha256.Sum256([]byte(got))
				if subtle.ConstantTimeCompare(sum[:], want[:]) == 1 {
					next.ServeHTTP(w, r)
					return
				}
			}
			w.Header().Set("WWW-Authenticate", `Basic realm="itlmon", charset="UTF-8"`)
			http.Error(w, "read token required (Authorization: Bearer TOKEN, or basic auth with the token as password)", http.StatusUnauthorized)
		case ReadLoopback:
			if loopbackPeer(r) {
				next.ServeHTTP(w, r)
				return
			}
			http.Error(w, "the read side is served to local clients only: start the collector with --read-token to serve it here", http.StatusForbidden)
		default:
			http.Error(w, "the read side is not served on this listener: it is on "+elsewhere+" (local clients), or start the collector with --read-token", http.StatusForbidden)
		}
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

// loopbackPeer reports whether the TCP peer is a loopback address and the
// request does not say it was forwarded.
func loopbackPeer(r *http.Request) bool {
	for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Real-IP"} {
		if r.Header.Get(h) != "" {
			return false
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
