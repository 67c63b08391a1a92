package e2e

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/itlmon/itlmon/e2e/nginx"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// TestReadSideBehindNginx puts Debian's nginx on the same host in front of
// real collectors with its default proxy settings (a bare `location / {
// proxy_pass ...; }`: every request reaches the collector from loopback,
// with the collector's own Host and no forwarding header, just like a local
// client). Without a read token the read side (dashboard, /api/, /metrics)
// is refused through nginx and on the ingest listener itself, and served on
// the loopback read listener; with --read-token it is refused through nginx
// without the token and served with it. Even the demo's one-port
// convenience, which serves local clients on the main listener, refuses
// nginx's default request (not proof: see httpapi.ReadPolicy). /readyz stays public and says no
// more than ready; ingest works through nginx (the beacon POST through the
// bare location, the WebSocket through its own) and what it took is read
// back with the token.
func TestReadSideBehindNginx(t *testing.T) {
	t.Parallel() // it times nothing
	nginx.RequireReal(t)
	const site, page, token = "guarded", "https://shop.example.com", "e2e-read-token-0123456789"
	// A deployment, not the demo: --demo=false.
	a := StartCollectorArgs(t, []string{"--demo=false", "--log-level", "info"}, site+"="+page)
	b := StartCollectorArgs(t, []string{"--demo=false", "--clickhouse", a.ClickHouseDSN(t), "--read-token", token}, site+"="+page)
	// The demo's one-port convenience (local clients on the main listener).
	d := StartCollectorArgs(t, []string{"--clickhouse", a.ClickHouseDSN(t)}, site+"="+page)
	na := nginx.Start(t, nginx.Options{Upstream: a.Addr, Default: true})
	nb := nginx.Start(t, nginx.Options{Upstream: b.Addr, Default: true})
	nd := nginx.Start(t, nginx.Options{Upstream: d.Addr, Default: true})
	_, port, _ := net.SplitHostPort(a.Addr)
	p, _ := strconv.Atoi(port)
	readA := "http://127.0.0.1:" + strconv.Itoa(p+1) // the read listener's default

	get := func(url string, hdr ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, path := range []string{"/dashboard/", "/api/sites", "/api/health", "/metrics", "/api/streams?site=" + site} {
		if code, _ := get(na.URL() + path); code != http.StatusForbidden {
			t.Errorf("no token: %s through nginx = %d, want 403", path, code)
		}
		if code, _ := get(a.URL + path); code != http.StatusForbidden {
			t.Errorf("no token: %s on the ingest listener = %d, want 403", path, code)
		}
		if code, _ := get(readA + path); code != http.StatusOK {
			t.Errorf("no token: %s on the read listener = %d, want 200", path, code)
		}
		if code, _ := get(nb.URL() + path); code != http.StatusUnauthorized {
			t.Errorf("token: %s through nginx without it = %d, want 401", path, code)
		}
		if code, _ := get(nb.URL()+path, "Authorization", "Bearer "+token+"x"); code != http.StatusUnauthorized {
			t.Errorf("token: %s through nginx with a wrong one = %d, want 401", path, code)
		}
		if code, body := get(nb.URL()+path, "Authorization", "Bearer "+token); code != http.StatusOK {
			t.Errorf("token: %s through nginx with it = %d %.200s, want 200", path, code, body)
		}
		// The demo serves a local client; nginx's default request (HTTP/1.0)
		// is not taken for one.
		if code, _ := get(d.URL + path); code != http.StatusOK {
			t.Errorf("demo: %s from a local client = %d, want 200", path, code)
		}
		if code, _ := get(nd.URL() + path); code != http.StatusForbidden {
			t.Errorf("demo: %s through nginx = %d, want 403", path, code)
		}
	}
	if code, body := get(na.URL() + "/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Errorf("/readyz through nginx = %d %q, want 200 \"ready\"", code, body)
	}

	// Ingest through nginx: a beacon POST, then a batch on the WebSocket.
	batch := func(seq uint64, id byte) []byte {
		r := beacon.Record{StartUnixMs: time.Now().UnixMilli(), PageOrigin: page, PagePath: "/chat",
			URLOrigin: "https://api.example.com", URLPath: "/v1/chat/completions", Model: "guard-test",
			HTTPProto: "h2", ContentType: "text/event-stream", HTTPStatus: 200,
			TTFBUs: 10_000, TTFCUs: 12_000, TTFTUs: 15_000, DurationUs: 500_000,
			Events: 3, ContentEvents: 2, Tokens: 2, Reads: 2, Bytes: 100}
		r.StreamID[0], r.StreamID[15] = 0x5e, id
		p, err := (&beacon.Batch{Seq: seq, Records: []beacon.Record{r}}).AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	req, _ := http.NewRequest("POST", na.URL()+"/v1/beacon?site="+site, bytes.NewReader(batch(1, 1)))
	req.Header.Set("Origin", page)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("beacon POST through nginx = %s %s, want 204", resp.Status, body)
	}
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(na.URL(), "http")+"/v1/ws?site="+site, http.Header{"Origin": {page}})
	if err != nil {
		t.Fatalf("WebSocket through nginx: %v", err)
	}
	defer ws.Close()
	if err := ws.WriteMessage(websocket.BinaryMessage, batch(2, 2)); err != nil {
		t.Fatal(err)
	}
	ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, msg, err := ws.ReadMessage()
	if err != nil {
		t.Fatalf("ack through nginx: %v", err)
	}
	if ack, err := beacon.DecodeAck(msg); err != nil || ack.Seq != 2 || ack.Reject != beacon.RejectNone {
		t.Fatalf("ack through nginx = %+v, %v; want seq 2 accepted", ack, err)
	}
	// Read back through nginx, with the token.
	b.ReadURL, b.Token = nb.URL(), token
	if got := WaitStreams(t, b, site, 2); len(got) != 2 {
		t.Fatalf("stored %d streams, want 2", len(got))
	}
}
