package server

import (
	"fmt"
	"net/url"
	"strings"
)

// SecretDSN is a ClickHouse DSN that keeps its secrets out of log lines,
// error texts and flag usage: String, Format (every verb), MarshalText and
// MarshalJSON give the redacted form, and only Reveal gives the DSN itself,
// for the driver. The zero value is the empty DSN. It is a flag.Value.
type SecretDSN struct{ raw string }

// NewSecretDSN wraps dsn ("" is no DSN: the embedded engine).
func NewSecretDSN(dsn string) SecretDSN { return SecretDSN{raw: dsn} }

// Reveal returns the DSN with its secrets, for clickhouse-go and nothing else.
func (d SecretDSN) Reveal() string { return d.raw }

// IsZero reports whether no DSN was given.
func (d SecretDSN) IsZero() bool { return d.raw == "" }

func (d SecretDSN) String() string { return redactDSN(d.raw) }
func (d SecretDSN) Format(f fmt.State, verb rune) {
	fmt.Fprintf(f, fmt.FormatString(f, verb), redactDSN(d.raw))
}
func (d SecretDSN) MarshalText() ([]byte, error) { return []byte(redactDSN(d.raw)), nil }
func (d *SecretDSN) Set(v string) error          { d.raw = v; return nil }
func (d SecretDSN) hasScheme(schemes ...string) bool {
	for _, s := range schemes {
		if strings.HasPrefix(d.raw, s+"://") {
			return true
		}
	}
	return false
}

// redacted is what a secret becomes.
const redacted = "***"

// publicDSNParams are the DSN query parameters clickhouse-go reads that
// carry no secret (clickhouse_options.go, Options.fromDSN). Every other
// value is redacted: password, http_proxy (which may hold its own
// userinfo), and the unknown parameters, which the driver passes on as
// ClickHouse settings and which may be anything.
var publicDSNParams = map[string]bool{
	"hosts": true, "alt_hosts": true, "debug": true, "compress": true, "compress_level": true,
	"max_compression_buffer": true, "dial_timeout": true, "block_buffer_size": true, "read_timeout": true,
	"secure": true, "skip_verify": true, "tls_server_name": true, "connection_open_strategy": true,
	"max_open_conns": true, "max_idle_conns": true, "conn_max_lifetime": true, "username": true,
	"database": true, "client_info_product": true, "http_path": true,
}

// redactDSN returns dsn with its secrets replaced by "***": the userinfo's
// password, the value of every query parameter not in publicDSNParams, the
// fragment, and a parameter whose name is not a plain identifier (it may
// be a piece of a password). A DSN net/url cannot parse keeps only its
// scheme; text that is not scheme://... is redacted whole. It never fails and never returns a secret
// of dsn, well-formed or not.
func redactDSN(dsn string) string {
	if dsn == "" {
		return ""
	}
	scheme, rest, ok := strings.Cut(dsn, "://")
	if !ok || !isIdent(scheme) {
		return redacted
	}
	if _, err := url.Parse(dsn); err != nil {
		// Where a malformed DSN's password ends is anyone's guess.
		return scheme + "://" + redacted
	}
	rest, frag, hasFrag := strings.Cut(rest, "#")
	// The userinfo ends at the last '@' before the query: an unescaped '/'
	// or '@' may sit inside a password, and the query may itself hold '@'
	// (an http_proxy URL).
	hostPart, query, hasQuery := strings.Cut(rest, "?")
	if at := strings.LastIndex(hostPart, "@"); at >= 0 {
		user, _, hasPass := strings.Cut(hostPart[:at], ":")
		if hasPass {
			user += ":" + redacted
		}
		if strings.ContainsAny(user, "/?#") { // not a user name: a malformed DSN
			user = redacted
		}
		hostPart = user + hostPart[at:]
	}
	var b strings.Builder
	b.WriteString(scheme + "://" + hostPart)
	if hasQuery {
		b.WriteByte('?')
		for i, p := range strings.Split(query, "&") {
			if i > 0 {
				b.WriteByte('&')
			}
			k, v, hasVal := strings.Cut(p, "=")
			switch {
			case !isIdent(k):
				b.WriteString(redacted)
			case !hasVal:
				b.WriteString(k)
			case publicDSNParams[strings.ToLower(k)]:
				b.WriteString(k + "=" + v)
			default:
				b.WriteString(k + "=" + redacted)
			}
		}
	}
	if hasFrag && frag != "" {
		b.WriteString("#" + redacted)
	}
	return b.String()
}

// isIdent reports whether s is a non-empty run of ASCII letters, digits,
// '_', '-', '.' and '+' (a URL scheme or a parameter name).
func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '+') {
			return false
		}
	}
	return true
}
