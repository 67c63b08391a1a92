package ingest

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// Read-ahead: a connection that has frames waiting in its socket takes them
// in one system call, not two per frame. Gorilla reads a frame's header
// through its small buffer (256 bytes: an idle connection costs little) and
// the payload past it in a read of its own, so a client with batches in
// flight cost the collector two reads per batch; under load those reads
// were a sixth of the collector's CPU (the ingest report's profile). Below
// the meter, a connection reads into a pooled buffer of readAheadSize bytes
// and hands gorilla its reads from there.
//
// A buffer is held only while it holds bytes not handed up yet: it is taken
// for a read that finds data and returned as soon as the read would wait
// (the socket's EAGAIN, inside syscall.RawConn.Read, before the goroutine
// parks) or its bytes are all handed up, so an idle or blocked connection
// holds none. The buffers in use are bounded per Handler (readAheadPool);
// past the bound, or on a connection without a socket to read directly
// (TLS, or a platform without the Unix read), reads go straight through as
// before. Deadlines are the socket's: a read that finds bytes read ahead
// returns them without waiting, as one finding them in gorilla's buffer does.

// readAheadSize is one read-ahead buffer: about four batches of 20 records
// (~8.7 KB a frame in the ingest report). A read the size of a buffer or
// more (a large frame's payload) goes straight into the caller's buffer.
const readAheadSize = 32 << 10

// readAheadPool hands out read-ahead buffers, at most max at a time.
type readAheadPool struct {
	max   int64
	inUse atomic.Int64
	pool  sync.Pool
}

// newReadAheadPool bounds the read-ahead buffers to 1/32 of the ingest
// memory budget (a 256 MiB budget: 256 buffers, 8 MiB), at least 8 buffers.
// They are memory beside the budget, not in it: reserving them on it would
// shed frames that fit.
func newReadAheadPool(memory int64) *readAheadPool {
	p := &readAheadPool{max: max(memory/32/readAheadSize, 8)}
	p.pool.New = func() any { b := make([]byte, readAheadSize); return &b }
	return p
}

// get returns a buffer, or nil when max are in use.
func (p *readAheadPool) get() *[]byte {
	if p.inUse.Add(1) > p.max {
		p.inUse.Add(-1)
		return nil
	}
	return p.pool.Get().(*[]byte)
}

func (p *readAheadPool) put(b *[]byte) {
	p.pool.Put(b)
	p.inUse.Add(-1)
}

// readAhead is a connection's read-ahead state (its reader goroutine only).
type readAhead struct {
	rc   syscall.RawConn // nil: reads go straight through
	pool *readAheadPool
	buf  *[]byte // bytes read and not handed up: (*buf)[r:w]; nil when none
	r, w int

	// fillFn is fill, made once: the outcome of a fill is left in got,
	// gotN, gotErr and through rather than in variables a closure made per
	// read would move to the heap.
	fillFn  func(fd uintptr) bool
	got     *[]byte // the buffer read into, nil when none
	gotN    int
	gotErr  error
	through bool // no buffer to be had: read into the caller's

	// fills counts the system calls that read into a buffer, waits the
	// reads that found nothing and gave the buffer back (tests).
	fills int
	waits atomic.Int32
}

// fill is the function RawConn.Read calls: with the socket readable (or
// first, optimistically), read into a buffer taken now; when there is
// nothing to read, give the buffer back before waiting.
func (ra *readAhead) fill(fd uintptr) bool {
	if ra.got == nil {
		if ra.got = ra.pool.get(); ra.got == nil {
			ra.through = true
			return true
		}
	}
	var wait bool
	if ra.gotN, wait, ra.gotErr = sysRead(fd, *ra.got); wait {
		ra.pool.put(ra.got)
		ra.got = nil
		ra.waits.Add(1)
		return false
	}
	return true
}

// enableReadAhead turns read-ahead on for a connection whose socket allows
// it (see rawConnOf).
func (m *meteredConn) enableReadAhead(p *readAheadPool) {
	if rc := rawConnOf(m.Conn); rc != nil {
		m.ra = readAhead{rc: rc, pool: p}
		m.ra.fillFn = m.ra.fill
	}
}

// dropReadAhead returns the buffer, with what it holds: the reader is done.
func (m *meteredConn) dropReadAhead() {
	if m.ra.buf != nil {
		m.ra.pool.put(m.ra.buf)
		m.ra.buf = nil
	}
}

// read is Conn.Read through the read-ahead.
func (m *meteredConn) read(p []byte) (int, error) {
	ra := &m.ra
	if ra.buf != nil {
		n := copy(p, (*ra.buf)[ra.r:ra.w])
		if ra.r += n; ra.r == ra.w {
			m.dropReadAhead()
		}
		return n, nil
	}
	if ra.rc == nil || len(p) == 0 || len(p) >= readAheadSize {
		return m.Conn.Read(p)
	}
	ra.got, ra.through = nil, false
	err := ra.rc.Read(ra.fillFn)
	b, n, serr, through := ra.got, ra.gotN, ra.gotErr, ra.through
	ra.got, ra.gotErr = nil, nil
	if through {
		return m.Conn.Read(p)
	}
	if err != nil { // the deadline passed, or the connection was closed
		if b != nil {
			ra.pool.put(b)
		}
		return 0, err
	}
	if serr != nil || n <= 0 {
		ra.pool.put(b)
		if serr == nil {
			return 0, io.EOF
		}
		return 0, &net.OpError{Op: "read", Net: m.Conn.LocalAddr().Network(), Source: m.Conn.LocalAddr(),
			Addr: m.Conn.RemoteAddr(), Err: os.NewSyscallError("read", serr)}
	}
	ra.fills++
	ra.buf, ra.r, ra.w = b, 0, n
	k := copy(p, (*b)[:n])
	if ra.r = k; ra.r == ra.w {
		m.dropReadAhead()
	}
	return k, nil
}
