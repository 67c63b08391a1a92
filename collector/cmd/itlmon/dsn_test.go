package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/itlmon/itlmon/collector/chdb"
	"github.com/itlmon/itlmon/collector/internal/itlmontest"
	"github.com/itlmon/itlmon/collector/server"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// TestDSNStartsWhileClickHouseDown: a collector given a DSN where nothing
// listens starts at once, acks records from the spool, answers 503 on the
// read API and /readyz; `itlmon migrate` on the same DSN fails fast. Once a
// real engine listens on that port the schema is applied in the background
// and every acked record is stored exactly once.
func TestDSNStartsWhileClickHouseDown(t *testing.T) {
	t.Parallel()
	lib := itlmontest.ChdbLib(t)
	port := itlmontest.FreePort(t)
	dsn := fmt.Sprintf("clickhouse://127.0.0.1:%d/default?dial_timeout=500ms", port)

	// The one-shot migration command keeps failing fast.
	var stderr bytes.Buffer
	began := time.Now()
	if code := runMigrate(t.Context(), []string{"--clickhouse", dsn, "--log-format", "json"}, io.Discard, &stderr); code != 1 {
		t.Fatalf("itlmon migrate with ClickHouse down exited %d, want 1; stderr: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "ping") {
		t.Errorf("itlmon migrate with ClickHouse down: stderr %q does not name the failed ping", stderr.String())
	}
	t.Logf("itlmon migrate failed after %v: %s", time.Since(began).Round(time.Millisecond), strings.TrimSpace(stderr.String()))

	m := itlmontest.StartMain(t, func(c *server.Config) { c.ClickHouse, c.ChdbLib = server.NewSecretDSN(dsn), "" })
	if m.Engine != nil {
		t.Fatal("an embedded engine started although a DSN was given")
	}
	for _, path := range []string{"/readyz", "/api/health", "/api/streams?site=test", "/api/sites", "/api/summary?site=test"} {
		base := m.ReadURL()
		if path == "/readyz" {
			base = m.URL()
		}
		code, body := itlmontest.GetBody(t, base+path)
		if code != http.StatusServiceUnavailable {
			t.Errorf("GET %s with ClickHouse down = %d %s, want 503", path, code, body)
		}
		if path != "/readyz" && path != "/api/health" && !strings.Contains(body, "clickhouse unavailable") {
			t.Errorf("GET %s with ClickHouse down: body %s does not say clickhouse unavailable", path, body)
		}
		// The public probe says not ready, never why (ClickHouse's error
		// names the host); the read side says why.
		host := fmt.Sprintf("127.0.0.1:%d", port)
		if path == "/readyz" && body != "not ready\n" {
			t.Errorf("GET /readyz with ClickHouse down: body %q, want \"not ready\" alone", body)
		}
		if path == "/api/health" && !strings.Contains(body, host) {
			t.Errorf("GET /api/health with ClickHouse down: body %q does not say why (%s)", body, host)
		}
	}

	c, _, err := itlmontest.DialWS(t, m.URL(), "test", itlmontest.PageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	acks := itlmontest.ReadAcks(c)
	const perBatch = 10
	seq := uint64(0)
	send := func(n int) {
		for range n {
			seq++
			recs := make([]beacon.Record, perBatch)
			for j := range recs {
				recs[j] = itlmontest.Record(3, uint32(seq*perBatch)+uint32(j))
			}
			if err := c.WriteMessage(websocket.BinaryMessage, itlmontest.BatchBytes(t, seq, recs)); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(5)
	acks.Wait(t, 5, 60*time.Second)
	if st := m.Writer.Stats(); st.RowsSpooled != 5*perBatch || st.InboxRowsInserted != 0 {
		t.Fatalf("with ClickHouse down: spooled %d, inserted %d; want %d spooled, none inserted", st.RowsSpooled, st.InboxRowsInserted, 5*perBatch)
	}

	eng := itlmontest.StartEngine(t, chdb.Options{LibPath: lib, NativePort: port, HTTPPort: itlmontest.FreePort(t)})
	if want := fmt.Sprintf("127.0.0.1:%d", port); eng.NativeAddr() != want {
		t.Fatalf("engine listens on %s, want %s (port taken meanwhile?)", eng.NativeAddr(), want)
	}

	itlmontest.WaitSchema(t, m) // applied once ClickHouse came up
	send(3)
	got := acks.Wait(t, 8, 60*time.Second)
	want := len(got) * perBatch
	rows, uniq, rollup := itlmontest.WaitRows(t, m, "test", want, 90*time.Second)
	if rows != want || uniq != want || rollup != want {
		t.Fatalf("rows %d, distinct ids %d, rollup streams %d; want %d each (exactly once)", rows, uniq, rollup, want)
	}
	itlmontest.WantStoredOnce(t, itlmontest.StoredIDs(t, m.DB.Conn(), "test"), got, 3, perBatch, "")
	if st := m.Writer.Stats(); st.RowsReplayed != 5*perBatch {
		t.Errorf("replayed %d streams from the spool, want %d", st.RowsReplayed, 5*perBatch)
	}
	for _, path := range []string{"/readyz", "/api/health", "/api/streams?site=test", "/api/sites", "/api/summary?site=test"} {
		base := m.ReadURL()
		if path == "/readyz" {
			base = m.URL()
		}
		if code, body := itlmontest.GetBody(t, base+path); code != http.StatusOK {
			t.Errorf("GET %s with ClickHouse up = %d %s, want 200", path, code, body)
		}
	}
}
