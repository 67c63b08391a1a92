package beacon

import (
	"errors"
	"strconv"
)

// Sentinel errors. Every decoding error is a *DecodeError wrapping exactly one
// of them, so callers count rejections by reason with errors.Is.
var (
	ErrMagic     = errors.New("beacon: not a beacon message (bad magic)")
	ErrVersion   = errors.New("beacon: unsupported version")
	ErrKind      = errors.New("beacon: unexpected message kind")
	ErrTruncated = errors.New("beacon: truncated")
	ErrLimit     = errors.New("beacon: limit exceeded")
	// ErrTooBig: the whole message exceeds Limits.MaxBytes. errors.Is(err,
	// ErrLimit) also holds for it.
	ErrTooBig  = errors.New("beacon: message too big")
	ErrInvalid = errors.New("beacon: invalid value")
)

// DecodeError says which field of a message is wrong and why:
//
//	beacon: record 3: page_path: length 5000 exceeds limit 2048
//
// Record is the 0-based index of the record in its batch, -1 for fields
// outside records. Field is a snake_case path ("client.user_agent",
// "itl.buckets", "timeline[7].at_us"). Err is one of the sentinel errors.
type DecodeError struct {
	Record int
	Field  string
	Reason string
	Err    error
}

func (e *DecodeError) Error() string {
	s := "beacon: "
	if e.Record >= 0 {
		s += "record " + strconv.Itoa(e.Record) + ": "
	}
	return s + e.Field + ": " + e.Reason
}

// Unwrap returns the sentinel error.
func (e *DecodeError) Unwrap() error { return e.Err }

// Is makes ErrTooBig match ErrLimit as well.
func (e *DecodeError) Is(target error) bool { return target == ErrLimit && e.Err == ErrTooBig }

// Reject is the reason code an Ack carries when the collector did not take a
// batch. The browser module retries RejectRetry and RejectOverload later and
// drops the batch for any other code.
type Reject uint8

const (
	RejectNone      Reject = iota // accepted (the batch is durable)
	RejectMalformed               // truncated or invalid encoding, bad magic or kind
	RejectVersion                 // unsupported version
	RejectLimit                   // a limit was exceeded (size, records, buckets, ...)
	RejectSite                    // unknown site key or origin not allowed
	RejectOverload                // the collector is shedding load: retry later
	RejectRetry                   // storage failed: retry later
)

var rejectNames = [...]string{"none", "malformed", "version", "limit", "site", "overload", "retry"}

// String returns a short lowercase name, suitable as a metric label.
func (r Reject) String() string {
	if int(r) < len(rejectNames) {
		return rejectNames[r]
	}
	return "reject(" + strconv.Itoa(int(r)) + ")"
}

// RejectFor maps a decoding error onto the Reject code to acknowledge it with.
func RejectFor(err error) Reject {
	switch {
	case err == nil:
		return RejectNone
	case errors.Is(err, ErrVersion):
		return RejectVersion
	case errors.Is(err, ErrLimit):
		return RejectLimit
	}
	return RejectMalformed
}
