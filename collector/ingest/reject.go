package ingest

import (
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Rejection reasons: the fixed label set of itlmon_ingest_rejected_total.
const (
	ReasonBadRequest      = "bad_request"      // missing site parameter, wrong method
	ReasonSite            = "site"             // unknown site key
	ReasonOrigin          = "origin"           // Origin not allowed for the site (or missing)
	ReasonSiteMismatch    = "site_mismatch"    // batch names another site than the connection
	ReasonTooBig          = "too_big"          // frame or body over the byte limit
	ReasonBodyTimeout     = "body_timeout"     // POST body not in full within Config.BodyTimeout (stalled or cut off)
	ReasonTextFrame       = "text_frame"       // WebSocket text frame; beacons are binary
	ReasonVersion         = "version"          // unknown wire format version
	ReasonKind            = "kind"             // a message kind the endpoint does not take
	ReasonDecodeMagic     = "decode_magic"     // not a beacon message at all (random bytes)
	ReasonDecodeTruncated = "decode_truncated" // message ends early
	ReasonDecodeLimit     = "decode_limit"     // a count or length over Limits (records, buckets, strings)
	ReasonDecodeInvalid   = "decode_invalid"   // a field holds an impossible value
	ReasonDecode          = "decode"           // any other decoding error
	ReasonRecord          = "record"           // one record left out of an accepted batch (its own bytes were wrong)
	ReasonRateLimit       = "rate_limit"       // over the per-connection or per-site records/s
	ReasonShed            = "shed"             // over the memory budget, or the sink's queue full: retry later
	ReasonStore           = "store"            // the store could not make the batch durable
	ReasonSlowConsumer    = "slow_consumer"    // the client does not read its acks
	ReasonShutdown        = "shutdown"         // the collector is shutting down
)

var allReasons = []string{ReasonBadRequest, ReasonSite, ReasonOrigin, ReasonSiteMismatch, ReasonTooBig,
	ReasonBodyTimeout, ReasonTextFrame, ReasonVersion, ReasonKind, ReasonDecodeMagic, ReasonDecodeTruncated, ReasonDecodeLimit,
	ReasonDecodeInvalid, ReasonDecode, ReasonRecord, ReasonRateLimit, ReasonShed, ReasonStore,
	ReasonSlowConsumer, ReasonShutdown}

// onceLog logs at most one line per reason per interval, with the number of
// occurrences since the last line, so a flood of bad frames costs a counter
// increment each, not a log line each.
type onceLog struct {
	log      zerolog.Logger
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	last map[string]*logState
}

type logState struct {
	at         time.Time
	suppressed int
}

func (l *onceLog) warn(reason, detail string) {
	now := l.now()
	l.mu.Lock()
	st := l.last[reason]
	if st == nil {
		st = &logState{}
		l.last[reason] = st
	}
	if !st.at.IsZero() && now.Sub(st.at) < l.interval {
		st.suppressed++
		l.mu.Unlock()
		return
	}
	suppressed := st.suppressed
	st.at, st.suppressed = now, 0
	l.mu.Unlock()
	l.log.Warn().Str("reason", reason).Str("detail", detail).Int("suppressed", suppressed).
		Dur("interval", l.interval).Msg("ingest rejected")
}
