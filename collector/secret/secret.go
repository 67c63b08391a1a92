// Package secret holds credentials (the read token, the origin keys) so that
// no accident prints them: a Token formats as "***" with every fmt verb
// (%v, %+v, %#v, %s, %q, %x, ...), in JSON and text encodings, as a
// fmt.Stringer (which is also what a panic prints) and in flag usage. Only
// Reveal gives the value, and Equal compares a candidate with it in
// constant time.
package secret

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
)

// Redacted is what a set Token prints as.
const Redacted = "***"

// Token is a secret string. The zero value is no secret (it prints as "").
// *Token is a flag.Value.
type Token struct {
	// A pointer, so even a runtime dump of a struct holding a Token (a
	// goroutine trace's argument words) shows an address, never the
	// string's bytes or length.
	p *string
}

// New wraps s ("" is no secret).
func New(s string) Token {
	if s == "" {
		return Token{}
	}
	return Token{p: &s}
}

// Reveal returns the secret itself, for the one place that needs it (a
// request header to send); to check a credential use Equal.
func (t Token) Reveal() string {
	if t.p == nil {
		return ""
	}
	return *t.p
}

// IsZero reports whether no secret is set.
func (t Token) IsZero() bool { return t.p == nil }

// Len is the secret's length in bytes (for a minimum-length check).
func (t Token) Len() int { return len(t.Reveal()) }

// Equal reports whether got is the secret, in time that depends on
// neither (both are hashed first, so not even the length leaks). A zero
// Token equals nothing.
func (t Token) Equal(got string) bool {
	if t.p == nil {
		return false
	}
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(*t.p))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

func (t Token) redacted() string {
	if t.p == nil {
		return ""
	}
	return Redacted
}

// String is "***", or "" when no secret is set.
func (t Token) String() string { return t.redacted() }

// GoString is what %#v prints.
func (t Token) GoString() string { return fmt.Sprintf("secret.Token(%q)", t.redacted()) }

// Format prints the redacted form with every verb and flag.
func (t Token) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		fmt.Fprint(f, t.GoString())
		return
	}
	fmt.Fprintf(f, fmt.FormatString(f, verb), t.redacted())
}

// MarshalText gives the redacted form (encoding/json uses it too).
func (t Token) MarshalText() ([]byte, error) { return []byte(t.redacted()), nil }

// Set makes *Token a flag.Value.
func (t *Token) Set(v string) error { *t = New(v); return nil }
