package beacon

import "strconv"

// Version is the major version of the format: a decoder rejects any other
// with ErrVersion. It changes only when an existing field changes meaning or
// encoding.
const Version = 1

// Minor is the minor version this package writes. Minor versions only append
// fields at the end of a section (the client section, a record, an Ack) and
// flag bits; a decoder skips what a newer minor appended, and expects every
// field its own minor knows from a sender of the same or an older minor (see
// the package comment).
//
// Minor 1 appended end and headers_us to the record; minor 2 appended the
// vantage point and the edge's facts to the origin section (OriginBatch).
const Minor = 2

// The magic bytes: 0x89 is not ASCII, so text (JSON, an HTML error page) is
// never mistaken for a beacon.
const (
	magic0 = 0x89
	magic1 = 'I'
	magic2 = 'T'
)

// headerLen: magic (3), version, minor, kind.
const headerLen = 6

// Kind is the kind of a message, the header's last byte.
type Kind uint8

const (
	KindBatch  Kind = 1 // client records, browser -> collector (Batch)
	KindAck    Kind = 2 // collector -> browser (Ack)
	KindOrigin Kind = 3 // origin timelines, origin middleware -> collector (OriginBatch, origin.go)
	// New kinds take the next numbers; a decoder rejects kinds it does not
	// know with ErrKind.
	maxKind = KindOrigin
)

var kindNames = [...]string{"", "batch", "ack", "origin"}

// String returns a short lowercase name, suitable as a metric label.
func (k Kind) String() string {
	if k > 0 && k <= maxKind {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// appendHeader writes the message header of kind k.
func appendHeader(dst []byte, k Kind, minor uint8) []byte {
	return append(dst, magic0, magic1, magic2, Version, minor, byte(k))
}

// PeekKind reads the header of a message: its kind and major version. It
// fails with ErrMagic, ErrTruncated, ErrVersion (the kind and version are
// still returned) or ErrKind.
func PeekKind(src []byte) (Kind, uint8, error) {
	for i, m := range [...]byte{magic0, magic1, magic2} {
		if i < len(src) && src[i] != m {
			return 0, 0, &DecodeError{Record: -1, Field: "magic", Reason: "got " + hexBytes(src[:min(len(src), 3)]) + ", want 89 49 54", Err: ErrMagic}
		}
	}
	if len(src) < headerLen {
		return 0, 0, &DecodeError{Record: -1, Field: "header", Reason: "truncated", Err: ErrTruncated}
	}
	v, k := src[3], Kind(src[5])
	if v != Version {
		return k, v, &DecodeError{Record: -1, Field: "version", Reason: strconv.Itoa(int(v)) + ", this decoder reads " + strconv.Itoa(Version), Err: ErrVersion}
	}
	if k == 0 || k > maxKind {
		return k, v, &DecodeError{Record: -1, Field: "kind", Reason: "unknown kind " + strconv.Itoa(int(k)), Err: ErrKind}
	}
	return k, v, nil
}

// readHeader checks the header of a message that must be of kind want and
// returns the sender's minor version.
func readHeader(src []byte, want Kind) (uint8, error) {
	k, _, err := PeekKind(src)
	if err != nil {
		return 0, err
	}
	if k != want {
		return 0, &DecodeError{Record: -1, Field: "kind", Reason: k.String() + ", want " + want.String(), Err: ErrKind}
	}
	return src[4], nil
}

func hexBytes(b []byte) string {
	const digits = "0123456789abcdef"
	s := make([]byte, 0, 3*len(b))
	for i, c := range b {
		if i > 0 {
			s = append(s, ' ')
		}
		s = append(s, digits[c>>4], digits[c&15])
	}
	return string(s)
}

// Ack is a KindAck message: the collector's answer to one Batch. Reject is
// RejectNone when the batch is durable.
type Ack struct {
	Seq    uint64
	Reject Reject
}

// AppendBinary appends the encoding of a: header, uvarint seq, reject byte.
func (a Ack) AppendBinary(dst []byte) []byte {
	dst = appendHeader(dst, KindAck, Minor)
	dst = appendUvarint(dst, a.Seq)
	return append(dst, byte(a.Reject))
}

// DecodeAck decodes a KindAck message. Reject codes this package does not
// name are kept as they are (a newer collector may send them).
func DecodeAck(src []byte) (Ack, error) {
	minor, err := readHeader(src, KindAck)
	if err != nil {
		return Ack{}, err
	}
	r := reader{src: src, p: headerLen, rec: -1, minor: minor}
	a := Ack{Seq: r.uvarint("seq"), Reject: Reject(r.byte("reject"))}
	r.end("reject")
	if r.err != nil {
		return Ack{}, r.err
	}
	return a, nil
}
