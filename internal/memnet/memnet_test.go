package memnet

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// A read deadline passes on the bubble's clock: the read waits exactly
// that long, then fails with a timeout.
func TestReadDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := Listen()
		defer l.Close()
		c, err := l.Dial()
		if err != nil {
			t.Fatal(err)
		}
		s, _ := l.Accept()
		defer s.Close()
		defer c.Close()
		start := time.Now()
		s.SetReadDeadline(start.Add(10 * time.Second))
		_, err = s.Read(make([]byte, 1))
		if ne, ok := errors.AsType[net.Error](err); !ok || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read: %v, want a timeout", err)
		}
		if got := time.Since(start); got != 10*time.Second {
			t.Fatalf("read returned after %v, want 10s", got)
		}
	})
}

// What one end writes the other reads, then io.EOF once the writer closes;
// a write to a closed peer fails.
func TestReadWriteClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := Listen()
		defer l.Close()
		c, _ := l.Dial()
		s, _ := l.Accept()
		big := strings.Repeat("x", 3*bufSize) // more than the buffer: the writer waits for the reader
		go func() {
			io.WriteString(c, big)
			c.Close()
		}()
		got, err := io.ReadAll(s)
		if err != nil || string(got) != big {
			t.Fatalf("read %d bytes, %v; want %d, nil", len(got), err, len(big))
		}
		if _, err := s.Write([]byte("late")); err == nil {
			t.Fatal("write to a closed peer succeeded")
		}
		s.Close()
	})
}

// An http.Server on a Listener answers a client that dials it, in a bubble.
func TestHTTP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := Listen()
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(time.Hour) // fake time: passes at once
			io.WriteString(w, "hello "+r.RemoteAddr)
		})}
		go srv.Serve(l)
		tr := &http.Transport{DialContext: l.DialContext}
		defer tr.CloseIdleConnections()
		start := time.Now()
		resp, err := (&http.Client{Transport: tr}).Get("http://memnet/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.HasPrefix(string(b), "hello 127.0.0.1:") || time.Since(start) != time.Hour {
			t.Fatalf("got %q after %v, want hello 127.0.0.1:port after 1h", b, time.Since(start))
		}
		srv.Close()
	})
}
