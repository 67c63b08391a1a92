package server

import "testing"

func TestRedactAddrs(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http: panic serving 1.2.3.4:5678: boom", "http: panic serving [addr]: boom"},
		{"http: TLS handshake error from [2001:db8::1]:443: EOF", "http: TLS handshake error from [addr]: EOF"},
		{"read from 2001:db8::7 failed", "read from [addr] failed"},
		{"http: Server closed after 10:30", "http: Server closed after 10:30"},
	} {
		if got := redactAddrs(tc.in); got != tc.want {
			t.Errorf("redactAddrs(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
