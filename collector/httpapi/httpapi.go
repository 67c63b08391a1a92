// Package httpapi is the collector's HTTP surface apart from ingest: the
// stream read-back API, health and readiness, Prometheus metrics, the
// browser module's assets (CORS-open, precompressed) and the embedded pages.
//
// Routes:
//
//	GET /api/streams?site=KEY&since=10m&limit=100  latest stream records, JSON
//	GET /healthz                                    the process is up
//	GET /readyz                                     ready or not, no more (public)
//	GET /api/health                                 ready or not, and why not (read side)
//	GET /metrics                                    Prometheus
//	GET /itl.js, /wasm_exec.js, /itl.wasm           the browser module (Access-Control-Allow-Origin: *)
//	GET /demo/...                                   the demo chat (only with --demo)
//	GET /...                                        web/static (landing page, dashboard)
//
// The ingest endpoints (/v1/ws, /v1/beacon) are mounted by the caller.
package httpapi

import (
	"context"
	"encoding/json"
	"io/fs"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector"
)

// Config configures New. Every field is optional: a nil part answers 503
// (Streams, Ready) or is not mounted (Demo, Static, Dist).
type Config struct {
	Streams collector.StreamReader
	// Available, when set, gates the read API: while it returns an error
	// (ClickHouse down, schema not applied yet) /api/streams answers 503
	// "clickhouse unavailable: ..." without querying.
	Available func() error
	HasSite   func(key string) bool // nil: every key is accepted
	Ready     func(ctx context.Context) error
	Gatherer  prometheus.Gatherer
	Demo      http.Handler // mounted at /demo/
	Static    fs.FS        // served at /
	Dist      fs.FS        // itl.wasm (+ .br, .gz), wasm_exec.js
	Logger    zerolog.Logger
	Now       func() time.Time
}

// Limits of /api/streams.
const (
	DefaultStreamsLimit = 100
	MaxStreamsLimit     = 1000
	DefaultSince        = time.Hour
	MaxSince            = 366 * 24 * time.Hour
	readyTimeout        = 3 * time.Second
)

// New returns a mux with the routes above; the caller adds ingest's.
func New(cfg Config) (*http.ServeMux, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	// /readyz is public (a load balancer's probe): it says ready or not and
	// nothing more, since the reason (ClickHouse's error) names internal
	// hosts. /api/health, on the read side, says why.
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) { serveReady(w, r, cfg.Ready, false) })
	mux.HandleFunc("GET /api/health", func(w http.ResponseWriter, r *http.Request) { serveReady(w, r, cfg.Ready, true) })
	if cfg.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{
			ErrorLog: promLogger{cfg.Logger}, EnableOpenMetrics: true}))
	}
	mux.Handle("GET /api/streams", &streamsHandler{cfg: cfg})
	if err := mountAssets(mux, cfg.Dist, cfg.Static); err != nil {
		return nil, err
	}
	if cfg.Demo != nil {
		mux.Handle("/demo/", cfg.Demo)
	}
	if cfg.Static != nil {
		// "/" without a method: "GET /" would conflict with "/demo/".
		mux.Handle("/", getOnly(noSniff(pageHeaders(http.FileServerFS(cfg.Static)))))
	}
	return mux, nil
}

// serveReady answers 200 "ready", or 503 "not ready" with the reason when
// detail is set.
func serveReady(w http.ResponseWriter, r *http.Request, ready func(context.Context) error, detail bool) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if ready == nil {
		w.Write([]byte("ready\n"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	if err := ready(ctx); err != nil {
		text := "not ready"
		if detail {
			text += ": " + err.Error()
		}
		http.Error(w, text, http.StatusServiceUnavailable)
		return
	}
	w.Write([]byte("ready\n"))
}

func getOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func noSniff(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		h.ServeHTTP(w, r)
	})
}

type promLogger struct{ log zerolog.Logger }

func (l promLogger) Println(v ...any) { l.log.Error().Msgf("metrics: %v", v) }

// writeJSON writes v with status; errors are {"error": "..."}.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", apiCSP)
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// unavailable answers 503 when available (optional) reports an error.
func unavailable(w http.ResponseWriter, available func() error) bool {
	if available == nil {
		return false
	}
	if err := available(); err != nil {
		writeError(w, http.StatusServiceUnavailable, "clickhouse unavailable: "+err.Error())
		return true
	}
	return false
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
