package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/enrich"
	"github.com/itlmon/itlmon/collector/internal/itlmontest"
	"github.com/itlmon/itlmon/collector/server"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// realGeoIP is the installed default database (make deps-geoip) or the one
// ITLMON_GEOIP names; skips without one unless ITLMON_REQUIRE_REAL=1.
func realGeoIP(t testing.TB) string {
	t.Helper()
	p := os.Getenv("ITLMON_GEOIP")
	if p == "" || p == "none" {
		p = enrich.DefaultGeoIPPath()
	}
	if p == "" {
		if os.Getenv("ITLMON_REQUIRE_REAL") == "1" {
			t.Fatal("no GeoIP database: run `make deps-geoip` (ITLMON_REQUIRE_REAL=1)")
		}
		t.Skip("no GeoIP database: run `make deps-geoip`")
	}
	return p
}

// lockedBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServeDefaultGeoIP: `serve` without --geoip opens the database `make
// deps-geoip` links at the well-known cache path, says which one and when it
// was built, and stores country and ISO 3166-2 region for the client address
// a trusted proxy forwards; the address itself is neither stored nor logged.
func TestServeDefaultGeoIP(t *testing.T) {
	lib := itlmontest.ChdbLib(t)
	db := realGeoIP(t)
	cache := t.TempDir()
	if err := os.MkdirAll(filepath.Join(cache, "itlmon"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(db, filepath.Join(cache, "itlmon", "geoip")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("ITLMON_GEOIP", "")

	m := server.NewMain()
	args := []string{"--addr", "127.0.0.1:0", "--data", t.TempDir(), "--chdb-lib", lib, "--site", "test=" + itlmontest.PageOrigin,
		"--trust-proxy", "--conn-rate", "0", "--site-rate", "0"}
	if err := parseServeFlags(&m.Config, io.Discard, args, os.Getenv); err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(cache, "itlmon", "geoip"); m.Config.GeoIP != want {
		t.Fatalf("default --geoip = %q, want %q", m.Config.GeoIP, want)
	}
	var logs lockedBuffer
	log := zerolog.New(&logs)
	m.Log = &log
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		m.Close()
		t.Fatalf("Run: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})

	// The start-up log names each file and its build date.
	var files int
	for line := range strings.Lines(logs.String()) {
		var l struct{ Message, File, Built string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Message == "geoip database" {
			if _, err := time.Parse(time.DateOnly, l.Built); err != nil || !strings.HasPrefix(l.File, filepath.Join(cache, "itlmon", "geoip")) {
				t.Errorf("geoip log line: file %q built %q", l.File, l.Built)
			}
			files++
		}
	}
	if files == 0 {
		t.Fatalf("no \"geoip database\" log line:\n%s", logs.String())
	}

	const clientIP = "193.0.6.139" // RIPE NCC, Amsterdam: NL, North Holland
	rec := itlmontest.Record(14, 1)
	req, _ := http.NewRequest("POST", m.URL()+"/v1/beacon?site=test", bytes.NewReader(itlmontest.BatchBytes(t, 1, []beacon.Record{rec})))
	req.Header.Set("Origin", itlmontest.PageOrigin)
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set("User-Agent", itlmontest.FirefoxUA)
	req.Header.Set("X-Forwarded-For", clientIP+", 10.0.0.1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("POST /v1/beacon = %d, want 204", resp.StatusCode)
	}
	itlmontest.WaitPromoted(t, m.DB.Conn())
	streams, err := m.DB.LatestStreams(t.Context(), itlmontest.CollectorFilter("test"))
	if err != nil {
		t.Fatal(err)
	}
	if len(streams) != 1 || streams[0].StreamID != rec.StreamID {
		t.Fatalf("stored %d streams, want the one sent", len(streams))
	}
	if s := streams[0]; s.Country != "NL" || s.Region != "NL-NH" {
		t.Fatalf("stored %s/%s for %s, want NL/NL-NH", s.Country, s.Region, clientIP)
	}
	// No column of any stored row holds the address.
	var n uint64
	if err := m.DB.Conn().QueryRow(t.Context(),
		"SELECT count() FROM itl_streams WHERE position(toString(tuple(*)), '"+clientIP+"') > 0").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d stored rows contain the client address", n)
	}
	if strings.Contains(logs.String(), clientIP) {
		t.Fatal("the client address is in the log")
	}
}
