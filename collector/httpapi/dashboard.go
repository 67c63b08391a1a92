package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/config"
	"github.com/itlmon/itlmon/collector/query"
)

// DashboardConfig configures RegisterDashboard.
type DashboardConfig struct {
	Conn query.Conn // ClickHouse (the rollup); nil answers 503
	// Available, when set, gates the API as Config.Available does.
	Available func() error
	HasSite   func(key string) bool // nil: every key is accepted
	Logger    zerolog.Logger
	Now       func() time.Time
}

// RegisterDashboard mounts the dashboard's read API (the page itself is
// web/static/dashboard, served with the other static files at /dashboard/):
//
//	GET /api/sites?since=30d                                  site keys with data
//	GET /api/summary?site=KEY&since=1h[&until=5m][&by=browser][&where=country=DE...]
//	    {"report": Report, "by": "browser", "rows": [{"key": "Chrome", "report": Report}]}
//	GET /api/timeseries?site=KEY&since=6h[&step=5m][&where=...]
//	    {"from", "to", "step_s", "points": [{"t", "streams", "itl_p50_ms", "itl_p95_ms", "itl_p99_ms", ...}]}
//
// Every value is validated before it reaches SQL, and reaches it only as a
// query argument (collector/query).
func RegisterDashboard(mux *http.ServeMux, cfg DashboardConfig) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	d := &dashboard{cfg: cfg}
	mux.HandleFunc("GET /api/sites", d.sites)
	mux.HandleFunc("GET /api/summary", d.summary)
	mux.HandleFunc("GET /api/timeseries", d.timeseries)
}

type dashboard struct{ cfg DashboardConfig }

// dashFilter parses site, since, until and where into a query.Filter, or
// writes the 4xx and returns false.
func (d *dashboard) dashFilter(w http.ResponseWriter, r *http.Request) (query.Filter, bool) {
	q := r.URL.Query()
	f := query.Filter{Site: q.Get("site"), Where: map[string]string{}}
	if f.Site == "" {
		writeError(w, http.StatusBadRequest, "missing site parameter: use ?site=KEY")
		return f, false
	}
	if d.cfg.HasSite != nil && !d.cfg.HasSite(f.Site) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("unknown site key %q", f.Site))
		return f, false
	}
	since, ok := dashSpan(w, q.Get("since"), "since", DefaultSince)
	if !ok {
		return f, false
	}
	until, ok := dashSpan(w, q.Get("until"), "until", 0)
	if !ok {
		return f, false
	}
	if until >= since {
		writeError(w, http.StatusBadRequest, "until must be shorter than since (both are ages, like since=6h&until=1h)")
		return f, false
	}
	now := d.cfg.Now()
	f.Since, f.Until = now.Add(-since).UTC(), now.Add(-until).UTC()
	for _, kv := range q["where"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			k, v, ok = strings.Cut(kv, ":")
		}
		if !ok || k == "" {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("bad where %q: want dim=value", kv))
			return f, false
		}
		f.Where[k] = v
	}
	if err := f.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return f, false
	}
	return f, true
}

func dashSpan(w http.ResponseWriter, s, name string, def time.Duration) (time.Duration, bool) {
	if s == "" {
		return def, true
	}
	v, err := config.ParseDuration(s)
	if err != nil || v < 0 || v > MaxSince {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("bad %s %q: want a duration up to 366d, like 10m, 2h or 7d", name, s))
		return 0, false
	}
	return v, true
}

func (d *dashboard) ready(w http.ResponseWriter) bool {
	if d.cfg.Conn == nil {
		writeError(w, http.StatusServiceUnavailable, "no ClickHouse connection")
		return false
	}
	return !unavailable(w, d.cfg.Available)
}

func (d *dashboard) fail(w http.ResponseWriter, r *http.Request, what string, err error) {
	if errors.Is(err, query.ErrBadFilter) {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if r.Context().Err() != nil {
		return // the client went away
	}
	d.cfg.Logger.Error().Err(err).Str("path", r.URL.Path).Msg(what)
	writeError(w, http.StatusServiceUnavailable, what+": clickhouse unavailable")
}

func (d *dashboard) sites(w http.ResponseWriter, r *http.Request) {
	if !d.ready(w) {
		return
	}
	since, ok := dashSpan(w, r.URL.Query().Get("since"), "since", 30*24*time.Hour)
	if !ok {
		return
	}
	sites, err := query.Sites(r.Context(), d.cfg.Conn, d.cfg.Now().Add(-since))
	if err != nil {
		d.fail(w, r, "read sites", err)
		return
	}
	if d.cfg.HasSite != nil {
		kept := sites[:0]
		for _, s := range sites {
			if d.cfg.HasSite(s) {
				kept = append(kept, s)
			}
		}
		sites = kept
	}
	if sites == nil {
		sites = []string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"sites": sites})
}

type summaryResponse struct {
	Site   string        `json:"site"`
	From   time.Time     `json:"from"`
	To     time.Time     `json:"to"`
	Where  any           `json:"where"`
	Report query.Report  `json:"report"`
	By     string        `json:"by,omitempty"`
	Rows   []query.Group `json:"rows,omitempty"`
}

func (d *dashboard) summary(w http.ResponseWriter, r *http.Request) {
	if !d.ready(w) {
		return
	}
	f, ok := d.dashFilter(w, r)
	if !ok {
		return
	}
	rep, err := query.Summary(r.Context(), d.cfg.Conn, f)
	if err != nil {
		d.fail(w, r, "read summary", err)
		return
	}
	resp := summaryResponse{Site: f.Site, From: f.Since, To: f.Until, Where: f.Where, Report: rep}
	if by := r.URL.Query().Get("by"); by != "" {
		rows, err := query.Breakdown(r.Context(), d.cfg.Conn, f, by)
		if err != nil {
			d.fail(w, r, "read breakdown", err)
			return
		}
		resp.By, resp.Rows = by, rows
		if resp.Rows == nil {
			resp.Rows = []query.Group{}
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

type timeseriesResponse struct {
	Site   string        `json:"site"`
	From   time.Time     `json:"from"`
	To     time.Time     `json:"to"`
	StepS  int64         `json:"step_s"`
	Points []query.Point `json:"points"`
}

func (d *dashboard) timeseries(w http.ResponseWriter, r *http.Request) {
	if !d.ready(w) {
		return
	}
	f, ok := d.dashFilter(w, r)
	if !ok {
		return
	}
	step := query.StepFor(f.Until.Sub(f.Since))
	if s := r.URL.Query().Get("step"); s != "" {
		v, err := config.ParseDuration(s)
		if err != nil || v < time.Minute || v%time.Minute != 0 || f.Until.Sub(f.Since)/v > 5000 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("bad step %q: want whole minutes (1m, 5m, 1h, 1d) and at most 5000 points", s))
			return
		}
		step = v
	}
	pts, err := query.Timeseries(r.Context(), d.cfg.Conn, f, step)
	if err != nil {
		d.fail(w, r, "read timeseries", err)
		return
	}
	if pts == nil {
		pts = []query.Point{}
	}
	writeJSON(w, http.StatusOK, timeseriesResponse{Site: f.Site, From: f.Since, To: f.Until, StepS: int64(step / time.Second), Points: pts})
}
