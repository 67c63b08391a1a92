// Package dimension is the one list of the dimensions itlmon breaks streams
// down by: the browser, the region, the model, the release, ... Every part
// that names dimensions reads it: the read side (collector/query: the keys
// of where=, by= and dim=, and the columns they become), the dashboard
// (served as GET /api/dimensions, which builds its tabs and its compare
// list from it), the Grafana dashboard's variables (collector/grafana) and
// the OpenTelemetry export's attributes (collector/otlp).
//
// The schema cannot read Go: the rollups' materialized views
// (schema/*.sql) name the rollup dimensions themselves, and this package's
// test, on the real engine, checks that they group by exactly the
// dimensions marked Rollup here and that every Column is a column of
// itl_streams, of itl_streams_sample (the comparison's sample) and of
// itl_origin, and that both re-chunking views (itl_rechunk_1h) list every
// dimension.
// docs/development.md says how to add one.
//
// The package imports nothing, so every other package can import it.
package dimension

// Dimension is one way to split streams.
type Dimension struct {
	// Key names it in the API (where=KEY=value, by=KEY, dim=KEY) and in the
	// dashboard's URL.
	Key string `json:"key"`
	// Label is what a person reads: the dashboard's tab, Grafana's option.
	Label string `json:"label"`
	// Title, when set, explains it in a tooltip.
	Title string `json:"title,omitempty"`
	// Column is the itl_streams column holding its value (LowCardinality
	// String); the rollups' column has the same name.
	Column string `json:"column"`
	// Rollup: the rollups (itl_rollup_1m, itl_rollup_1h, itl_rollup_1h_dim,
	// itl_rollup_1d_dim) group by it, so the summary, time series, causes, heatmap and
	// breakdowns read it; else only the reads of itl_streams do
	// (re-chunking, compare, values).
	Rollup bool `json:"rollup"`
	// OTLP is the attribute the OpenTelemetry export puts it in ("": not
	// exported; each one multiplies the exported series). Only a rollup
	// dimension can be exported: the export reads itl_rollup_1m.
	OTLP string `json:"otlp,omitempty"`
	// Grafana: the Grafana dashboard has a variable filtering by it. Every
	// rollup dimension is an option of its breakdown anyway.
	Grafana bool `json:"grafana,omitempty"`
}

// all is the registry, in the order the dashboard shows it.
var all = []Dimension{
	{Key: "region", Label: "Region", Column: "region", Rollup: true, OTLP: "itlmon.region", Grafana: true},
	{Key: "country", Label: "Country", Column: "country", Rollup: true},
	{Key: "browser", Label: "Browser", Column: "browser", Rollup: true, OTLP: "user_agent.name", Grafana: true},
	{Key: "os", Label: "OS", Column: "os", Rollup: true},
	{Key: "device", Label: "Device", Column: "device", Rollup: true},
	{Key: "model", Label: "Model", Column: "model", Rollup: true, OTLP: "gen_ai.request.model", Grafana: true},
	{Key: "release", Label: "Release", Column: "release", Rollup: true},
	{Key: "colo", Label: "Colo", Title: "the edge data centre (with the edge Worker)", Column: "colo", Rollup: true},
	{Key: "api_origin", Label: "API origin", Title: "the origin of the URL the page fetched", Column: "url_origin"},
	{Key: "http_proto", Label: "HTTP protocol", Column: "http_proto"},
}

// All returns every dimension, in the dashboard's order. The slice is the
// caller's.
func All() []Dimension {
	return append([]Dimension(nil), all...)
}

// Rollup returns the dimensions the rollups group by, in All's order.
func Rollup() []Dimension {
	var out []Dimension
	for _, d := range all {
		if d.Rollup {
			out = append(out, d)
		}
	}
	return out
}

// OTLP returns the dimensions the OpenTelemetry export carries, in All's
// order.
func OTLP() []Dimension {
	var out []Dimension
	for _, d := range all {
		if d.OTLP != "" {
			out = append(out, d)
		}
	}
	return out
}

// Lookup returns the dimension named key.
func Lookup(key string) (Dimension, bool) {
	for _, d := range all {
		if d.Key == key {
			return d, true
		}
	}
	return Dimension{}, false
}
