package httpapi

import (
	"net/http"
	"path"
	"strings"
)

// DashboardCSP is the Content-Security-Policy of the dashboard and its
// files. The dashboard shows strings that anyone holding a site's public
// key can write (model, release, API origin and path, route) and values
// from its URL; it builds its DOM from text nodes, and this policy is the
// second line behind that:
//
//   - scripts only from the collector's own files (no inline script, no
//     event handler attributes, no eval), no plugins, no <base>, no form
//     submission, not framed by any page;
//   - styles only from its own style sheets (uPlot positions its elements
//     through element.style, which the CSSOM allows without
//     'unsafe-inline'; style attributes in markup are refused);
//   - no images but data: URLs (the page's empty icon), requests only to
//     the collector itself;
//   - Trusted Types with no policy: a string assigned to innerHTML (or any
//     other HTML or script sink) throws, in the browsers that enforce it.
const DashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'; object-src 'none'; " +
	"require-trusted-types-for 'script'; trusted-types 'none'"

// apiCSP goes with the JSON answers: a document made of one never runs
// anything, even when opened on its own.
const apiCSP = "default-src 'none'; frame-ancestors 'none'; sandbox"

// isDashboardPath reports whether a request path is the dashboard's page or
// one of its files (cleaned first, as IsReadPath).
func isDashboardPath(p string) bool {
	p = path.Clean("/" + p)
	return p == "/dashboard" || strings.HasPrefix(p, "/dashboard/")
}

// pageHeaders sets, on the dashboard's responses, its Content-Security-Policy
// and the headers that go with it: no referrer leaves the page (its URL names
// the site and filters), it opens no window that keeps a handle on it, and
// its files are not loaded by other sites. Other paths pass untouched.
func pageHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isDashboardPath(r.URL.Path) {
			h := w.Header()
			h.Set("Content-Security-Policy", DashboardCSP)
			h.Set("X-Content-Type-Options", "nosniff")
			h.Set("Referrer-Policy", "no-referrer")
			h.Set("X-Frame-Options", "DENY")
			h.Set("Cross-Origin-Opener-Policy", "same-origin")
			h.Set("Cross-Origin-Resource-Policy", "same-origin")
		}
		next.ServeHTTP(w, r)
	})
}
