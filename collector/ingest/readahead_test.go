//go:build unix

package ingest

import (
	"bytes"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
)

// socketPair returns the two ends of a Unix stream socket pair: a write to
// one is in the other's receive queue when it returns, so what one read of
// the other finds does not depend on timing.
func socketPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	var cs [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	return cs[0], cs[1]
}

// maskedFrames returns n client binary frames of size payload bytes each.
func maskedFrames(n, size int) []byte {
	var b []byte
	for i := range n {
		b = append(b, rawFrameHeader(uint64(size))...)
		b = append(b, bytes.Repeat([]byte{byte('a' + i%26)}, size)...)
	}
	return b
}

// readAsGorilla reads want bytes from m as gorilla does: a frame's header
// through a 256-byte buffer, the rest of a payload in one read of its size.
func readAsGorilla(t *testing.T, m *meteredConn, want int) []byte {
	t.Helper()
	var got []byte
	small := make([]byte, 256)
	for len(got) < want {
		p := small
		if left := want - len(got); left > 1024 {
			p = make([]byte, 1024)
		}
		n, err := m.Read(p)
		got = append(got, p[:n]...)
		if err != nil {
			t.Fatalf("after %d of %d bytes: %v", len(got), want, err)
		}
	}
	return got
}

// TestReadAheadOneCallForQueuedFrames: frames waiting in the socket are
// read in one system call and handed up unchanged, in reads of gorilla's
// sizes; their headers are metered as before (each frame reserved on the
// budget), and no buffer is held once all is handed up.
func TestReadAheadOneCallForQueuedFrames(t *testing.T) {
	a, b := socketPair(t)
	pool := newReadAheadPool(1 << 30)
	bud := &budget{limit: 1 << 20}
	m := &meteredConn{Conn: a, b: bud, limit: 1 << 20}
	m.enableReadAhead(pool)
	if m.ra.rc == nil {
		t.Fatal("a Unix socket has no read-ahead")
	}
	sent := maskedFrames(3, 8000) // 24 KB: under one buffer
	if _, err := b.Write(sent); err != nil {
		t.Fatal(err)
	}
	got := readAsGorilla(t, m, len(sent))
	if !bytes.Equal(got, sent) {
		t.Fatal("the bytes handed up differ from those sent")
	}
	if m.ra.fills != 1 {
		t.Errorf("%d system calls read the frames, want 1", m.ra.fills)
	}
	if m.reserved != 3*8000 || bud.used.Load() != 3*8000 {
		t.Errorf("reserved %d, budget holds %d, want the three payloads (24000)", m.reserved, bud.used.Load())
	}
	if n := pool.inUse.Load(); n != 0 || m.ra.buf != nil {
		t.Errorf("%d buffers in use after all was handed up", n)
	}
	// Past a buffer: two calls, the second for the rest.
	sent = maskedFrames(5, 8000)
	b.Write(sent)
	if got := readAsGorilla(t, m, len(sent)); !bytes.Equal(got, sent) {
		t.Fatal("the bytes handed up differ from those sent")
	}
	if m.ra.fills != 3 {
		t.Errorf("%d system calls for 1 + 40 KB, want 3", m.ra.fills)
	}
}

// twoConnsOneBuffer returns two metered connections with read-ahead from a
// pool of one buffer, and their peers.
func twoConnsOneBuffer(t *testing.T) (pool *readAheadPool, ma *meteredConn, aPeer net.Conn, mc *meteredConn, cPeer net.Conn) {
	t.Helper()
	a, aPeer := socketPair(t)
	c, cPeer := socketPair(t)
	pool = newReadAheadPool(0)
	pool.max = 1
	ma = &meteredConn{Conn: a, b: &budget{limit: 1 << 20}, limit: 1 << 20}
	mc = &meteredConn{Conn: c, b: &budget{limit: 1 << 20}, limit: 1 << 20}
	ma.enableReadAhead(pool)
	mc.enableReadAhead(pool)
	return pool, ma, aPeer, mc, cPeer
}

// TestReadAheadWaitsWithoutBuffer: a read that finds nothing waits without
// a buffer (the only one goes to another connection meanwhile), and gets
// what arrives later; the peer's close ends the reads with io.EOF.
func TestReadAheadWaitsWithoutBuffer(t *testing.T) {
	pool, ma, aPeer, mc, cPeer := twoConnsOneBuffer(t)

	type result struct {
		b   []byte
		err error
	}
	done := make(chan result)
	go func() {
		p := make([]byte, 256)
		n, err := ma.Read(p) // finds nothing: waits
		done <- result{p[:n], err}
	}()
	for ma.ra.waits.Load() == 0 { // until a's read has found its socket empty
		runtime.Gosched()
	}
	sent := maskedFrames(2, 100)
	cPeer.Write(sent)
	if got := readAsGorilla(t, mc, len(sent)); !bytes.Equal(got, sent) {
		t.Fatal("the bytes handed up differ from those sent")
	}
	if mc.ra.fills != 1 {
		t.Fatalf("the other connection's read went without the buffer (%d fills): the waiting read held it", mc.ra.fills)
	}
	aPeer.Write([]byte{0x82})
	if r := <-done; r.err != nil || !bytes.Equal(r.b, []byte{0x82}) {
		t.Fatalf("the waiting read got %q, %v", r.b, r.err)
	}
	aPeer.Close()
	if n, err := ma.Read(make([]byte, 256)); n != 0 || err != io.EOF {
		t.Fatalf("after the peer closed: %d, %v, want io.EOF", n, err)
	}
	if n := pool.inUse.Load(); n != 0 {
		t.Errorf("%d buffers in use", n)
	}
}

// TestReadAheadBound: past the pool's bound a connection reads straight
// into the caller's buffer; what it reads is the same.
func TestReadAheadBound(t *testing.T) {
	pool, ma, aPeer, mc, cPeer := twoConnsOneBuffer(t)
	sentA, sentC := maskedFrames(4, 1000), maskedFrames(4, 1000)
	aPeer.Write(sentA)
	cPeer.Write(sentC)
	first := readAsGorilla(t, ma, 256) // a holds the buffer, most of its bytes in it
	if ma.ra.buf == nil {
		t.Fatal("a holds no read-ahead")
	}
	if got := readAsGorilla(t, mc, len(sentC)); !bytes.Equal(got, sentC) {
		t.Fatal("past the bound: the bytes handed up differ from those sent")
	}
	if mc.ra.fills != 0 {
		t.Errorf("c read ahead %d times past the bound", mc.ra.fills)
	}
	rest := readAsGorilla(t, ma, len(sentA)-len(first))
	if !bytes.Equal(append(first, rest...), sentA) {
		t.Fatal("a's bytes differ from those sent")
	}
	if pool.inUse.Load() != 0 {
		t.Error("the buffer was not given back")
	}
	// dropReadAhead gives back a buffer still holding bytes.
	aPeer.Write(sentA)
	readAsGorilla(t, ma, 10)
	ma.dropReadAhead()
	if pool.inUse.Load() != 0 || ma.ra.buf != nil {
		t.Error("dropReadAhead kept the buffer")
	}
}
