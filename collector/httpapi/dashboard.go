package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/dimension"
	"github.com/itlmon/itlmon/collector/duration"
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
//	GET /api/dimensions                                       the dimensions (collector/dimension), in the dashboard's order
//	    {"dimensions": [{"key", "label", "title", "column", "rollup", "otlp", "grafana"}]}
//	GET /api/sites?since=30d                                  site keys with data
//	GET /api/summary?site=KEY&since=1h[&until=5m][&by=browser][&where=country=DE...]
//	    {"report": Report, "by": "browser", "rows": [{"key": "Chrome", "report": Report}]}
//	GET /api/timeseries?site=KEY&since=6h[&step=5m][&where=...]
//	    {"from", "to", "step_s", "points": [{"t", "streams", "itl_p50_ms", "itl_p95_ms", "itl_p99_ms", ...}]}
//	GET /api/causes?site=KEY&since=1h[&step=5m][&by=region][&where=...]
//	    stalls, stalled ms and TTFT causes per cause: per step ("points"), per value of by ("rows"), in all ("total")
//	GET /api/heatmap?site=KEY&since=1h[&step=5m][&where=...]
//	    the merged ITL histogram per step, in rows of 4 per doubling ("bins", "points": [{"t", "zero", "counts"}])
//	GET /api/rechunk?site=KEY&since=1h[&by=api_origin|http_proto|region|browser|...][&where=...]
//	    events per read, sub-floor gap share, coalesced-TTFT share, read patterns, flag and diagnosis per value
//	GET /api/worst?site=KEY&since=1h[&order=stalled|jank|ttft|gap][&limit=25][&where=...]
//	GET /api/stream?site=KEY&id=STREAM_ID
//	    one stream: its figures, stalls with causes, sampled timeline, the origin's emit times when joined
//	GET /api/compare?site=KEY&since=1d&dim=release&a=VALUE&b=VALUE[&where=...]
//	    per-stream TTFT, ITL p50/p99, stall share, tokens/s of b against a, Mann-Whitney U over streams
//	GET /api/values?site=KEY&since=1d&dim=release    the values of a dimension in range
//
// The summary, timeseries, causes and heatmap read the rollups only (the
// hourly ones for the whole hours of a range whose step allows, the minute
// one for the rest: see query.rollupSource). Re-chunking (its API origin and HTTP protocol are not rollup
// dimensions), the worst streams, one stream and the comparison (one value
// per stream) read itl_streams, always bounded by site and time, the leading
// columns of its ORDER BY key.
//
// Every value is validated before it reaches SQL, and reaches it only as a
// query argument (collector/query).
func RegisterDashboard(mux *http.ServeMux, cfg DashboardConfig) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	d := &dashboard{cfg: cfg}
	mux.HandleFunc("GET /api/dimensions", d.dimensions)
	mux.HandleFunc("GET /api/sites", d.sites)
	mux.HandleFunc("GET /api/summary", d.summary)
	mux.HandleFunc("GET /api/timeseries", d.timeseries)
	mux.HandleFunc("GET /api/causes", d.causes)
	mux.HandleFunc("GET /api/heatmap", d.heatmap)
	mux.HandleFunc("GET /api/rechunk", d.rechunk)
	mux.HandleFunc("GET /api/worst", d.worst)
	mux.HandleFunc("GET /api/stream", d.stream)
	mux.HandleFunc("GET /api/compare", d.compare)
	mux.HandleFunc("GET /api/values", d.values)
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
	v, err := duration.Parse(s)
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

// dimensions answers the registry: it needs no database, so the dashboard
// can build its tabs before ClickHouse answers.
func (d *dashboard) dimensions(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"dimensions": dimension.All()})
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
	step, ok := dashStep(w, r, f)
	if !ok {
		return
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

// dashStep parses ?step= for f's window, or picks one (query.StepFor);
// false when it wrote a 400.
func dashStep(w http.ResponseWriter, r *http.Request, f query.Filter) (time.Duration, bool) {
	step := query.StepFor(f.Until.Sub(f.Since))
	if s := r.URL.Query().Get("step"); s != "" {
		v, err := duration.Parse(s)
		if err != nil || v < time.Minute || v%time.Minute != 0 || f.Until.Sub(f.Since)/v > 5000 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("bad step %q: want whole minutes (1m, 5m, 1h, 1d) and at most 5000 points", s))
			return 0, false
		}
		step = v
	}
	return step, true
}

type causesResponse struct {
	Site   string             `json:"site"`
	From   time.Time          `json:"from"`
	To     time.Time          `json:"to"`
	StepS  int64              `json:"step_s"`
	Causes []string           `json:"causes"`
	Total  query.CauseCounts  `json:"total"`
	Points []query.CausePoint `json:"points"`
	By     string             `json:"by"`
	Rows   []query.CauseGroup `json:"rows"`
}

func (d *dashboard) causes(w http.ResponseWriter, r *http.Request) {
	if !d.ready(w) {
		return
	}
	f, ok := d.dashFilter(w, r)
	if !ok {
		return
	}
	step, ok := dashStep(w, r, f)
	if !ok {
		return
	}
	by := r.URL.Query().Get("by")
	if by == "" {
		by = "region"
	}
	pts, err := query.CauseTimeseries(r.Context(), d.cfg.Conn, f, step)
	if err != nil {
		d.fail(w, r, "read causes", err)
		return
	}
	rows, err := query.CauseBreakdown(r.Context(), d.cfg.Conn, f, by)
	if err != nil {
		d.fail(w, r, "read causes by "+by, err)
		return
	}
	resp := causesResponse{Site: f.Site, From: f.Since, To: f.Until, StepS: int64(step / time.Second), Causes: query.Causes,
		Points: orEmpty(pts), By: by, Rows: orEmpty(rows)}
	resp.Total = query.CauseCounts{ByCause: map[string]int64{}, StalledMs: map[string]float64{}, TTFT: map[string]int64{}}
	for _, p := range pts {
		resp.Total.Streams += p.Streams
		resp.Total.Stalls += p.Stalls
		for _, c := range query.Causes {
			resp.Total.ByCause[c] += p.ByCause[c]
			resp.Total.StalledMs[c] += p.StalledMs[c]
			resp.Total.TTFT[c] += p.TTFT[c]
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

type heatmapResponse struct {
	Site  string    `json:"site"`
	From  time.Time `json:"from"`
	To    time.Time `json:"to"`
	StepS int64     `json:"step_s"`
	query.Heatmap
}

func (d *dashboard) heatmap(w http.ResponseWriter, r *http.Request) {
	if !d.ready(w) {
		return
	}
	f, ok := d.dashFilter(w, r)
	if !ok {
		return
	}
	step, ok := dashStep(w, r, f)
	if !ok {
		return
	}
	h, err := query.ITLHeatmap(r.Context(), d.cfg.Conn, f, step)
	if err != nil {
		d.fail(w, r, "read heatmap", err)
		return
	}
	writeJSON(w, http.StatusOK, heatmapResponse{Site: f.Site, From: f.Since, To: f.Until, StepS: int64(step / time.Second), Heatmap: h})
}

type rechunkResponse struct {
	Site       string            `json:"site"`
	From       time.Time         `json:"from"`
	To         time.Time         `json:"to"`
	By         string            `json:"by"`
	Thresholds map[string]any    `json:"thresholds"`
	Rows       []query.Rechunk   `json:"rows"`
	Diagnoses  map[string]string `json:"diagnoses"`
}

func (d *dashboard) rechunk(w http.ResponseWriter, r *http.Request) {
	if !d.ready(w) {
		return
	}
	f, ok := d.dashFilter(w, r)
	if !ok {
		return
	}
	by := r.URL.Query().Get("by")
	if by == "" {
		by = "api_origin"
	}
	rows, err := query.RechunkBy(r.Context(), d.cfg.Conn, f, by)
	if err != nil {
		d.fail(w, r, "read rechunk", err)
		return
	}
	writeJSON(w, http.StatusOK, rechunkResponse{Site: f.Site, From: f.Since, To: f.Until, By: by, Rows: orEmpty(rows),
		Thresholds: map[string]any{"events_per_read": query.CoalescedEventsPerRead, "share": query.CoalescedShare, "pattern_share": query.PatternShare},
		Diagnoses:  query.Diagnoses})
}

type worstResponse struct {
	Site    string              `json:"site"`
	From    time.Time           `json:"from"`
	To      time.Time           `json:"to"`
	Order   string              `json:"order"`
	Streams []query.StreamBrief `json:"streams"`
}

func (d *dashboard) worst(w http.ResponseWriter, r *http.Request) {
	if !d.ready(w) {
		return
	}
	f, ok := d.dashFilter(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	order := q.Get("order")
	if order == "" {
		order = "stalled"
	}
	limit := 25
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > query.MaxWorst {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("bad limit %q: want 1 to %d", s, query.MaxWorst))
			return
		}
		limit = n
	}
	got, err := query.WorstStreams(r.Context(), d.cfg.Conn, f, order, limit)
	if err != nil {
		d.fail(w, r, "read worst streams", err)
		return
	}
	writeJSON(w, http.StatusOK, worstResponse{Site: f.Site, From: f.Since, To: f.Until, Order: order, Streams: orEmpty(got)})
}

func (d *dashboard) stream(w http.ResponseWriter, r *http.Request) {
	if !d.ready(w) {
		return
	}
	q := r.URL.Query()
	site, id := q.Get("site"), strings.ToLower(q.Get("id"))
	if site == "" || id == "" {
		writeError(w, http.StatusBadRequest, "want ?site=KEY&id=STREAM_ID (32 hex digits)")
		return
	}
	if d.cfg.HasSite != nil && !d.cfg.HasSite(site) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("unknown site key %q", site))
		return
	}
	got, err := query.StreamDetailOf(r.Context(), d.cfg.Conn, site, id)
	if errors.Is(err, query.ErrNotFound) {
		writeError(w, http.StatusNotFound, "no stream "+id+" in site "+site)
		return
	}
	if err != nil {
		d.fail(w, r, "read stream", err)
		return
	}
	writeJSON(w, http.StatusOK, got)
}

func (d *dashboard) compare(w http.ResponseWriter, r *http.Request) {
	if !d.ready(w) {
		return
	}
	f, ok := d.dashFilter(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	dim := q.Get("dim")
	if dim == "" {
		dim = "release"
	}
	a, b := q.Get("a"), q.Get("b")
	if !q.Has("a") || !q.Has("b") {
		writeError(w, http.StatusBadRequest, "want ?dim=release&a=VALUE&b=VALUE (b is compared against a)")
		return
	}
	c, err := query.Compare(r.Context(), d.cfg.Conn, f, dim, a, b)
	if err != nil {
		d.fail(w, r, "compare", err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// values lists the values of a dimension in range (for the compare view's
// pickers), most streams first.
func (d *dashboard) values(w http.ResponseWriter, r *http.Request) {
	if !d.ready(w) {
		return
	}
	f, ok := d.dashFilter(w, r)
	if !ok {
		return
	}
	dim := r.URL.Query().Get("dim")
	if dim == "" {
		dim = "release"
	}
	vals, err := query.Values(r.Context(), d.cfg.Conn, f, dim)
	if err != nil {
		d.fail(w, r, "read values", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"dim": dim, "values": orEmpty(vals)})
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
