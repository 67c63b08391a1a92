package store

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// The spool frame codec. A frame's payload (spool.go frames it and checks
// its CRC) starts with a version byte:
//
//	4  the inbox rows in explicit fields (frameVersion, below); written
//	   since this codec, the only version written
//	3  gob of an inboxFrame (itl_inbox rows), as the releases after
//	   schema/007_inbox.sql and before this codec wrote it
//	2  gob of a rowBatch (itl_streams and itl_timelines rows), before
//	   schema/007_inbox.sql
//	1  as 2, with format, status and causes as codes in fields named
//	   Format, Status, TTFTCause and StallCause, before schema/006_names.sql
//
// Every version is decoded (into inbox rows) and has a golden frame in
// testdata/spool-vN.bin, written by the code of the release that wrote it.
// A frame of a version this release does not know (a newer release's, after
// a downgrade) is kept on disk, never dropped (errSpoolVersion).
//
// Version 4 spells every field out, so that renaming or retyping a Go field
// can never silently read as an empty value again (gob matches fields by
// name and leaves the ones it does not find at their zero value):
//
//	byte    4
//	uvarint n, then n rows:
//	  string  kind, site, stream_id, origin_id
//	  varint  received_at: seconds since the Unix epoch
//	  uvarint received_at: nanoseconds within the second (< 1e9)
//	  string  country, region, browser
//	  uvarint browser_major (< 65536)
//	  string  os, device, payload
//
// uvarint/varint are LEB128 (varint zig-zag, encoding/binary's); a string
// is a uvarint length and its bytes, UTF-8 except stream_id (a client
// record's is its 16 raw bytes) and payload (a beacon message). Nothing follows the last row. A change to this layout
// is a new version with a decoder of its own and a golden file; version 4
// frames stay readable as they are.
const frameVersion = 4

// Frame versions with a decoder in this release.
const (
	frameV1 = 1
	frameV2 = 2
	frameV3 = 3
)

// minRowBytes is the smallest encoded row: ten empty strings, a one-byte
// second, nanosecond and browser_major.
const minRowBytes = 13

var errSpoolVersion = errors.New("unknown spool frame version")

// errFrame marks a frame whose bytes are not a valid frame of its version.
var errFrame = errors.New("malformed spool frame")

// encodeFrame encodes rows as a version 4 frame.
func encodeFrame(rows []InboxRow) ([]byte, error) {
	n := 1 + binary.MaxVarintLen64
	for i := range rows {
		r := &rows[i]
		n += 11*binary.MaxVarintLen64 + 2*binary.MaxVarintLen64 +
			len(r.Kind) + len(r.Site) + len(r.StreamID) + len(r.OriginID) + len(r.Country) + len(r.Region) +
			len(r.Browser) + len(r.OS) + len(r.Device) + len(r.Payload)
	}
	p := make([]byte, 0, n)
	p = append(p, frameVersion)
	p = binary.AppendUvarint(p, uint64(len(rows)))
	for i := range rows {
		p = appendRow(p, &rows[i])
	}
	return p, nil
}

func appendRow(p []byte, r *InboxRow) []byte {
	p = appendFrameString(p, r.Kind)
	p = appendFrameString(p, r.Site)
	p = appendFrameString(p, r.StreamID)
	p = appendFrameString(p, r.OriginID)
	p = binary.AppendVarint(p, r.ReceivedAt.Unix())
	p = binary.AppendUvarint(p, uint64(r.ReceivedAt.Nanosecond()))
	p = appendFrameString(p, r.Country)
	p = appendFrameString(p, r.Region)
	p = appendFrameString(p, r.Browser)
	p = binary.AppendUvarint(p, uint64(r.BrowserMajor))
	p = appendFrameString(p, r.OS)
	p = appendFrameString(p, r.Device)
	return appendFrameString(p, r.Payload)
}

func appendFrameString(p []byte, s string) []byte {
	p = binary.AppendUvarint(p, uint64(len(s)))
	return append(p, s...)
}

// decodeFrame decodes a frame of any version this release knows into
// inbox rows. Errors wrap errSpoolVersion (a version it does not know: keep
// the frame) or name what is wrong.
func decodeFrame(p []byte) ([]InboxRow, error) {
	if len(p) == 0 {
		return nil, fmt.Errorf("%w: empty frame", errSpoolVersion)
	}
	switch p[0] {
	case frameVersion:
		return decodeFrameV4(p)
	case frameV3:
		var f inboxFrame
		if err := gob.NewDecoder(bytes.NewReader(p[1:])).Decode(&f); err != nil {
			return nil, fmt.Errorf("decode spool frame v3: %w", err)
		}
		return f.Rows, nil
	case frameV1, frameV2:
		b, err := decodeBatch(p)
		if err != nil {
			return nil, err
		}
		return b.inboxRows()
	}
	return nil, fmt.Errorf("%w %d", errSpoolVersion, p[0])
}

// inboxFrame is the gob body of a version 3 frame.
type inboxFrame struct {
	Rows []InboxRow
}

// frameReader reads a version 4 frame with a sticky error, naming the
// row and field of the first failure. Strings are substrings of one copy
// of the frame (s): a frame's rows are replayed and dropped together.
type frameReader struct {
	s   string
	p   int
	row int
	err error
}

func (r *frameReader) fail(field, reason string) {
	if r.err == nil {
		at := "frame"
		if r.row >= 0 {
			at = "row[" + strconv.Itoa(r.row) + "]"
		}
		r.err = fmt.Errorf("%w v%d: %s.%s: %s (offset %d)", errFrame, frameVersion, at, field, reason, r.p)
	}
}

func (r *frameReader) uvarint(field string, max uint64) uint64 {
	if r.err != nil {
		return 0
	}
	var v uint64
	for i, shift := 0, uint(0); ; i, shift = i+1, shift+7 {
		if r.p >= len(r.s) {
			r.fail(field, "truncated")
			return 0
		}
		b := r.s[r.p]
		r.p++
		if i == binary.MaxVarintLen64-1 && b > 1 {
			r.fail(field, "varint overflows 64 bits")
			return 0
		}
		v |= uint64(b&0x7f) << shift
		if b < 0x80 {
			if b == 0 && i > 0 { // one encoding per frame: the encoder writes the shortest
				r.fail(field, "varint not in its shortest form")
				return 0
			}
			break
		}
	}
	if v > max {
		r.fail(field, strconv.FormatUint(v, 10)+" exceeds "+strconv.FormatUint(max, 10))
		return 0
	}
	return v
}

func (r *frameReader) str(field string, text bool) string {
	n := r.uvarint(field, math.MaxInt)
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.s)-r.p) {
		r.fail(field, "length "+strconv.FormatUint(n, 10)+" exceeds the "+strconv.Itoa(len(r.s)-r.p)+" bytes left")
		return ""
	}
	v := r.s[r.p : r.p+int(n)]
	if text && !utf8.ValidString(v) {
		r.fail(field, "invalid UTF-8")
		return ""
	}
	r.p += int(n)
	return v
}

func decodeFrameV4(p []byte) ([]InboxRow, error) {
	r := frameReader{s: string(p), p: 1, row: -1}
	n := r.uvarint("rows", uint64(len(p)/minRowBytes))
	if r.err != nil {
		return nil, r.err
	}
	rows := make([]InboxRow, n)
	for i := range rows {
		r.row = i
		row := &rows[i]
		row.Kind = r.str("kind", true)
		row.Site = r.str("site", true)
		row.StreamID = r.str("stream_id", false) // a client record's: 16 raw bytes
		row.OriginID = r.str("origin_id", true)
		sec := r.uvarint("received_at", math.MaxUint64)
		nsec := r.uvarint("received_at_ns", 999_999_999)
		row.ReceivedAt = time.Unix(int64(sec>>1)^-int64(sec&1), int64(nsec)).UTC()
		row.Country = r.str("country", true)
		row.Region = r.str("region", true)
		row.Browser = r.str("browser", true)
		row.BrowserMajor = uint16(r.uvarint("browser_major", math.MaxUint16))
		row.OS = r.str("os", true)
		row.Device = r.str("device", true)
		row.Payload = r.str("payload", false)
		if r.err != nil {
			return nil, r.err
		}
	}
	if r.p != len(r.s) {
		r.row = -1
		r.fail("end", strconv.Itoa(len(r.s)-r.p)+" bytes after the last row")
		return nil, r.err
	}
	return rows, nil
}
