package ingest

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/itlmon/itlmon/wasm/beacon"
)

// Fuzz targets of ingest's request parsing. `go test` runs each on its
// seeds (f.Add below and testdata/fuzz/<target>/); `make fuzz` explores.
// Besides not crashing, each checks that every byte reserved on the memory
// budget is given back once the request or connection is over, whatever
// it sent.

// fuzzLimits are small limits, so the fuzzer reaches them.
var fuzzLimits = func() beacon.Limits {
	l := beacon.DefaultLimits
	l.MaxBytes = 2048
	return l
}()

// FuzzServeBeacon posts arbitrary bytes, with an arbitrary site and
// Origin, to the beacon handler.
func FuzzServeBeacon(f *testing.F) {
	batch := mustBatch(f, 1, "chat", 2)
	f.Add(batch, "chat", pageOrigin)
	f.Add(batch, "open", "null")
	f.Add(mustBatch(f, 7, "open", 0), "chat", pageOrigin)
	f.Add(batch[:len(batch)/2], "chat", pageOrigin)
	f.Add([]byte("ITL\x01\x00\x01"), "chat", pageOrigin)
	f.Add(make([]byte, fuzzLimits.MaxBytes+1), "chat", pageOrigin)
	f.Add(batch, "chat", "https://chat.example.com:443/x")
	f.Add(batch, "", "")
	fx := newFixture(f, func(c *Config) { c.Limits = fuzzLimits })
	f.Fuzz(func(t *testing.T, body []byte, site, origin string) {
		req := httptest.NewRequest("POST", "/v1/beacon", bytes.NewReader(body))
		q := req.URL.Query()
		q.Set("site", site)
		req.URL.RawQuery = q.Encode()
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		w := httptest.NewRecorder()
		fx.h.ServeBeacon(w, req)
		switch w.Code {
		case 204, 400, 403, 404, 408, 413, 429, 503:
		default:
			t.Fatalf("status %d %q", w.Code, w.Body)
		}
		if w.Code == 204 {
			if _, err := beacon.DecodeBatch(body, fuzzLimits); err != nil {
				t.Fatalf("204 for a batch that does not decode: %v", err)
			}
		}
		if used := fx.h.budget.used.Load(); used != 0 {
			t.Fatalf("memory budget holds %d bytes after the request", used)
		}
	})
}

// FuzzWSFrames writes arbitrary bytes after a WebSocket handshake (frames
// as a client sends them, or not) and reads until the collector closes.
// Frames the input declares but does not send in full are cut short by
// closing the client's side, as a client that goes away does.
func FuzzWSFrames(f *testing.F) {
	frame := func(op byte, payload []byte, fin bool) []byte {
		b0 := op
		if fin {
			b0 |= 0x80
		}
		var hdr []byte
		switch n := len(payload); {
		case n < 126:
			hdr = []byte{b0, 0x80 | byte(n)}
		case n < 1<<16:
			hdr = []byte{b0, 0x80 | 126, byte(n >> 8), byte(n)}
		default:
			hdr = rawFrameHeader(uint64(n))[:10]
			hdr[0] = b0
		}
		return append(append(hdr, 0, 0, 0, 0), payload...) // mask key 0: the payload as is
	}
	batch := mustBatch(f, 3, "chat", 2)
	f.Add(frame(2, batch, true))
	f.Add(append(frame(2, batch[:10], false), frame(0, batch[10:], true)...)) // fragmented
	f.Add(append(frame(9, []byte("hi"), true), frame(2, batch, true)...))     // a ping between
	f.Add(frame(1, []byte("text"), true))
	f.Add(rawFrameHeader(1 << 40))
	f.Add(append(rawFrameHeader(1<<40), batch...))
	f.Add(rawFrameHeader(1 << 63))
	f.Add(frame(2, make([]byte, fuzzLimits.MaxBytes+1), true))
	f.Add(append(frame(2, make([]byte, 1000), false), frame(0, make([]byte, 1100), true)...)) // over the limit in two
	f.Add(frame(8, []byte{0x03, 0xe8}, true))                                                 // close
	f.Add([]byte{0x82})
	f.Add([]byte{})
	fx := newFixture(f, func(c *Config) {
		c.Limits = fuzzLimits
		c.BodyTimeout = time.Second // a frame the input leaves unfinished ends with the client's close
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
		c, _, err := d.Dial(fx.wsURL("chat"), http.Header{"Origin": {pageOrigin}})
		if err != nil {
			t.Fatal(err)
		}
		nc := c.NetConn()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Write(data); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the collector stopped reading without closing the connection")
			}
		}
		nc.(*net.TCPConn).CloseWrite()
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatal("the collector did not close the connection within 10s")
				}
				break
			}
		}
		c.Close()
		fx.waitMemory(t, 0) // everything the connection reserved is given back
		fx.waitConnections(t, 0)
	})
}

// FuzzMeteredConn feeds arbitrary bytes, cut into arbitrary reads, through
// the frame header follower under gorilla's reader: it never panics, and
// what it reserves is what the budget holds.
func FuzzMeteredConn(f *testing.F) {
	f.Add(append(rawFrameHeader(100), make([]byte, 100)...), uint8(3))
	f.Add(rawFrameHeader(1<<40), uint8(1))
	f.Add([]byte{0x82, 0xfe, 0x01, 0x00, 0, 0, 0, 0}, uint8(2))
	f.Add([]byte{0x89, 0x85, 0, 0, 0, 0, 'h', 'e', 'l', 'l', 'o', 0x82, 0x81, 0, 0, 0, 0, 'x'}, uint8(5))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		b := &budget{limit: 1 << 20}
		m := &meteredConn{Conn: &byteConn{data: data, chunk: max(int(chunk), 1)}, b: b, limit: int64(fuzzLimits.MaxBytes) + 1}
		buf := make([]byte, 64)
		for {
			n, err := m.Read(buf)
			if n < 0 || n > len(buf) {
				t.Fatalf("Read = %d", n)
			}
			if m.reserved != b.used.Load() {
				t.Fatalf("reserved %d, budget holds %d", m.reserved, b.used.Load())
			}
			if m.reserved < 0 || m.declared > m.limit {
				t.Fatalf("reserved %d, declared %d (limit %d)", m.reserved, m.declared, m.limit)
			}
			if err != nil {
				break
			}
		}
	})
}

// byteConn is a net.Conn that reads data in reads of at most chunk bytes.
type byteConn struct {
	net.Conn
	data  []byte
	chunk int
}

func (c *byteConn) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, net.ErrClosed
	}
	n := copy(p[:min(len(p), c.chunk)], c.data)
	c.data = c.data[n:]
	return n, nil
}
