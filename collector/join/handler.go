package join

import (
	"crypto/subtle"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/itlmon/itlmon/collector/origin"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// MaxOriginBody bounds one POST /v1/origin body.
const MaxOriginBody = 4 << 20

// Keys returns the shared origin key of a site, false when the site is
// unknown or has none (then its origin reports are refused).
type Keys func(site string) (key string, ok bool)

// Handler serves POST /v1/origin?site=KEY: a beacon KindOrigin message from
// an origin reporter (collector/origin), authenticated by the site's shared
// key in the X-Itlmon-Key header (server to server; no CORS). 204 once the
// timelines are durable; 400 for a malformed body (not retried by the
// reporter), 403 for a wrong site or key, 413 for an oversized body, 503 when
// storage failed (retried).
func (j *Joiner) Handler(keys Keys) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "origin: POST only", http.StatusMethodNotAllowed)
			return
		}
		site := r.URL.Query().Get("site")
		want, ok := keys(site)
		if !ok || want == "" {
			http.Error(w, "origin: unknown site or no origin key configured for it", http.StatusForbidden)
			return
		}
		if got := r.Header.Get(origin.HeaderKey); subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
			http.Error(w, "origin: wrong or missing "+origin.HeaderKey, http.StatusForbidden)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxOriginBody))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				http.Error(w, "origin: body over "+strconv.Itoa(MaxOriginBody)+" bytes", http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, "origin: read body: "+err.Error(), http.StatusBadRequest)
			return
		}
		b, err := beacon.DecodeOriginBatch(body, beacon.DefaultLimits)
		if err != nil {
			http.Error(w, "origin: "+err.Error(), http.StatusBadRequest)
			return
		}
		if b.Site != "" && b.Site != site {
			http.Error(w, "origin: batch is for site "+strconv.Quote(b.Site)+", not "+strconv.Quote(site), http.StatusBadRequest)
			return
		}
		if err := j.AddOrigin(r.Context(), site, b); err != nil {
			http.Error(w, "origin: store: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
