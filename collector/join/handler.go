package join

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/itlmon/itlmon/collector/secret"
	"github.com/itlmon/itlmon/origin"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// MaxOriginBody bounds one POST /v1/origin body.
const MaxOriginBody = 4 << 20

// Keys returns the shared origin key of a site, false when the site is
// unknown or has none (then its origin reports are refused).
type Keys func(site string) (key secret.Token, ok bool)

// Handler serves POST /v1/origin?site=KEY: a beacon KindOrigin message from
// an origin reporter (package origin) or an edge Worker (wasm/edge; its
// timelines carry beacon.VantageEdge and are stored as such), authenticated
// by the site's shared key in the X-Itlmon-Key header (server to server; no
// CORS). 204 once the timelines are durable. A batch that can never be
// stored is refused once with a 4xx, which the senders drop (and count)
// instead of sending it again: 400 for a malformed body, another major
// version or a limit broken, 413 for an oversized body, 422 for timelines
// that cannot be stored (ErrUnstorable). 403 for a wrong site or key. 503
// when storage failed: the senders retry, as they do on 429, any other 5xx
// and network errors.
//
// A batch of a newer minor version is read as far as this collector's
// minor goes and stored whole: each timeline's section as it arrived,
// a vantage this collector does not know included (Intake.AddOriginWire).
func (j *Intake) Handler(keys Keys) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "origin: POST only", http.StatusMethodNotAllowed)
			return
		}
		site := r.URL.Query().Get("site")
		want, ok := keys(site)
		if !ok || want.IsZero() {
			http.Error(w, "origin: unknown site or no origin key configured for it", http.StatusForbidden)
			return
		}
		if !want.Equal(r.Header.Get(origin.HeaderKey)) {
			http.Error(w, "origin: wrong or missing "+origin.HeaderKey, http.StatusForbidden)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxOriginBody))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				j.refuse(w, "origin: body over "+strconv.Itoa(MaxOriginBody)+" bytes", http.StatusRequestEntityTooLarge)
				return
			}
			// The body was cut off (the sender or the network went
			// away): not the batch's fault, so not counted as refused.
			http.Error(w, "origin: read body: "+err.Error(), http.StatusBadRequest)
			return
		}
		b, wires, err := beacon.DecodeOriginBatchWire(body, beacon.DefaultLimits)
		if err != nil {
			j.refuse(w, "origin: "+err.Error(), http.StatusBadRequest)
			return
		}
		if b.Site != "" && b.Site != site {
			j.refuse(w, "origin: batch is for site "+strconv.Quote(b.Site)+", not "+strconv.Quote(site), http.StatusBadRequest)
			return
		}
		if err := j.AddOriginWire(r.Context(), site, b, wires); err != nil {
			if errors.Is(err, ErrUnstorable) {
				j.refuse(w, "origin: "+err.Error(), http.StatusUnprocessableEntity)
				return
			}
			http.Error(w, "origin: store: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// refuse answers a batch that can never be stored, counts it and logs it
// (at most one line a second: a broken sender repeats itself).
func (j *Intake) refuse(w http.ResponseWriter, msg string, code int) {
	j.refused.Add(1)
	j.refusedLog.Warn().Int("status", code).Str("why", msg).Msg("origin batch refused for good (the sender drops it)")
	http.Error(w, msg, code)
}

// Register mounts Handler(keys) on mux at origin.Path ("POST /v1/origin").
func (j *Intake) Register(mux *http.ServeMux, keys Keys) {
	mux.Handle("POST "+origin.Path, j.Handler(keys))
}

// StaticKeys serves Keys from a map of site -> shared origin key.
func StaticKeys(m map[string]secret.Token) Keys {
	return func(site string) (secret.Token, bool) {
		k, ok := m[site]
		return k, ok && !k.IsZero()
	}
}

// ParseOriginKey parses a "SITE=KEY" flag value (`--origin-key chat=s3cret`).
// Keys shorter than 16 bytes are refused: the key is all that authenticates
// an origin server's reports. An error never quotes the value (it may be a
// key without its "SITE=").
func ParseOriginKey(s string) (site string, key secret.Token, err error) {
	site, k, ok := strings.Cut(s, "=")
	switch {
	case !ok || site == "":
		return "", secret.Token{}, errors.New("origin key: want SITE=KEY")
	case len(k) < MinKeyLen:
		return "", secret.Token{}, fmt.Errorf("origin key for site %s: %d bytes, want at least %d", site, len(k), MinKeyLen)
	}
	return site, secret.New(k), nil
}

// MinKeyLen is the shortest shared origin key ParseOriginKey accepts.
const MinKeyLen = 16
