package ingest

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"testing"
)

// countingConn records its writes.
type countingConn struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
	err    error
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, bytes.Clone(p))
	if c.err != nil {
		return 0, c.err
	}
	return len(p), nil
}

// TestCorkedWrites: between cork and uncork the writes (a ping from another
// goroutine among them) go out as one, in order; outside, each goes at
// once; uncork reports the write's error.
func TestCorkedWrites(t *testing.T) {
	cc := &countingConn{}
	m := &meteredConn{Conn: cc}
	m.Write([]byte("a"))
	m.cork()
	m.Write([]byte("bc"))
	done := make(chan struct{})
	go func() { m.Write([]byte("ping")); close(done) }()
	<-done
	m.Write([]byte("d"))
	if len(cc.writes) != 1 {
		t.Fatalf("%d writes while corked reached the connection", len(cc.writes)-1)
	}
	if err := m.uncork(); err != nil {
		t.Fatal(err)
	}
	m.Write([]byte("e"))
	want := []string{"a", "bcpingd", "e"}
	if len(cc.writes) != len(want) {
		t.Fatalf("writes = %q, want %q", cc.writes, want)
	}
	for i := range want {
		if string(cc.writes[i]) != want[i] {
			t.Fatalf("writes = %q, want %q", cc.writes, want)
		}
	}
	if err := m.uncork(); err != nil || len(cc.writes) != 3 {
		t.Fatalf("uncork with nothing gathered: %v, %d writes", err, len(cc.writes))
	}
	cc.err = errors.New("broken pipe")
	m.cork()
	m.Write([]byte("f"))
	if err := m.uncork(); !errors.Is(err, cc.err) {
		t.Fatalf("uncork = %v, want the write's error", err)
	}
}
