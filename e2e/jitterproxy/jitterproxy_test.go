package jitterproxy

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"
)

// startUpstream starts a TCP server that, per connection, writes n chunks of
// size bytes every `every` and closes. It returns the bytes it sends.
func startUpstream(t *testing.T, n, size int, every time.Duration) (addr string, want []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	for i := range n {
		want = append(want, bytes.Repeat([]byte{byte('a' + i%26)}, size)...)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for i := range n {
					if _, err := c.Write(want[i*size : (i+1)*size]); err != nil {
						return
					}
					time.Sleep(every) // sleep: the upstream's cadence (the scenario), not a wait
				}
			}()
		}
	}()
	return ln.Addr().String(), want
}

func mustStart(t *testing.T, cfg Config) *Proxy {
	t.Helper()
	p, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// readAll reads the whole response and returns it with the number of reads.
func readAll(t *testing.T, addr string) ([]byte, int, time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	var got []byte
	reads := 0
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			reads++
			got = append(got, buf[:n]...)
		}
		if err == io.EOF {
			return got, reads, time.Since(start)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestBytesIdenticalAndInOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay Distribution
	}{
		{"none", nil},
		{"uniform", Uniform(0, 15*time.Millisecond)},
		{"exponential", Exponential(5 * time.Millisecond)},
		{"spikes", Spikes(0.2, 20*time.Millisecond, 60*time.Millisecond)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up, want := startUpstream(t, 40, 100, time.Millisecond)
			p := mustStart(t, Config{Upstream: up, Seed: 1, Delay: tc.delay})
			got, _, _ := readAll(t, p.Addr())
			if !bytes.Equal(got, want) {
				t.Fatalf("got %d bytes, want %d identical bytes", len(got), len(want))
			}
			if got, want := p.Stats().Bytes, int64(len(want)); got != want {
				t.Fatalf("Stats().Bytes = %d, want %d", got, want)
			}
		})
	}
}

// A held read makes the reads behind it wait and go out in one write: a
// stall, then a burst.
func TestHoldCoalescesLaterReads(t *testing.T) {
	const hold = 300 * time.Millisecond
	up, want := startUpstream(t, 20, 50, 20*time.Millisecond)
	n := 0
	p := mustStart(t, Config{Upstream: up, Delay: func(*rand.Rand) time.Duration {
		n++
		if n == 5 {
			return hold
		}
		return 0
	}})
	got, reads, elapsed := readAll(t, p.Addr())
	if !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, want %d identical bytes", len(got), len(want))
	}
	if elapsed < hold {
		t.Fatalf("elapsed %v, want at least the hold %v", elapsed, hold)
	}
	st := p.Stats()
	if got, want := st.Held, int64(1); got != want {
		t.Fatalf("Held = %d, want %d", got, want)
	}
	if st.MaxDelay != hold || st.HeldTotal != hold {
		t.Fatalf("MaxDelay, HeldTotal = %v, %v, want %v", st.MaxDelay, st.HeldTotal, hold)
	}
	// The reads arriving during the 300 ms hold (about 14 at 20 ms) are
	// released with the held one.
	if st.Writes > st.Reads-5 {
		t.Fatalf("Writes = %d for %d reads, want at least 5 coalesced", st.Writes, st.Reads)
	}
	if reads >= int(st.Reads) {
		t.Fatalf("client reads = %d, want fewer than upstream reads %d", reads, st.Reads)
	}
}

func TestDistributions(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	u := Uniform(10*time.Millisecond, 20*time.Millisecond)
	s := Spikes(0.25, time.Second, time.Second)
	spikes := 0
	const n = 10000
	for range n {
		if d := u(r); d < 10*time.Millisecond || d > 20*time.Millisecond {
			t.Fatalf("Uniform drew %v outside [10ms, 20ms]", d)
		}
		switch d := s(r); d {
		case 0:
		case time.Second:
			spikes++
		default:
			t.Fatalf("Spikes drew %v, want 0 or 1s", d)
		}
	}
	if spikes < n/5 || spikes > n*3/10 {
		t.Fatalf("Spikes(0.25) held %d of %d, want about %d", spikes, n, n/4)
	}
	// Same seed, same draws.
	e := Exponential(time.Millisecond)
	a, b := rand.New(rand.NewPCG(3, 4)), rand.New(rand.NewPCG(3, 4))
	for range 100 {
		if x, y := e(a), e(b); x != y {
			t.Fatalf("same seed drew %v and %v", x, y)
		}
	}
}

func TestCloseWithOpenConnections(t *testing.T) {
	up, _ := startUpstream(t, 1000, 10, 10*time.Millisecond) // ~10 s stream
	p, err := Start(Config{Upstream: up})
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Read(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return with a connection open")
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("client read after Close: %v, want EOF", err)
	}
}

func TestStartErrors(t *testing.T) {
	if _, err := Start(Config{}); err == nil {
		t.Fatal("Start without upstream: no error")
	}
	if _, err := Start(Config{Upstream: "x", Listen: "256.0.0.1:0"}); err == nil {
		t.Fatal("Start on a bad address: no error")
	}
}

func BenchmarkProxyThroughput(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	const size = 1 << 20
	payload := make([]byte, size)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { c.Write(payload); c.Close() }()
		}
	}()
	p, err := Start(Config{Upstream: ln.Addr().String()})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			b.Fatal(err)
		}
		if n, _ := io.Copy(io.Discard, c); n != size {
			b.Fatalf("read %d bytes, want %d", n, size)
		}
		c.Close()
	}
}
