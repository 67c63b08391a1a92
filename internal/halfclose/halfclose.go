// Package halfclose closes TCP connections to ClickHouse without a reset.
//
// Closing a socket while data the peer sent is still unread makes the
// kernel answer with a TCP reset (RST) instead of an orderly end (FIN). A
// ClickHouse client closes with data unread whenever it gives up on a
// statement midway: a cancelled context, a timeout, a collector shutting
// down during a promotion. ClickHouse servers take a reset in their stride,
// but the embedded engine does not: a reset that reaches it while it reads
// a statement's data or waits for a cancel (an INSERT, DDL) escapes its
// connection handler as an uncaught exception, and the whole engine aborts
// ("Terminate called for uncaught exception: Code: 210. DB::NetException:
// Connection reset by peer, while reading from socket"), taking every other
// client's statements down with it. The same engine reads an orderly end
// at the same points as a closed connection and carries on.
//
// A connection from Wrap or Dial closes by shutting down its write side
// (FIN), reading and discarding what the server still sends until the
// server closes too, and only then closing the socket, in the background:
// Close returns at once. The drain is bounded by DrainTimeout; a server
// that has not closed by then gets the reset after all.
package halfclose

import (
	"context"
	"io"
	"net"
	"sync"
	"time"
)

// DrainTimeout bounds how long a closed connection waits for the server to
// close its side.
const DrainTimeout = 10 * time.Second

// Dial dials network/addr with d and wraps the connection.
func Dial(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return Wrap(c), nil
}

// Wrap returns c with a Close that half-closes and drains, when c is a
// *net.TCPConn; other connections are returned as they are.
func Wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	return &conn{TCPConn: tc}
}

type conn struct {
	*net.TCPConn
	once sync.Once
}

// Close shuts the write side, then drains and closes in the background. It
// returns nil the first time and net.ErrClosed after, as a socket does.
func (c *conn) Close() error {
	closed := false
	c.once.Do(func() {
		closed = true
		if err := c.TCPConn.CloseWrite(); err != nil {
			c.TCPConn.Close() // already broken: nothing to end in order
			return
		}
		go c.drain()
	})
	if !closed {
		return net.ErrClosed
	}
	return nil
}

func (c *conn) drain() {
	defer c.TCPConn.Close()
	// A deadline the client set for the statement it gave up on must not
	// cut the drain short; this one bounds it.
	if err := c.TCPConn.SetReadDeadline(time.Now().Add(DrainTimeout)); err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, c.TCPConn)
}
