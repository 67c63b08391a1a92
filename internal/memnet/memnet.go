// Package memnet is an in-memory network for tests: a Listener whose
// connections are buffered in-memory pipes with deadlines.
//
// Its point is testing/synctest. A goroutine reading a TCP socket is not
// durably blocked, so a bubble cannot run a real HTTP or WebSocket server;
// a goroutine waiting on a memnet connection is (it waits on a sync.Cond),
// and deadlines run on the time package's clock, which a bubble fakes. An
// http.Server serving a memnet Listener, and clients dialing it
// (http.Transport.DialContext, websocket.Dialer.NetDialContext), therefore
// run inside a bubble with fake time: a 10 s body timeout passes at once,
// and synctest.Wait returns when every connection waits.
//
// Outside a bubble it works the same on the real clock.
package memnet

import (
	"context"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// bufSize is what a connection holds in each direction before a Write
// waits for the peer to read, like a socket buffer.
const bufSize = 256 << 10

// Listener accepts the connections its Dial and DialContext make.
type Listener struct {
	addr  *net.TCPAddr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	port  atomic.Int32
}

// Listen returns a Listener at 127.0.0.1:80 (its address is only a name:
// nothing is bound).
func Listen() *Listener {
	l := &Listener{
		addr:  &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80},
		conns: make(chan net.Conn, 64),
		done:  make(chan struct{}),
	}
	l.port.Store(40000)
	return l
}

// Accept waits for the next connection or for Close.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept; connections already made stay open.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr is the listener's name, 127.0.0.1:80.
func (l *Listener) Addr() net.Addr { return l.addr }

// Dial connects to the listener.
func (l *Listener) Dial() (net.Conn, error) {
	return l.DialContext(context.Background(), "tcp", l.addr.String())
}

// DialContext connects to the listener whatever the address (it fits
// http.Transport.DialContext and websocket.Dialer.NetDialContext). Each
// client end has its own loopback port.
func (l *Listener) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	select {
	case <-l.done: // closed: refuse, even with room in the backlog
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: l.addr, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	default:
	}
	client := &net.TCPAddr{IP: l.addr.IP, Port: int(l.port.Add(1))}
	a, b := newPipe(), newPipe()
	cc := &conn{in: a, out: b, local: client, remote: l.addr}
	sc := &conn{in: b, out: a, local: l.addr, remote: client}
	select {
	case l.conns <- sc:
		return cc, nil
	case <-l.done:
		return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: l.addr, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// pipe is one direction of a connection: what the writer wrote and the
// reader has not read yet.
type pipe struct {
	mu      sync.Mutex
	cond    sync.Cond
	buf     []byte
	wclosed bool // the writing end closed: reads return io.EOF once buf is read
	rclosed bool // the reading end closed: writes fail
	rdl     deadline
	wdl     deadline
}

func newPipe() *pipe {
	p := &pipe{}
	p.cond.L = &p.mu
	return p
}

// deadline is a read or write deadline: a timer wakes the waiters when it
// passes, and they look at the clock.
type deadline struct {
	at    time.Time
	timer *time.Timer
}

func (p *pipe) set(d *deadline, t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	d.at = t
	if !t.IsZero() {
		d.timer = time.AfterFunc(time.Until(t), func() {
			p.mu.Lock()
			p.cond.Broadcast()
			p.mu.Unlock()
		})
	}
	p.cond.Broadcast()
}

func (d *deadline) passed() bool { return !d.at.IsZero() && !time.Now().Before(d.at) }

type conn struct {
	in, out       *pipe
	local, remote net.Addr
	closed        atomic.Bool
}

func (c *conn) opErr(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.local, Addr: c.remote, Err: err}
}

func (c *conn) Read(b []byte) (int, error) {
	p := c.in
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		switch {
		case p.rclosed:
			return 0, c.opErr("read", net.ErrClosed)
		case len(p.buf) > 0:
			n := copy(b, p.buf)
			p.buf = p.buf[n:]
			p.cond.Broadcast() // room for a waiting writer
			return n, nil
		case p.wclosed:
			return 0, io.EOF
		case p.rdl.passed():
			return 0, c.opErr("read", os.ErrDeadlineExceeded)
		}
		p.cond.Wait()
	}
}

func (c *conn) Write(b []byte) (int, error) {
	p := c.out
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for n < len(b) {
		switch {
		case p.wclosed:
			return n, c.opErr("write", net.ErrClosed)
		case p.rclosed:
			return n, c.opErr("write", io.ErrClosedPipe)
		case p.wdl.passed():
			return n, c.opErr("write", os.ErrDeadlineExceeded)
		}
		if room := bufSize - len(p.buf); room > 0 {
			k := min(room, len(b)-n)
			p.buf = append(p.buf, b[n:n+k]...)
			n += k
			p.cond.Broadcast()
			continue
		}
		p.cond.Wait()
	}
	return n, nil
}

// Close closes both directions: the peer reads what was written, then
// io.EOF; its writes fail.
func (c *conn) Close() error {
	if c.closed.Swap(true) {
		return c.opErr("close", net.ErrClosed)
	}
	for _, side := range []struct {
		p    *pipe
		read bool
	}{{c.in, true}, {c.out, false}} {
		side.p.mu.Lock()
		if side.read {
			side.p.rclosed = true
			side.p.buf = nil
		} else {
			side.p.wclosed = true
		}
		side.p.cond.Broadcast()
		side.p.mu.Unlock()
	}
	return nil
}

// CloseWrite half-closes: the peer reads io.EOF after what was written.
func (c *conn) CloseWrite() error {
	c.out.mu.Lock()
	c.out.wclosed = true
	c.out.cond.Broadcast()
	c.out.mu.Unlock()
	return nil
}

func (c *conn) LocalAddr() net.Addr  { return c.local }
func (c *conn) RemoteAddr() net.Addr { return c.remote }

func (c *conn) SetDeadline(t time.Time) error {
	c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

func (c *conn) SetReadDeadline(t time.Time) error {
	c.in.set(&c.in.rdl, t)
	return nil
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	c.out.set(&c.out.wdl, t)
	return nil
}

// Network routes dials to its listeners by address, for tests with several
// servers (and a closed one): an address with no listener, or a closed one,
// refuses the connection.
type Network struct {
	mu        sync.Mutex
	listeners map[string]*Listener
	next      int
}

// NewNetwork returns an empty Network.
func NewNetwork() *Network { return &Network{listeners: map[string]*Listener{}} }

// Listen returns a new Listener at a host of its own on port 80, and the
// host:port to dial.
func (n *Network) Listen() (*Listener, string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.next++
	l := Listen()
	l.addr = &net.TCPAddr{IP: net.IPv4(127, 0, byte(n.next>>8), byte(n.next)), Port: 80}
	n.listeners[l.addr.String()] = l
	return l, l.addr.String()
}

// DialContext connects to the listener at addr (it fits
// http.Transport.DialContext).
func (n *Network) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.listeners[addr]
	n.mu.Unlock()
	if l == nil {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	return l.DialContext(ctx, network, addr)
}
