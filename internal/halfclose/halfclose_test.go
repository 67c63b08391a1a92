package halfclose_test

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/itlmon/itlmon/internal/halfclose"
)

// serverSees accepts one connection on ln, writes more than the client
// will read, then reads until the client's end and returns how it ended.
func serverSees(t *testing.T, ln net.Listener, wrote chan<- struct{}) <-chan error {
	t.Helper()
	got := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err
			return
		}
		defer c.Close()
		_, err = c.Write(make([]byte, 64<<10)) // progress packets the client never reads
		close(wrote)
		if err != nil {
			got <- err
			return
		}
		_, err = io.Copy(io.Discard, c)
		got <- err // nil: an orderly end (EOF)
	}()
	return got
}

// A plain close with unread data resets the connection; a half-close ends
// it in order, and the server sees EOF.
func TestCloseEndsInOrder(t *testing.T) {
	for _, tc := range []struct {
		name      string
		wrap      bool
		wantReset bool
	}{
		{"plain close", false, true},
		{"half-close", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			wrote := make(chan struct{})
			got := serverSees(t, ln, wrote)
			var c net.Conn
			if tc.wrap {
				c, err = halfclose.Dial(context.Background(), &net.Dialer{}, "tcp", ln.Addr().String())
			} else {
				c, err = net.Dial("tcp", ln.Addr().String())
			}
			if err != nil {
				t.Fatal(err)
			}
			<-wrote
			// The server's bytes are in flight or in the client's buffer:
			// read one so they have surely arrived, leave the rest unread.
			if _, err := c.Read(make([]byte, 1)); err != nil {
				t.Fatal(err)
			}
			if err := c.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if err := c.Close(); !errors.Is(err, net.ErrClosed) && tc.wrap {
				t.Errorf("second Close = %v, want net.ErrClosed", err)
			}
			err = <-got
			if reset := errors.Is(err, syscall.ECONNRESET); reset != tc.wantReset {
				t.Fatalf("server saw %v; reset %v, want %v", err, reset, tc.wantReset)
			}
			if !tc.wantReset && err != nil {
				t.Fatalf("server saw %v, want an orderly end", err)
			}
		})
	}
}

// A connection that is not TCP is returned as it is.
func TestWrapLeavesOtherConns(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	if got := halfclose.Wrap(a); got != a {
		t.Fatalf("Wrap(pipe) = %T, want the pipe itself", got)
	}
	a.Close()
}
