package ingest

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/itlmon/itlmon/wasm/beacon"
)

// TestOversizedFrameHeader writes raw frame headers through a real gorilla
// client's connection: frames that declare more than the limit (by one
// byte, by far, and past int64: gorilla's ErrReadLimit), with the start of
// a batch after the header or nothing at all. Each is refused at once with
// close 1009 naming the limit (a RejectLimit ack first when the batch's
// sequence number arrived), and counted as too_big. At once: the client
// sends nothing after what is listed and the body timeout is an hour, so a
// collector that waited for the declared payload would not close before
// readClose's deadline.
func TestOversizedFrameHeader(t *testing.T) {
	const maxBytes = 4096
	f := newFixture(t, func(c *Config) {
		c.Limits = beacon.DefaultLimits
		c.Limits.MaxBytes = maxBytes
		c.BodyTimeout = time.Hour
	})
	batch := mustBatch(t, 9, "chat", 1)
	for _, tc := range []struct {
		name     string
		declared uint64
		payload  []byte // sent after the header
		ack      bool   // a RejectLimit ack for seq 9 precedes the close
	}{
		{"declares 1 TiB, sends a batch's start", 1 << 40, batch, true},
		{"declares 1 TiB, sends the header alone", 1 << 40, nil, false},
		{"declares the limit plus one", maxBytes + 1, batch, true},
		{"declares 2^63", 1 << 63, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := f.rejected(ReasonTooBig)
			c, _, err := f.dial(t, "chat", pageOrigin)
			if err != nil {
				t.Fatal(err)
			}
			// FIN + binary, masked, 64-bit length, mask key 0 (payload as is).
			hdr := []byte{0x82, 0x80 | 127}
			hdr = binary.BigEndian.AppendUint64(hdr, tc.declared)
			hdr = append(hdr, 0, 0, 0, 0)
			if _, err := c.NetConn().Write(append(hdr, tc.payload...)); err != nil {
				t.Fatal(err)
			}
			ce, acks := readClose(t, c)
			want := fmt.Sprintf("over %d bytes", maxBytes)
			if ce.Code != websocket.CloseMessageTooBig || !strings.Contains(ce.Text, want) {
				t.Fatalf("close = %d %q, want %d with %q", ce.Code, ce.Text, websocket.CloseMessageTooBig, want)
			}
			if tc.ack && (len(acks) != 1 || acks[0].Seq != 9 || acks[0].Reject != beacon.RejectLimit) {
				t.Fatalf("acks = %+v, want seq 9 with RejectLimit", acks)
			}
			if !tc.ack && len(acks) != 0 {
				t.Fatalf("acks = %+v, want none", acks)
			}
			if got := f.rejected(ReasonTooBig) - before; got != 1 {
				t.Fatalf("rejected{too_big} grew by %v, want 1", got)
			}
		})
	}
	if n := len(f.sink.submitted()); n != 0 {
		t.Fatalf("submitted = %d, want 0", n)
	}
}

// TestBeaconBodyTimeout sends half a POST body, then stalls past the body
// timeout, or cuts the body off: 408, counted as body_timeout.
func TestBeaconBodyTimeout(t *testing.T) {
	const bodyTimeout = 100 * time.Millisecond
	f := newFixture(t, func(c *Config) { c.BodyTimeout = bodyTimeout })
	body := mustBatch(t, 3, "chat", 2)
	for _, tc := range []struct {
		name string
		cut  bool // close the write side instead of stalling
	}{{"stalled", false}, {"cut off", true}} {
		t.Run(tc.name, func(t *testing.T) {
			before := f.rejected(ReasonBodyTimeout)
			nc, err := net.Dial("tcp", f.srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			fmt.Fprintf(nc, "POST /v1/beacon?site=chat HTTP/1.1\r\nHost: collector\r\nOrigin: %s\r\nUser-Agent: %s\r\n"+
				"Content-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", pageOrigin, firefoxUA, len(body))
			if _, err := nc.Write(body[:len(body)/2]); err != nil {
				t.Fatal(err)
			}
			if tc.cut {
				nc.(*net.TCPConn).CloseWrite()
			}
			nc.SetReadDeadline(time.Now().Add(10 * time.Second)) // a hang fails, not the test binary
			resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
			if err != nil {
				t.Fatalf("read response: %v", err)
			}
			text, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(text), "not received in full") {
				t.Fatalf("response = %d %q, want 408 naming the body", resp.StatusCode, text)
			}
			if got := f.rejected(ReasonBodyTimeout) - before; got != 1 {
				t.Fatalf("rejected{body_timeout} grew by %v, want 1", got)
			}
		})
	}
	if n := len(f.sink.submitted()); n != 0 {
		t.Fatalf("submitted = %d, want 0", n)
	}
}
