package ingest

import (
	"bytes"
	"encoding/binary"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/itlmon/itlmon/wasm/beacon"
)

// rawFrameHeader is a client frame header: FIN + binary, masked with key 0
// (the payload goes as is), 64-bit length.
func rawFrameHeader(declared uint64) []byte {
	hdr := []byte{0x82, 0x80 | 127}
	hdr = binary.BigEndian.AppendUint64(hdr, declared)
	return append(hdr, 0, 0, 0, 0)
}

func (f *fixture) shed(transport, cause string) float64 {
	return value(f.h.m.shed.WithLabelValues(transport, cause))
}

func (f *fixture) waitMemory(t *testing.T, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for f.h.budget.used.Load() != want {
		if time.Now().After(deadline) {
			t.Fatalf("memory held = %d, want %d", f.h.budget.used.Load(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (f *fixture) waitConnections(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for f.h.Connections() != want {
		if time.Now().After(deadline) {
			t.Fatalf("connections = %d, want %d", f.h.Connections(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestShedMemory: a frame still arriving holds its declared length; a
// second frame that does not fit next to it is shed with close 1013 and
// "retry-after=N" before its payload is read, and counted. Once the first
// connection goes, what it held is released and a batch goes through.
func TestShedMemory(t *testing.T) {
	const budget = 6000
	f := newFixture(t, func(c *Config) { c.Memory = budget; c.RetryAfter = 7 * time.Second })

	a, _, err := f.dial(t, "chat", pageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.NetConn().Write(append(rawFrameHeader(4000), make([]byte, 100)...)); err != nil {
		t.Fatal(err)
	}
	f.waitMemory(t, 4000) // held on its declared length, 100 bytes in

	b, _, err := f.dial(t, "chat", pageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.NetConn().Write(append(rawFrameHeader(3000), make([]byte, 10)...)); err != nil {
		t.Fatal(err)
	}
	ce, acks := readClose(t, b)
	if ce.Code != websocket.CloseTryAgainLater || !strings.HasPrefix(ce.Text, "retry-after=7;") {
		t.Fatalf("close = %d %q, want 1013 starting retry-after=7;", ce.Code, ce.Text)
	}
	if len(acks) != 0 {
		t.Fatalf("acks = %+v, want none", acks)
	}
	if got := f.shed("ws", ShedMemory); got != 1 {
		t.Fatalf("shed{ws,memory} = %v, want 1", got)
	}
	if got := value(f.h.m.shedBytes); got != 3000 {
		t.Fatalf("shed bytes = %v, want 3000", got)
	}
	if got := f.rejected(ReasonShed); got != 1 {
		t.Fatalf("rejected{shed} = %v, want 1", got)
	}

	a.Close()
	f.waitMemory(t, 0)
	c, _, err := f.dial(t, "chat", pageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteMessage(websocket.BinaryMessage, mustBatch(t, 5, "chat", 2)); err != nil {
		t.Fatal(err)
	}
	if ack := readAck(t, c); ack.Seq != 5 || ack.Reject != beacon.RejectNone {
		t.Fatalf("ack = %+v, want seq 5 accepted", ack)
	}
	f.waitMemory(t, 0) // the acked batch holds nothing any more
}

// TestShedHeldBatches: batches not yet acked hold memory; with the sink
// holding them, the next frame that does not fit is shed after the acks of
// what was taken.
func TestShedHeldBatches(t *testing.T) {
	frame := mustBatch(t, 1, "chat", 3)
	cost := batchCost(len(frame), 3)
	f := newFixture(t, func(c *Config) { c.Memory = 2*cost + int64(len(frame))/2 })
	f.sink.hold = true
	c, _, err := f.dial(t, "chat", pageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 3; seq++ {
		if err := c.WriteMessage(websocket.BinaryMessage, mustBatch(t, seq, "chat", 3)); err != nil {
			t.Fatal(err)
		}
		for seq < 3 && len(f.sink.submitted()) < int(seq) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		f.sink.release()
	}()
	ce, acks := readClose(t, c)
	if ce.Code != websocket.CloseTryAgainLater || !strings.HasPrefix(ce.Text, "retry-after=15;") {
		t.Fatalf("close = %d %q, want 1013 retry-after=15", ce.Code, ce.Text)
	}
	// The sink releases its batches in any order.
	if len(acks) != 2 || acks[0].Seq+acks[1].Seq != 3 || acks[0].Reject != beacon.RejectNone || acks[1].Reject != beacon.RejectNone {
		t.Fatalf("acks = %+v, want seq 1 and 2 accepted", acks)
	}
	f.waitMemory(t, 0)
}

// TestShedQueueFull: a sink whose queue has no room within QueueWait gets
// the batch shed: an overload ack (the module keeps it) and close 1013; a
// POST gets 503 with Retry-After.
func TestShedQueueFull(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.QueueWait = 50 * time.Millisecond; c.RetryAfter = 3 * time.Second })
	f.sink.block = make(chan struct{}) // never room
	c, _, err := f.dial(t, "chat", pageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteMessage(websocket.BinaryMessage, mustBatch(t, 11, "chat", 2)); err != nil {
		t.Fatal(err)
	}
	ce, acks := readClose(t, c)
	if ce.Code != websocket.CloseTryAgainLater || !strings.HasPrefix(ce.Text, "retry-after=3;") {
		t.Fatalf("close = %d %q, want 1013 retry-after=3", ce.Code, ce.Text)
	}
	if len(acks) != 1 || acks[0].Seq != 11 || acks[0].Reject != beacon.RejectOverload {
		t.Fatalf("acks = %+v, want seq 11 with RejectOverload", acks)
	}
	if got := f.shed("ws", ShedQueue); got != 1 {
		t.Fatalf("shed{ws,queue} = %v, want 1", got)
	}

	req, _ := http.NewRequest("POST", f.srv.URL+"/v1/beacon?site=chat", bytes.NewReader(mustBatch(t, 12, "chat", 2)))
	req.Header.Set("Origin", pageOrigin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "3" {
		t.Fatalf("POST = %d Retry-After %q, want 503 and 3", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if got := f.shed("beacon", ShedQueue); got != 1 {
		t.Fatalf("shed{beacon,queue} = %v, want 1", got)
	}
	f.waitMemory(t, 0)
}

// TestShedPost: a POST whose Content-Length does not fit is answered 503
// with Retry-After before its body is read.
func TestShedPost(t *testing.T) {
	body := mustBatch(t, 4, "chat", 5)
	f := newFixture(t, func(c *Config) { c.Memory = int64(len(body)) - 1 })
	req, _ := http.NewRequest("POST", f.srv.URL+"/v1/beacon?site=chat", bytes.NewReader(body))
	req.Header.Set("Origin", pageOrigin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != strconv.Itoa(int(DefaultRetryAfter/time.Second)) {
		t.Fatalf("POST = %d Retry-After %q, want 503 and %v", resp.StatusCode, resp.Header.Get("Retry-After"), DefaultRetryAfter)
	}
	if got := f.shed("beacon", ShedMemory); got != 1 {
		t.Fatalf("shed{beacon,memory} = %v, want 1", got)
	}
	if got := value(f.h.m.shedBytes); got != float64(len(body)) {
		t.Fatalf("shed bytes = %v, want %d", got, len(body))
	}
	if n := len(f.sink.submitted()); n != 0 {
		t.Fatalf("submitted = %d, want 0", n)
	}
	f.waitMemory(t, 0)
}

// TestFrameStall: a frame that stops arriving is refused after the body
// timeout (close 1008, body_timeout) and releases what it held.
func TestFrameStall(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.BodyTimeout = 100 * time.Millisecond })
	c, _, err := f.dial(t, "chat", pageOrigin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.NetConn().Write(append(rawFrameHeader(50_000), make([]byte, 1000)...)); err != nil {
		t.Fatal(err)
	}
	ce, _ := readClose(t, c)
	if ce.Code != websocket.ClosePolicyViolation || !strings.Contains(ce.Text, "not received in full") {
		t.Fatalf("close = %d %q, want 1008 frame not received in full", ce.Code, ce.Text)
	}
	if got := f.rejected(ReasonBodyTimeout); got != 1 {
		t.Fatalf("rejected{body_timeout} = %v, want 1", got)
	}
	f.waitMemory(t, 0)
}

// TestIdleConnectionGoroutines: an idle connection, after a batch and its
// ack, keeps one goroutine (its reader), not a writer too.
func TestIdleConnectionGoroutines(t *testing.T) {
	const n = 50
	f := newFixture(t, nil)
	before := runtime.NumGoroutine()
	for i := 0; i < n; i++ {
		c, _, err := f.dial(t, "chat", pageOrigin)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.WriteMessage(websocket.BinaryMessage, mustBatch(t, uint64(i+1), "chat", 1)); err != nil {
			t.Fatal(err)
		}
		if ack := readAck(t, c); ack.Seq != uint64(i+1) {
			t.Fatalf("ack = %+v", ack)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := runtime.NumGoroutine() - before
		if got <= n+2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d idle connections run %d more goroutines, want at most %d", n, got, n+2)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestFrameHeaderParse(t *testing.T) {
	for _, tc := range []struct {
		hdr  []byte
		n    int
		want int64
	}{
		{[]byte{0x82, 0x85, 0, 0, 0, 0}, 6, 5},
		{[]byte{0x82, 0xfe, 0x01, 0x00, 0, 0, 0, 0}, 8, 256},
		{append([]byte{0x82, 0xff}, binary.BigEndian.AppendUint64(nil, 1<<40)...), 14, 1 << 40},
		{append([]byte{0x82, 0xff}, binary.BigEndian.AppendUint64(nil, 1<<63)...), 14, 1<<63 - 1},
	} {
		if got := frameHeaderLen(tc.hdr); got != tc.n {
			t.Errorf("frameHeaderLen(% x) = %d, want %d", tc.hdr, got, tc.n)
		}
		if got := framePayloadLen(tc.hdr[:min(len(tc.hdr), tc.n)]); got != tc.want {
			t.Errorf("framePayloadLen(% x) = %d, want %d", tc.hdr, got, tc.want)
		}
	}
}
