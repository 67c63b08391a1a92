package store

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/rs/zerolog"
)

// Spool file format. A segment is a sequence of frames:
//
//	uint32 LE payload length | uint32 LE CRC-32C of payload | payload
//
// Every Append writes one frame and fsyncs before it returns, so a frame
// that was acknowledged is complete on disk. After a crash the last frame of
// the newest segment may be torn (short, or with a bad CRC and nothing after
// it); reading stops there, logs it, and the segment's complete frames are
// still replayed. Any other bad frame is corruption: the segment is kept on
// disk and skipped, never replayed in part and removed.
const (
	frameHeader     = 8
	maxFrame        = 256 << 20 // larger lengths are corruption, not data
	segmentSuffix   = ".seg"
	defaultSegBytes = 16 << 20 // rotate segments at this size
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// spool is an append-only log of frames in numbered segment files. It is not
// safe for concurrent use: the writer's goroutine owns it. Its counters are
// read through stats, kept by the caller.
type spool struct {
	dir      string
	segBytes int64
	log      zerolog.Logger

	sealed  []uint64 // segment numbers, oldest first, closed for writing
	cur     *os.File // open segment, nil until the next Append
	curNum  uint64
	curSize int64
	next    uint64 // number of the next segment
	bytes   int64  // total bytes of all segments
	skipped int    // segments left on disk by Skip
}

// openSpool opens dir (creating it) and lists its segments; every existing
// segment is sealed: new frames always go to a new segment.
func openSpool(dir string, log zerolog.Logger) (*spool, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	s := &spool{dir: dir, segBytes: defaultSegBytes, log: log, next: 1}
	for _, e := range entries {
		num, ok := segmentNumber(e.Name())
		if !ok {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return nil, fmt.Errorf("spool: %w", err)
		}
		s.sealed = append(s.sealed, num)
		s.bytes += info.Size()
		s.next = max(s.next, num+1)
	}
	sort.Slice(s.sealed, func(i, j int) bool { return s.sealed[i] < s.sealed[j] })
	return s, nil
}

func segmentNumber(name string) (uint64, bool) {
	base, ok := strings.CutSuffix(name, segmentSuffix)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(base, 10, 64)
	return n, err == nil
}

func (s *spool) path(num uint64) string {
	return filepath.Join(s.dir, fmt.Sprintf("%020d%s", num, segmentSuffix))
}

// Append writes payload as one frame and fsyncs it.
func (s *spool) Append(payload []byte) error {
	if len(payload) > maxFrame {
		return fmt.Errorf("spool: frame of %d bytes exceeds %d", len(payload), maxFrame)
	}
	if s.cur == nil {
		if err := s.create(); err != nil {
			return err
		}
	}
	frame := make([]byte, frameHeader, frameHeader+len(payload))
	binary.LittleEndian.PutUint32(frame[0:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(frame[4:], crc32.Checksum(payload, crcTable))
	frame = append(frame, payload...)
	if _, err := s.cur.Write(frame); err != nil {
		s.seal() // a partial write leaves a torn tail: never append after it
		return fmt.Errorf("spool: write: %w", err)
	}
	if err := s.cur.Sync(); err != nil {
		s.seal()
		return fmt.Errorf("spool: sync: %w", err)
	}
	s.curSize += int64(len(frame))
	s.bytes += int64(len(frame))
	if s.curSize >= s.segBytes {
		s.seal()
	}
	return nil
}

// create opens a new segment and fsyncs the directory so it survives a crash.
func (s *spool) create() error {
	f, err := os.OpenFile(s.path(s.next), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("spool: create segment: %w", err)
	}
	if err := syncDir(s.dir); err != nil {
		f.Close()
		return err
	}
	s.cur, s.curNum, s.curSize = f, s.next, 0
	s.next++
	return nil
}

// seal closes the open segment, if any; it becomes readable by Oldest.
func (s *spool) seal() {
	if s.cur == nil {
		return
	}
	s.cur.Close()
	s.sealed = append(s.sealed, s.curNum)
	s.cur = nil
}

// Oldest returns the oldest segment, sealing the open one if it is the only
// one; false when the spool is empty.
func (s *spool) Oldest() (uint64, bool) {
	if len(s.sealed) == 0 {
		s.seal()
	}
	if len(s.sealed) == 0 {
		return 0, false
	}
	return s.sealed[0], true
}

// Read returns the frames of segment num. A torn tail (a last frame cut
// short or failing its CRC, with nothing after it: what a crash in the middle
// of an Append leaves) is logged and dropped, and the frames before it are
// returned. Corruption followed by more bytes, an impossible length, or an
// I/O error returns an error: the segment must be kept, not replayed and
// removed, since acknowledged frames may follow.
func (s *spool) Read(num uint64) ([][]byte, error) {
	f, err := os.Open(s.path(num))
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	defer f.Close()
	frames, off, err := readFrames(f)
	if errors.Is(err, errTorn) {
		s.log.Warn().Err(err).Str("segment", s.path(num)).Int64("offset", off).Int("frames_kept", len(frames)).
			Msg("spool: dropping torn tail (a write cut short by a crash; never an acknowledged frame)")
		return frames, nil
	}
	if err != nil {
		return nil, fmt.Errorf("spool: segment %s at offset %d after %d frames: %w", s.path(num), off, len(frames), err)
	}
	return frames, nil
}

var (
	// errTorn marks a last frame cut short, or failing its CRC with nothing
	// after it.
	errTorn = errors.New("torn frame")
	// errCorrupt marks a bad frame that is not the tail: bytes follow it, or
	// its length is one Append never writes.
	errCorrupt = errors.New("corrupt frame")
)

// readFrames reads frames until EOF. It returns the good frames, the offset
// after them, and if the rest could not be read errTorn (wrapped) when the
// bad frame runs to EOF, errCorrupt when more bytes follow it or its length
// is impossible, or the I/O error.
func readFrames(rd io.Reader) (frames [][]byte, off int64, err error) {
	r := bufio.NewReader(rd)
	var hdr [frameHeader]byte
	for {
		n, err := io.ReadFull(r, hdr[:])
		switch {
		case err == io.EOF:
			return frames, off, nil
		case err == io.ErrUnexpectedEOF:
			return frames, off, fmt.Errorf("%w: header of %d/%d bytes", errTorn, n, frameHeader)
		case err != nil:
			return frames, off, fmt.Errorf("spool: read: %w", err)
		}
		size := binary.LittleEndian.Uint32(hdr[0:])
		sum := binary.LittleEndian.Uint32(hdr[4:])
		if size > maxFrame {
			return frames, off, fmt.Errorf("%w: length %d", errCorrupt, size)
		}
		// ReadAll grows with the data actually there: a torn length does not
		// allocate its full size.
		payload, err := io.ReadAll(io.LimitReader(r, int64(size)))
		if err != nil {
			return frames, off, fmt.Errorf("spool: read: %w", err)
		}
		if len(payload) != int(size) {
			return frames, off, fmt.Errorf("%w: payload of %d/%d bytes", errTorn, len(payload), size)
		}
		if crc32.Checksum(payload, crcTable) != sum {
			if _, err := r.Peek(1); err == io.EOF {
				return frames, off, fmt.Errorf("%w: CRC mismatch in the last frame", errTorn)
			} else if err != nil {
				return frames, off, fmt.Errorf("spool: read: %w", err)
			}
			return frames, off, fmt.Errorf("%w: CRC mismatch with more bytes after the frame", errCorrupt)
		}
		frames = append(frames, payload)
		off += frameHeader + int64(size)
	}
}

// Remove deletes segment num after its frames were stored elsewhere.
func (s *spool) Remove(num uint64) error {
	if s.cur != nil && s.curNum == num {
		s.seal()
	}
	p := s.path(num)
	if info, err := os.Stat(p); err == nil {
		s.bytes -= info.Size()
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("spool: %w", err)
	}
	for i, n := range s.sealed {
		if n == num {
			s.sealed = append(s.sealed[:i], s.sealed[i+1:]...)
			break
		}
	}
	return syncDir(s.dir)
}

// Skip leaves segment num on disk but stops returning it from Oldest (a
// corrupt or unreadable segment, or a frame this version cannot decode:
// never deleted, never retried in a loop).
func (s *spool) Skip(num uint64) {
	for i, n := range s.sealed {
		if n == num {
			s.sealed = append(s.sealed[:i], s.sealed[i+1:]...)
			s.skipped++
			return
		}
	}
}

// Segments is the number of segments on disk, the open one included.
func (s *spool) Segments() int {
	n := len(s.sealed) + s.skipped
	if s.cur != nil {
		n++
	}
	return n
}

// Bytes is the size of all segments.
func (s *spool) Bytes() int64 { return s.bytes }

// Close closes the open segment.
func (s *spool) Close() { s.seal() }

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("spool: sync dir: %w", err)
	}
	return nil
}
