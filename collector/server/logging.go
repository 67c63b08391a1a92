package server

import (
	"io"
	"log"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// NewLogger returns a zerolog logger: JSON lines, or the console writer when
// format is "console" or "auto" on a terminal. format and level were validated.
func NewLogger(format, level string, w io.Writer) zerolog.Logger {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		lvl = zerolog.InfoLevel
	}
	zerolog.TimeFieldFormat = time.RFC3339Nano
	if format == "console" || (format == "auto" && isTerminal(w)) {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000"}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// newStdLogger adapts zerolog for http.Server.ErrorLog (TLS handshake and
// hijack errors): warn level, one event per line, client addresses redacted
// (net/http names the peer, e.g. "http: panic serving 1.2.3.4:5678"; itlmon
// never logs or stores client IPs).
func newStdLogger(l zerolog.Logger) *log.Logger {
	return log.New(stdWriter{l}, "", 0)
}

type stdWriter struct{ l zerolog.Logger }

// peerAddr matches an IPv4 or bracketed IPv6 address with a port, or a
// bare IPv6 address.
var peerAddr = regexp.MustCompile(`\[[0-9a-fA-F:.%]+\](:\d+)?|\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b|\b[0-9a-fA-F]{0,4}(:[0-9a-fA-F]{0,4}){2,7}\b`)

func (w stdWriter) Write(p []byte) (int, error) {
	w.l.Warn().Msg(redactAddrs(strings.TrimSpace(string(p))))
	return len(p), nil
}

// redactAddrs replaces network addresses in s with "[addr]".
func redactAddrs(s string) string { return peerAddr.ReplaceAllString(s, "[addr]") }
