package ingest

import (
	"encoding/binary"
	"errors"
	"math"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/itlmon/itlmon/collector"
)

// DefaultMemory is the ingest memory budget when Config.Memory is zero and
// no GOMEMLIMIT is set; with one, the default is a quarter of it.
const DefaultMemory = 256 << 20

// defaultMemory returns the budget for a zero Config.Memory.
func defaultMemory() int64 {
	if lim := debug.SetMemoryLimit(-1); lim > 0 && lim < math.MaxInt64 {
		return max(lim/4, 16<<20)
	}
	return DefaultMemory
}

// budget bounds the bytes ingest holds, all connections and requests
// together: frames declared and being read (reserved on their declared
// length, before their payload is read), and decoded batches until their
// ack. A reservation that would pass the limit fails; the caller sheds.
type budget struct {
	limit int64
	used  atomic.Int64
}

// reserve takes n bytes, or reports false when they do not fit.
func (b *budget) reserve(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// force takes n bytes whether or not they fit: memory already allocated
// (a batch decoded from a frame that was within the budget).
func (b *budget) force(n int64) { b.used.Add(n) }

func (b *budget) release(n int64) { b.used.Add(-n) }

// streamSize is what one decoded record costs beyond its frame's bytes, at
// most: a collector.Stream (a record and its enrichment; its strings and
// histogram counts are counted in the frame's length).
const streamSize = int64(unsafe.Sizeof(collector.Stream{}))

// batchCost is what a decoded batch of n records from a frame of frameLen
// bytes holds until its ack (approximately: its frame's length plus a fixed
// size per record).
func batchCost(frameLen, n int) int64 { return int64(frameLen) + int64(n)*streamSize }

// errShed is returned by meteredConn.Read when a frame's declared payload
// does not fit in the budget: the connection is shed (close 1013).
var errShed = errors.New("ingest memory budget spent")

// errFrameTooBig is returned by meteredConn.Read once a data frame's header
// has declared more than the message limit: the message cannot fit, so it
// is refused at once (close 1009) rather than waited for.
var errFrameTooBig = errors.New("frame declares more than the message limit")

// meteredConn is the network connection under gorilla's reader. It follows
// the client's frame headers (RFC 6455 section 5.2) as their bytes pass and
// reserves each data frame's declared payload length on the budget before
// any byte of that payload is handed up. A data frame that declares more
// than the message limit reserves nothing: the bytes of the read that
// carried its header are handed up (the start of a batch, whose sequence
// number the refusal acks), and the next Read fails with errFrameTooBig
// without waiting for the network. Only the connection's reader goroutine
// calls Read.
type meteredConn struct {
	net.Conn
	b     *budget
	limit int64 // the message limit plus one: the largest reservation for one frame

	hdr       [14]byte // the frame header being parsed
	hn        int      // bytes of it seen
	remaining int64    // payload bytes of the current frame still to pass

	reserved int64 // reserved by frames and not yet taken by the reader (see take)
	declared int64 // the reservation of the last data frame whose header passed
	refused  int64 // the declared length that did not fit, when Read failed with errShed
	shed     bool
	tooBig   bool // a data frame declared more than the limit: Read fails with errFrameTooBig

	ra readAhead // the bytes under the meter (readahead.go)

	// Writes: between cork and uncork (the writer, sending the acks one
	// insert released at once) gorilla's frames are gathered and go out in
	// one write, not a system call each. wmu orders a ping written meanwhile.
	wmu    sync.Mutex
	corked bool
	wbuf   []byte
}

// Write passes p on, or gathers it while corked.
func (m *meteredConn) Write(p []byte) (int, error) {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	if m.corked {
		m.wbuf = append(m.wbuf, p...)
		return len(p), nil
	}
	return m.Conn.Write(p)
}

// cork gathers the writes until uncork.
func (m *meteredConn) cork() {
	m.wmu.Lock()
	m.corked = true
	m.wmu.Unlock()
}

// uncork writes what was gathered since cork, in one write under the last
// write deadline gorilla set.
func (m *meteredConn) uncork() error {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	m.corked = false
	if len(m.wbuf) == 0 {
		return nil
	}
	_, err := m.Conn.Write(m.wbuf)
	m.wbuf = m.wbuf[:0]
	if cap(m.wbuf) > 4<<10 {
		m.wbuf = nil // an idle connection holds little
	}
	return err
}

func (m *meteredConn) Read(p []byte) (int, error) {
	if m.shed {
		return 0, errShed
	}
	if m.tooBig {
		return 0, errFrameTooBig
	}
	n, err := m.read(p)
	for i := 0; i < n; {
		if m.remaining > 0 {
			skip := int64(n - i)
			if skip > m.remaining {
				skip = m.remaining
			}
			m.remaining -= skip
			i += int(skip)
			continue
		}
		m.hdr[m.hn] = p[i]
		m.hn++
		i++
		need := frameHeaderLen(m.hdr[:m.hn])
		if m.hn < need {
			continue
		}
		length := framePayloadLen(m.hdr[:m.hn])
		m.hn = 0
		m.remaining = length
		if op := m.hdr[0] & 0x0f; op >= 8 {
			continue // control frame: at most 125 bytes, read into gorilla's buffer
		}
		if length >= m.limit {
			// Nothing after this read is taken; what it holds past the
			// header (at most len(p)) is the start of the frame.
			m.tooBig, m.declared = true, 0
			return n, nil
		}
		r := length
		if !m.b.reserve(r) {
			m.refused, m.shed = r, true
			// The bytes before this header were taken; the rest of this
			// read is lost with the connection.
			return i, errShed
		}
		m.reserved += r
		m.declared = r
	}
	return n, err
}

// take moves n bytes of frame payload read by the reader out of the frames'
// reservation (the caller now holds them), and returns how many it moved.
func (m *meteredConn) take(n int64) int64 {
	n = min(n, m.reserved)
	m.reserved -= n
	return n
}

// frameHeaderLen returns the length of the frame header that starts with
// h (at least 2 bytes are needed to know; a client's frames are masked).
func frameHeaderLen(h []byte) int {
	if len(h) < 2 {
		return 2
	}
	n := 2
	switch h[1] & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if h[1]&0x80 != 0 {
		n += 4
	}
	return n
}

// framePayloadLen returns the declared payload length of a complete header;
// lengths past int64 (the top bit set: a protocol error) read as the largest.
func framePayloadLen(h []byte) int64 {
	switch l := h[1] & 0x7f; l {
	case 126:
		return int64(binary.BigEndian.Uint16(h[2:4]))
	case 127:
		v := binary.BigEndian.Uint64(h[2:10])
		if v > math.MaxInt64 {
			return math.MaxInt64
		}
		return int64(v)
	default:
		return int64(l)
	}
}
