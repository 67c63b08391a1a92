package httpapi

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/itlmon/itlmon/web"
)

// TestDashboardHeaders: the dashboard's page and files carry its
// Content-Security-Policy and the headers beside it (a redirect and a 404
// under /dashboard too); the browser module's files (loaded by other sites) and the
// landing page do not; the API's JSON answers carry nosniff and a policy
// that runs nothing.
func TestDashboardHeaders(t *testing.T) {
	h, err := New(Config{Static: web.Static(), Dist: web.Dist()})
	if err != nil {
		t.Fatal(err)
	}
	RegisterDashboard(h, DashboardConfig{}) // no engine: answers 503, in JSON
	want := map[string]string{
		"Content-Security-Policy":      DashboardCSP,
		"X-Content-Type-Options":       "nosniff",
		"Referrer-Policy":              "no-referrer",
		"X-Frame-Options":              "DENY",
		"Cross-Origin-Opener-Policy":   "same-origin",
		"Cross-Origin-Resource-Policy": "same-origin",
	}
	for _, p := range []string{"/dashboard/", "/dashboard/dashboard.js", "/dashboard/dashboard.css", "/dashboard/vendor/uplot/uPlot.iife.min.js",
		"/dashboard", "/dashboard/index.html", "/dashboard/missing.js"} {
		rec := get(t, h, p)
		if rec.Code != 200 && rec.Code != 301 && rec.Code != 404 {
			t.Errorf("%s: status %d", p, rec.Code)
		}
		for k, v := range want {
			if got := rec.Header().Get(k); got != v {
				t.Errorf("%s: %s = %q, want %q", p, k, got, v)
			}
		}
	}
	for _, p := range []string{"/itl.js", "/"} {
		if got := get(t, h, p).Header().Get("Content-Security-Policy"); got != "" {
			t.Errorf("%s: Content-Security-Policy %q, want none (not the dashboard)", p, got)
		}
	}
	rec := get(t, h, "/api/summary?site=x")
	if rec.Header().Get("Content-Type") != "application/json" || rec.Header().Get("X-Content-Type-Options") != "nosniff" ||
		rec.Header().Get("Content-Security-Policy") != apiCSP {
		t.Errorf("/api/summary: %d, headers %v; want JSON with nosniff and %q", rec.Code, rec.Header(), apiCSP)
	}
}

// TestDashboardFilesFitCSP reads the dashboard's files as served: nothing
// in them needs what DashboardCSP refuses (an inline script, an event
// handler or style attribute, a script or style from elsewhere, an HTML
// string sink in the script).
func TestDashboardFilesFitCSP(t *testing.T) {
	page, err := fs.ReadFile(web.Static(), "dashboard/index.html")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct{ what, re string }{
		{"an inline script", `<script(\s[^>]*)?>\s*[^<\s]`},
		{"a script without src", `<script(\s+(type|defer|async)(="[^"]*")?)*\s*>`},
		{"an event handler attribute", `\son[a-z]+\s*=`},
		{"a style attribute", `\sstyle\s*=`},
		{"a <style> element", `<style[\s>]`},
		{"a javascript: URL", `(?i)javascript:`},
		{"a script or style sheet from elsewhere", `<(script|link)\s[^>]*(src|href)="(https?:)?//`},
	} {
		if m := regexp.MustCompile(bad.re).Find(page); m != nil {
			t.Errorf("dashboard/index.html has %s: %q", bad.what, m)
		}
	}
	script, err := fs.ReadFile(web.Static(), "dashboard/dashboard.js")
	if err != nil {
		t.Fatal(err)
	}
	code := regexp.MustCompile(`(?m)^\s*//.*$`).ReplaceAll(script, nil) // comments may name what the code avoids
	for _, sink := range []string{".innerHTML", ".outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", ".setAttribute(\"style\"", "createContextualFragment"} {
		if strings.Contains(string(code), sink) {
			t.Errorf("dashboard.js uses %s", sink)
		}
	}
}
