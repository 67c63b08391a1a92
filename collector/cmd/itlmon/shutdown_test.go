package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"

	"github.com/itlmon/itlmon/collector/demo"
	"github.com/itlmon/itlmon/collector/internal/itlmontest"
	"github.com/itlmon/itlmon/collector/secret"
	"github.com/itlmon/itlmon/collector/server"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/origin"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// TestGracefulSIGTERM: on SIGTERM the collector acks what it read, closes
// connections with 1001, drains the writer and exits 0; after a restart
// every acked record is stored. (A second signal: TestSecondSignalExits.)
func TestGracefulSIGTERM(t *testing.T) {
	t.Parallel()
	lib := itlmontest.ChdbLib(t)
	data := t.TempDir()
	p1 := itlmontest.StartProcess(t, lib, data)
	c, _, err := itlmontest.DialWS(t, p1.URL, "test", itlmontest.PageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	const batches, perBatch = 200, 10
	go func() {
		for s := uint64(1); s <= batches; s++ {
			recs := make([]beacon.Record, perBatch)
			for j := range recs {
				recs[j] = itlmontest.Record(5, uint32(s*perBatch)+uint32(j))
			}
			b := beacon.Batch{Seq: s, Records: recs}
			frame, _ := b.AppendBinary(nil)
			if c.WriteMessage(websocket.BinaryMessage, frame) != nil {
				return
			}
		}
	}()
	// Read acks until the close frame; SIGTERM after the first ack.
	acked := map[uint64]bool{}
	signalled := false
	var closeErr *websocket.CloseError
	c.SetReadDeadline(time.Now().Add(2 * time.Minute))
	for {
		_, msg, err := c.ReadMessage()
		if err != nil {
			if !errors.As(err, &closeErr) {
				t.Fatalf("read: %v, want a close frame", err)
			}
			break
		}
		a, err := beacon.DecodeAck(msg)
		if err != nil {
			t.Fatal(err)
		}
		if a.Reject == beacon.RejectNone {
			acked[a.Seq] = true
		}
		if len(acked) == 1 && !signalled {
			p1.Cmd.Process.Signal(syscall.SIGTERM)
			signalled = true
		}
	}
	if !signalled {
		p1.Cmd.Process.Signal(syscall.SIGTERM)
		t.Errorf("connection closed before any ack: %v", closeErr)
	} else if closeErr.Code != websocket.CloseGoingAway {
		t.Errorf("close = %d %q, want 1001 going away", closeErr.Code, closeErr.Text)
	}
	waitExit(t, p1)
	if code := p1.Cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit status after SIGTERM = %d, want 0", code)
	}
	t.Logf("%d of %d batches acked before the close", len(acked), batches)

	p2 := itlmontest.StartProcess(t, lib, data)
	db, err := store.Open(t.Context(), store.Options{Addr: p2.Native, Database: "itlmon"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	itlmontest.WantStoredOnce(t, itlmontest.StoredIDs(t, db.Conn(), "test"), acked, 5, perBatch, " (nothing left to replay after a graceful stop)")

}

// signalChildEnv makes the test binary a process whose graceful shutdown
// never ends (see TestMain), so a second signal is the only way out.
const signalChildEnv = "ITLMON_TEST_SIGNAL_CHILD"

// runSignalChild is that process: the real signalContext, a line on stdout
// when it is ready and when the graceful path started, then no end.
func runSignalChild() {
	ctx, _ := signalContext()
	os.Stdout.WriteString("ready\n")
	<-ctx.Done()
	os.Stdout.WriteString("draining\n")
	select {}
}

// TestSecondSignalExits: while a graceful shutdown is still running (here
// one that never ends), a second SIGTERM exits at once with status 1.
func TestSecondSignalExits(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), signalChildEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	expect := func(want string) {
		t.Helper()
		if !lines.Scan() || lines.Text() != want {
			t.Fatalf("child said %q (%v), want %q", lines.Text(), lines.Err(), want)
		}
	}
	expect("ready")
	cmd.Process.Signal(syscall.SIGTERM)
	expect("draining")
	cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("no exit 30 s after the second signal")
	}
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("exit status after two signals = %d, want 1", code)
	}
}

// TestBeaconPostGeoIP: the sendBeacon fallback stores like a frame, with
// country/region from a MaxMind database keyed by the forwarded client IP.
func TestBeaconPostGeoIP(t *testing.T) {
	t.Parallel()
	mmdb := writeMMDB(t)
	const originKey = "0123456789abcdef"
	m := itlmontest.StartMain(t, func(c *server.Config) {
		c.GeoIP = mmdb
		c.OriginKeys = map[string]secret.Token{"test": secret.New(originKey)} // the joiner wraps the writer
	})
	// The origin endpoint is mounted and checks the key.
	oreq, _ := http.NewRequest("POST", m.URL()+"/v1/origin?site=test", bytes.NewReader([]byte("x")))
	oreq.Header.Set("X-Itlmon-Key", "wrong-key-wrong-key")
	oresp, err := http.DefaultClient.Do(oreq)
	if err != nil {
		t.Fatal(err)
	}
	oresp.Body.Close()
	if oresp.StatusCode != http.StatusForbidden {
		t.Fatalf("POST /v1/origin with a wrong key = %d, want 403", oresp.StatusCode)
	}
	rec := itlmontest.Record(6, 1)
	body := itlmontest.BatchBytes(t, 9, []beacon.Record{rec})
	req, _ := http.NewRequest("POST", m.URL()+"/v1/beacon?site=test", bytes.NewReader(body))
	req.Header.Set("Origin", itlmontest.PageOrigin)
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set("User-Agent", "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Mobile Safari/537.36")
	req.Header.Set("Sec-CH-UA", `"Chromium";v="131", "Google Chrome";v="131", "Not_A Brand";v="24"`)
	req.Header.Set("X-Forwarded-For", "81.2.69.160, 10.0.0.1")
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
	if len(streams) != 1 {
		t.Fatalf("stored %d streams, want 1 (204 means durable)", len(streams))
	}
	s := streams[0]
	if s.StreamID != rec.StreamID || s.Country != "GB" || s.Region != "GB-ENG" || s.Browser != "Chrome" ||
		s.BrowserMajor != 131 || s.OS != "Android" || s.Device != "mobile" {
		t.Fatalf("stored %x %s/%s %s %d %s %s, want GB/GB-ENG Chrome 131 Android mobile",
			s.StreamID, s.Country, s.Region, s.Browser, s.BrowserMajor, s.OS, s.Device)
	}
}

// writeMMDB builds a tiny GeoIP2-City-layout database.
func writeMMDB(t *testing.T) string {
	t.Helper()
	tree, err := mmdbwriter.New(mmdbwriter.Options{DatabaseType: "GeoIP2-City", RecordSize: 24})
	if err != nil {
		t.Fatal(err)
	}
	_, n, _ := net.ParseCIDR("81.2.69.0/24")
	if err := tree.Insert(n, mmdbtype.Map{
		"country":      mmdbtype.Map{"iso_code": mmdbtype.String("GB")},
		"subdivisions": mmdbtype.Slice{mmdbtype.Map{"iso_code": mmdbtype.String("ENG")}},
	}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "geo.mmdb")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := tree.WriteTo(f); err != nil {
		t.Fatal(err)
	}
	return path
}

func waitExit(t *testing.T, p *itlmontest.Proc) {
	t.Helper()
	select {
	case <-p.Done:
	case <-time.After(2 * time.Minute):
		t.Fatal("collector did not exit within 2 minutes of the signal")
	}
}

// TestDemoSite: --demo serves the demo page and accepts site "demo" from the
// collector's own origin only. Its endpoints run inside the origin
// middleware, straight and through its buffering proxy: each stream gets a
// stream id, and its origin timeline reaches this collector's intake by the
// time Close returns.
func TestDemoSite(t *testing.T) {
	t.Parallel()
	m := itlmontest.StartMain(t, func(c *server.Config) { c.Demo = true })
	if got := itlmontest.GetStatus(t, m.URL()+"/demo/"); got != 200 {
		t.Fatalf("GET /demo/ = %d, want 200", got)
	}
	_, port, _ := net.SplitHostPort(m.Addr())
	for _, origin := range []string{m.URL(), "http://localhost:" + port} {
		c, _, err := itlmontest.DialWS(t, m.URL(), "demo", origin)
		if err != nil {
			t.Fatalf("demo site from %s: %v", origin, err)
		}
		acks := itlmontest.ReadAcks(c)
		c.WriteMessage(websocket.BinaryMessage, itlmontest.BatchBytes(t, 1, []beacon.Record{itlmontest.Record(7, uint32(len(origin)))}))
		acks.Wait(t, 1, 30*time.Second)
	}
	if _, resp, err := itlmontest.DialWS(t, m.URL(), "demo", "https://evil.example.net"); err == nil || resp.StatusCode != 403 {
		t.Fatalf("demo site from another origin: %v %v, want 403", resp, err)
	}

	var cfg struct{ Proxy string }
	itlmontest.GetJSON(t, m.URL()+demo.ConfigPath, &cfg)
	if cfg.Proxy == "" || cfg.Proxy == m.URL() {
		t.Fatalf("demo proxy = %q, want a listener of its own", cfg.Proxy)
	}
	for _, base := range []string{m.URL(), cfg.Proxy} {
		req, _ := http.NewRequest("POST", base+"/demo/v1/chat/completions?buffer=100", strings.NewReader(`{"tokens":5,"interval_ms":1}`))
		req.Header.Set("Origin", m.URL())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get(origin.HeaderStream) == "" || !bytes.Contains(body, []byte("[DONE]")) {
			t.Errorf("%s: %s, stream id %q, %d bytes; want a measured stream", base, resp.Status, resp.Header.Get(origin.HeaderStream), len(body))
		}
		if base == cfg.Proxy && resp.Header.Get("Access-Control-Allow-Origin") != m.URL() {
			t.Errorf("proxy: Access-Control-Allow-Origin %q, want the demo page's origin", resp.Header.Get("Access-Control-Allow-Origin"))
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if st := m.Intake.Stats(); st.Origins != 2 || st.Failed != 0 {
		t.Errorf("origin intake %+v, want the 2 demo streams' timelines", st)
	}
}
