package main

import (
	"bytes"
	"errors"
	"strconv"
)

// WebAssembly binary format constants used here.
const (
	secData      = 11 // the data section
	secDataCount = 12 // the data count section (bulk memory); Go does not emit it
	opI32Const   = 0x41
	opEnd        = 0x0b

	// maxImage bounds the memory image Pack builds from the data segments, so
	// a corrupt offset cannot make it allocate gigabytes.
	maxImage = 256 << 20
)

var magic = []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}

// Pack returns module with its data section rewritten: the memory image the
// active data segments write at instantiation is unchanged, byte for byte,
// but it is cut into segments only where it holds a run of at least minGap
// zero bytes (leading and trailing zeros are dropped: linear memory starts
// zeroed). Every other section is copied as it is.
//
// The Go linker cuts its data at every run of about 8 zero bytes, which gives
// itl.wasm some 30,000 segments whose headers (incrementing offsets and
// lengths) brotli cannot compress; the zeros it saves compress to almost
// nothing. Pack trades those headers for the zeros.
//
// Pack understands what the Go linker writes: active segments of memory 0
// whose offset is one i32.const. A module with anything else in its data
// section, or with a data count section, is an error, as is a malformed one.
func Pack(module []byte, minGap int) ([]byte, error) {
	if minGap < 1 {
		return nil, errors.New("wasmpack: minGap must be at least 1")
	}
	if !bytes.HasPrefix(module, magic) {
		return nil, errors.New("wasmpack: not a WebAssembly 1.0 module")
	}
	out := append([]byte(nil), magic...)
	r := reader{b: module, off: len(magic)}
	for r.off < len(r.b) {
		start := r.off
		id := r.byte()
		size := r.u32()
		body := r.bytes(int(size))
		if r.err != nil {
			return nil, errors.New("wasmpack: section at " + strconv.Itoa(start) + ": " + r.err.Error())
		}
		switch id {
		case secDataCount:
			return nil, errors.New("wasmpack: data count section not supported")
		case secData:
			segs, err := parseData(body)
			if err != nil {
				return nil, err
			}
			img, base, err := image(segs)
			if err != nil {
				return nil, err
			}
			sec := encodeData(split(img, base, minGap))
			if err := sameImage(sec, img, base); err != nil {
				return nil, err
			}
			out = append(out, secData)
			out = appendULEB(out, uint64(len(sec)))
			out = append(out, sec...)
		default:
			out = append(out, module[start:r.off]...)
		}
	}
	return out, nil
}

// segment is one active data segment of memory 0.
type segment struct {
	off  uint32
	data []byte
}

func parseData(body []byte) ([]segment, error) {
	r := reader{b: body}
	n := r.u32()
	var segs []segment
	for i := uint32(0); i < n && r.err == nil; i++ {
		kind := r.u32()
		if r.err == nil && kind != 0 {
			return nil, errors.New("wasmpack: data segment " + strconv.Itoa(int(i)) + ": kind " + strconv.Itoa(int(kind)) + " not supported (only active segments of memory 0)")
		}
		op := r.byte()
		off := r.s32()
		end := r.byte()
		if r.err == nil && (op != opI32Const || end != opEnd) {
			return nil, errors.New("wasmpack: data segment " + strconv.Itoa(int(i)) + ": offset is not one i32.const")
		}
		data := r.bytes(int(r.u32()))
		segs = append(segs, segment{off: uint32(off), data: data})
	}
	if r.err == nil && r.off != len(body) {
		r.err = errors.New("trailing bytes")
	}
	if r.err != nil {
		return nil, errors.New("wasmpack: data section: " + r.err.Error())
	}
	return segs, nil
}

// image returns the bytes segs write, applied in order as instantiation does
// (a later segment overwrites an earlier one), starting at memory offset base.
func image(segs []segment) (img []byte, base uint32, err error) {
	if len(segs) == 0 {
		return nil, 0, nil
	}
	lo, hi := uint64(segs[0].off), uint64(0)
	for _, s := range segs {
		lo = min(lo, uint64(s.off))
		hi = max(hi, uint64(s.off)+uint64(len(s.data)))
	}
	if hi > 1<<32 {
		return nil, 0, errors.New("wasmpack: data segments end past 4 GiB")
	}
	if hi-lo > maxImage {
		return nil, 0, errors.New("wasmpack: data segments span " + strconv.FormatUint(hi-lo, 10) + " bytes, more than " + strconv.Itoa(maxImage))
	}
	img = make([]byte, hi-lo)
	for _, s := range segs {
		copy(img[uint64(s.off)-lo:], s.data)
	}
	return img, uint32(lo), nil
}

// split cuts img (at memory offset base) into segments at each run of at
// least minGap zeros, without the zeros at either end of a segment.
func split(img []byte, base uint32, minGap int) []segment {
	var segs []segment
	i := 0
	for {
		for i < len(img) && img[i] == 0 {
			i++
		}
		if i == len(img) {
			return segs
		}
		start, last, zeros := i, i, 0
		for ; i < len(img) && zeros < minGap; i++ {
			if img[i] == 0 {
				zeros++
			} else {
				zeros, last = 0, i
			}
		}
		segs = append(segs, segment{off: base + uint32(start), data: img[start : last+1]})
	}
}

// sameImage checks that the encoded data section sec writes img at base
// (zeros aside).
func sameImage(sec, img []byte, base uint32) error {
	segs, err := parseData(sec)
	if err != nil {
		return errors.New("BUG: wasmpack wrote a bad data section: " + err.Error())
	}
	got, gotBase, err := image(segs)
	if err != nil {
		return errors.New("BUG: wasmpack wrote a bad data section: " + err.Error())
	}
	got, gotBase = trimZeros(got, gotBase)
	want, wantBase := trimZeros(img, base)
	if !bytes.Equal(got, want) || len(want) > 0 && gotBase != wantBase {
		return errors.New("BUG: wasmpack changed the data")
	}
	return nil
}

// trimZeros returns img at base without its leading and trailing zeros.
func trimZeros(img []byte, base uint32) ([]byte, uint32) {
	n := len(img)
	img = bytes.TrimLeft(img, "\x00")
	return bytes.TrimRight(img, "\x00"), base + uint32(n-len(img))
}

func encodeData(segs []segment) []byte {
	b := appendULEB(nil, uint64(len(segs)))
	for _, s := range segs {
		b = append(b, 0, opI32Const)
		b = appendSLEB(b, int64(int32(s.off)))
		b = append(b, opEnd)
		b = appendULEB(b, uint64(len(s.data)))
		b = append(b, s.data...)
	}
	return b
}

func appendULEB(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// reader decodes the binary format; its first error sticks and later reads
// return zero values.
type reader struct {
	b   []byte
	off int
	err error
}

var errTruncated = errors.New("truncated")

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.off >= len(r.b) {
		r.err = errTruncated
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)-r.off {
		r.err = errTruncated
		return nil
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b
}

// u32 reads an unsigned LEB128 of at most 32 bits (5 bytes).
func (r *reader) u32() uint32 {
	var v uint64
	for shift := 0; shift < 35; shift += 7 {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			if v > 1<<32-1 {
				break
			}
			return uint32(v)
		}
	}
	r.err = errors.New("bad u32 at " + strconv.Itoa(r.off))
	return 0
}

// s32 reads a signed LEB128 of at most 32 bits (5 bytes).
func (r *reader) s32() int32 {
	var v int64
	for shift := 0; shift < 35; shift += 7 {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		v |= int64(c&0x7f) << shift
		if c < 0x80 {
			if c&0x40 != 0 {
				v |= -1 << (shift + 7)
			}
			if v < -1<<31 || v > 1<<31-1 {
				break
			}
			return int32(v)
		}
	}
	r.err = errors.New("bad s32 at " + strconv.Itoa(r.off))
	return 0
}
