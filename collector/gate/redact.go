package gate

import (
	"errors"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// redactor removes secrets (header values, URL userinfo and query) from
// anything the gate prints: reports, errors, progress.
type redactor struct{ secrets []string }

const redacted = "[redacted]"

func (r *redactor) add(secret string) {
	secret = strings.TrimSpace(secret)
	if len(secret) < 4 {
		return
	}
	r.secrets = append(r.secrets, secret)
	// "Bearer sk-..." also leaks as "sk-...": redact each word of it too.
	for _, f := range strings.Fields(secret) {
		if len(f) >= 8 {
			r.secrets = append(r.secrets, f)
		}
	}
	sort.Slice(r.secrets, func(i, j int) bool { return len(r.secrets[i]) > len(r.secrets[j]) })
}

func (r *redactor) String(s string) string {
	for _, sec := range r.secrets {
		s = strings.ReplaceAll(s, sec, redacted)
	}
	return s
}

// safeURL is u without userinfo, query and fragment, for reports and errors.
func safeURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	u.User = nil
	u.RawQuery = ""
	u.ForceQuery = false
	u.Fragment = ""
	return u.String()
}

// connFailure describes a failed request without its URL (which may carry a
// key in the query string): "dial tcp 127.0.0.1:1: connection refused".
func connFailure(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "connection refused"):
		return "connection refused"
	case strings.Contains(msg, "no such host"):
		return "no such host"
	case strings.Contains(msg, "deadline exceeded") || strings.Contains(msg, "Client.Timeout"):
		return "timed out before the response headers"
	case strings.Contains(msg, "certificate"):
		return "TLS certificate error: " + msg
	}
	return msg
}

// failureList is an error listing failure reasons with counts, most common first.
func failureList(m map[string]int) error {
	type kv struct {
		k string
		n int
	}
	var l []kv
	for k, n := range m {
		l = append(l, kv{k, n})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].n > l[j].n || l[i].n == l[j].n && l[i].k < l[j].k })
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(e.k)
		b.WriteString(" (")
		b.WriteString(strconv.Itoa(e.n))
		b.WriteString("×)")
	}
	return errors.New(b.String())
}
