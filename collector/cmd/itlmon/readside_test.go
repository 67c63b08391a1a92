package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/itlmon/itlmon/collector/internal/itlmontest"
	"github.com/itlmon/itlmon/collector/secret"
	"github.com/itlmon/itlmon/collector/server"
)

// TestReadSideAccess runs the real program: the read side (/api/*,
// /metrics, /dashboard/) answers only as its configuration allows, while
// ingest and the module's assets stay public.
func TestReadSideAccess(t *testing.T) {
	t.Parallel()
	const token = "read-token-0123456789"
	status := func(t *testing.T, url string, hdr ...string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			if hdr[i] == "Host" {
				req.Host = hdr[i+1]
				continue
			}
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	public := func(t *testing.T, base string) {
		t.Helper()
		if got := status(t, base+"/itl.js"); got != 200 {
			t.Errorf("/itl.js = %d, want 200", got)
		}
		if got := status(t, base+"/healthz"); got != 200 {
			t.Errorf("/healthz = %d, want 200", got)
		}
		// Ingest answers for itself: an unknown site is 404, not a refusal of the guard.
		if got := status(t, base+"/v1/ws?site=nope", "Origin", itlmontest.PageOrigin); got != 404 {
			t.Errorf("/v1/ws = %d, want 404 from ingest", got)
		}
	}
	reads := []string{"/api/sites", "/metrics", "/dashboard/", "/api/streams?site=test", "/api/health"}

	t.Run("token", func(t *testing.T) {
		m := itlmontest.StartMain(t, func(c *server.Config) { c.ReadToken = secret.New(token) })
		if m.ReadURL() != m.URL() {
			t.Fatalf("read listener %s started with a token and no --read-addr", m.ReadURL())
		}
		public(t, m.URL())
		for _, p := range reads {
			if got := status(t, m.URL()+p); got != 401 {
				t.Errorf("%s without the token = %d, want 401", p, got)
			}
			if got := status(t, m.URL()+p, "Authorization", "Bearer "+token); got != 200 {
				t.Errorf("%s with the Bearer token = %d, want 200", p, got)
			}
			req, _ := http.NewRequest("GET", m.URL()+p, nil)
			req.SetBasicAuth("me", token)
			if got := status(t, m.URL()+p, "Authorization", req.Header.Get("Authorization")); got != 200 {
				t.Errorf("%s with basic auth = %d, want 200", p, got)
			}
		}
	})
	// No token, a loopback --addr: what a reverse proxy on the same host
	// forwards to. The main listener serves no read path to anyone, not
	// even a loopback peer without forwarding headers (which a proxy's
	// request is too); the read listener serves local clients.
	t.Run("default", func(t *testing.T) {
		m := itlmontest.StartMain(t, nil)
		if m.ReadURL() == m.URL() {
			t.Fatal("no read listener without a token")
		}
		public(t, m.URL())
		for _, p := range reads {
			if got := status(t, m.URL()+p); got != 403 {
				t.Errorf("%s on the main listener from loopback = %d, want 403", p, got)
			}
			if got := status(t, m.ReadURL()+p); got != 200 {
				t.Errorf("%s on the read listener = %d, want 200", p, got)
			}
			if got := status(t, m.ReadURL()+p, "X-Forwarded-For", "203.0.113.9"); got != 403 {
				t.Errorf("%s forwarded to the read listener = %d, want 403", p, got)
			}
		}
	})
	// The demo's convenience: one port, local clients only.
	t.Run("demo", func(t *testing.T) {
		m := itlmontest.StartMain(t, func(c *server.Config) { c.Demo = true })
		if m.ReadURL() != m.URL() {
			t.Fatalf("the demo started a read listener %s", m.ReadURL())
		}
		public(t, m.URL())
		for _, p := range reads {
			if got := status(t, m.URL()+p); got != 200 {
				t.Errorf("%s from loopback = %d, want 200", p, got)
			}
			if got := status(t, m.URL()+p, "X-Forwarded-For", "203.0.113.9"); got != 403 {
				t.Errorf("%s forwarded by a proxy = %d, want 403", p, got)
			}
			if got := status(t, m.URL()+p, "Host", "rum.example.com"); got != 403 {
				t.Errorf("%s with a public Host = %d, want 403", p, got)
			}
		}
	})
	// A main listener that is not loopback is not started here: tests
	// listen on loopback only. httpapi's guard table covers its policy.
}

func TestReadSideConfig(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--read-token", "short"}, "at least 16"},
		{[]string{"--read-addr", "0.0.0.0:8081"}, "loopback"},
		{[]string{"--read-addr", "192.0.2.1:8081"}, "loopback"},
		{[]string{"--read-addr", "localhost:8081", "--read-token", "0123456789abcdef"}, ""},
		{[]string{"--read-addr", "[::1]:8081"}, ""},
	} {
		c := server.DefaultConfig()
		err := parseServeFlags(&c, &strings.Builder{}, append([]string{"--demo", "--clickhouse", "clickhouse://db:9000/x"}, tc.args...), func(string) string { return "" })
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.wantErr)
		}
	}
	c := server.DefaultConfig()
	var usage strings.Builder
	parseServeFlags(&c, &usage, []string{"--help"}, func(k string) string {
		if k == "ITLMON_READ_TOKEN" {
			return "secret-token-0123456789"
		}
		return ""
	})
	if strings.Contains(usage.String(), "secret-token") || !strings.Contains(usage.String(), "read-token") {
		t.Errorf("usage shows the token or lacks the flag:\n%s", usage.String())
	}
	if c.ReadToken.Reveal() != "secret-token-0123456789" {
		t.Errorf("ITLMON_READ_TOKEN not read")
	}
}

// TestServeOTLP: serve with --otlp-endpoint starts the exporter, which sends
// nothing for an empty rollup, and Close stops it (collector/otlp's tests
// cover what it sends: a minute is only exported once it has closed and
// settled, too late for this test to wait for).
func TestServeOTLP(t *testing.T) {
	t.Parallel()
	var posts atomic.Int64
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { posts.Add(1) }))
	defer rc.Close()
	m := itlmontest.StartMain(t, func(c *server.Config) { c.OTLPEndpoint, c.OTLPInterval = rc.URL, time.Second })
	if body := itlmontest.GetText(t, m.ReadURL()+"/metrics"); !strings.Contains(body, "itlmon_otlp_exported_minutes_total") {
		t.Error("/metrics has no itlmon_otlp_exported_minutes_total")
	}
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := posts.Load(); n != 0 {
		t.Errorf("%d exports of an empty rollup, want none", n)
	}
}
