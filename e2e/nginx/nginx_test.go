package nginx

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const (
	events  = 20
	cadence = 40 * time.Millisecond
)

// sseOrigin streams `events` SSE events `cadence` apart, flushing each, and
// records when it wrote the first and the last one.
type sseOrigin struct {
	first, last atomic.Int64 // unix nanos
	body        []byte
}

func newSSEOrigin(t *testing.T) (*sseOrigin, *httptest.Server) {
	o := &sseOrigin{}
	var b bytes.Buffer
	for i := range events {
		fmt.Fprintf(&b, "data: {\"i\":%d,\"text\":\"token %d\"}\n\n", i, i)
	}
	b.WriteString("data: [DONE]\n\n")
	o.body = b.Bytes()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		if r.URL.Query().Get("accel") == "no" {
			w.Header().Set("X-Accel-Buffering", "no")
		}
		rc := http.NewResponseController(w)
		ev := bytes.SplitAfter(o.body, []byte("\n\n"))
		for i, e := range ev {
			if len(e) == 0 {
				continue
			}
			if i > 0 {
				time.Sleep(cadence) // sleep: the stream's cadence (the origin's side of the scenario), not a wait
			}
			w.Write(e)
			rc.Flush()
			now := time.Now().UnixNano()
			if i == 0 {
				o.first.Store(now)
			}
			o.last.Store(now)
		}
	}))
	t.Cleanup(srv.Close)
	return o, srv
}

type result struct {
	proto        string // "HTTP/1.1", "HTTP/2.0"
	encoding     string
	reads        int
	firstByte    time.Time
	lastByte     time.Time
	decompressed []byte
}

// get fetches url asking for gzip and reads the raw (possibly compressed)
// body read by read, the way a browser's network layer sees it. With cert
// (an https url) it trusts cert and negotiates HTTP/2 by ALPN.
func get(t *testing.T, url string, cert *Cert) result {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Accept-Encoding", "gzip")
	tr := &http.Transport{DisableCompression: true}
	if cert != nil {
		tr.TLSClientConfig, tr.ForceAttemptHTTP2 = cert.TLSConfig(), true
	}
	defer tr.CloseIdleConnections()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	r := result{proto: resp.Proto, encoding: resp.Header.Get("Content-Encoding")}
	var raw []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			now := time.Now()
			if r.reads == 0 {
				r.firstByte = now
			}
			r.lastByte = now
			r.reads++
			raw = append(raw, buf[:n]...)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	r.decompressed = raw
	if r.encoding == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		if r.decompressed, err = io.ReadAll(zr); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// TestBufferingGzipDeliversAtEnd checks the measured nginx behaviour the
// attribution scenarios rely on: buffering + gzip holds the whole SSE stream
// until the origin has finished; X-Accel-Buffering: no streams it again. The
// same holds over HTTPS with HTTP/2.
func TestBufferingGzipDeliversAtEnd(t *testing.T) {
	RequireReal(t)
	cert, err := SelfSigned(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		name, proto string
		cert        *Cert
	}{{"http1", "HTTP/1.1", nil}, {"h2", "HTTP/2.0", cert}} {
		t.Run(p.name, func(t *testing.T) { testBufferingGzip(t, p.cert, p.proto) })
	}
}

func testBufferingGzip(t *testing.T, cert *Cert, wantProto string) {
	for _, tc := range []struct {
		name     string
		opts     Options
		query    string
		atEnd    bool // the first byte reaches the client only after the origin's last event
		wantGzip bool
		minReads int
	}{
		{name: "off", opts: Options{}, minReads: events / 2},
		{name: "buffering+gzip", opts: Options{Buffering: true, Gzip: true}, atEnd: true, wantGzip: true},
		{name: "buffering+gzip+accel-no", opts: Options{Buffering: true, Gzip: true}, query: "?accel=no", wantGzip: true, minReads: events / 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, origin := newSSEOrigin(t)
			tc.opts.Upstream, tc.opts.TLS = origin.URL, cert
			ng := Start(t, tc.opts)
			r := get(t, ng.URL()+"/v1/chat"+tc.query, cert)
			if r.proto != wantProto {
				t.Fatalf("protocol %s, want %s", r.proto, wantProto)
			}
			if !bytes.Equal(r.decompressed, o.body) {
				t.Fatalf("body through nginx differs from the origin's:\n%q\nwant\n%q", r.decompressed, o.body)
			}
			if got := r.encoding == "gzip"; got != tc.wantGzip {
				t.Fatalf("Content-Encoding = %q, want gzip %v", r.encoding, tc.wantGzip)
			}
			first, last := time.Unix(0, o.first.Load()), time.Unix(0, o.last.Load())
			t.Logf("%-8s %-24s reads=%-3d first byte %+7.1fms after origin's first event, origin's last event %+7.1fms after it",
				r.proto, tc.name, r.reads, ms(r.firstByte.Sub(first)), ms(last.Sub(r.firstByte)))
			if got := r.firstByte.After(last); got != tc.atEnd {
				t.Fatalf("first byte after the origin's last event = %v, want %v (reads %d)", got, tc.atEnd, r.reads)
			}
			if tc.atEnd && r.reads > 3 {
				t.Fatalf("reads = %d, want the stream in one chunk (at most 3 reads)", r.reads)
			}
			if r.reads < tc.minReads {
				t.Fatalf("reads = %d, want at least %d (streamed)", r.reads, tc.minReads)
			}
			log := ng.ErrorLog()
			if strings.Contains(log, "[emerg]") || strings.Contains(log, "[alert]") {
				t.Fatalf("nginx error log:\n%s", log)
			}
		})
	}
}

func TestStartStop(t *testing.T) {
	_, origin := newSSEOrigin(t)
	ng := Start(t, Options{Upstream: origin.URL})
	if !strings.Contains(ng.Config, "proxy_buffering off;") || strings.Contains(ng.Config, "gzip on") {
		t.Fatalf("config:\n%s", ng.Config)
	}
	if err := ng.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := ng.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := http.Get(ng.URL()); err == nil {
		t.Fatal("nginx still answering after Stop")
	}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
