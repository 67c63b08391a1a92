package gate

import (
	"math"
	"strconv"
	"time"

	"github.com/itlmon/itlmon/collector/query"
)

// Thresholds are the gate's limits. A zero limit is off, except where the
// defaults (DefaultThresholds) switch it on.
type Thresholds struct {
	MinTPSP50     float64       // tokens/s per stream, median; default 10
	MaxITLP99     time.Duration // chunk ITL p99; default 250 ms
	MaxJank       float64       // ITL p99/p50; default 5
	MaxTTFTP95    time.Duration // off unless given
	MaxStallShare float64       // share of gaps over 200 ms, 0..1; off unless SetStallShare
	SetStallShare bool          // MaxStallShare is on (a limit of 0 is meaningful)
	MaxErrorShare float64       // failed streams / streams (probe); default 0
	SetErrorShare bool
	// MaxBeforeHeadersShare: streams aborted or failed before the response
	// headers / streams; off unless SetBeforeHeadersShare.
	MaxBeforeHeadersShare float64
	SetBeforeHeadersShare bool
}

// DefaultThresholds match common practice: a reader keeps up above ~10
// tokens/s, a 250 ms hitch is visible, and a p99 gap five times the median
// reads as stutter.
func DefaultThresholds() Thresholds {
	return Thresholds{MinTPSP50: 10, MaxITLP99: 250 * time.Millisecond, MaxJank: 5}
}

// Check is one threshold's outcome.
type Check struct {
	Name   string  `json:"name"`  // "ITL p99"
	Flag   string  `json:"flag"`  // "--max-itl-p99"
	Op     string  `json:"op"`    // "<=" or ">="
	Value  float64 `json:"value"` // in Unit
	Limit  float64 `json:"limit"`
	Unit   string  `json:"unit"` // "ms", "tokens/s", "ratio", "share"
	Pass   bool    `json:"pass"`
	Margin string  `json:"margin"` // "over by 162 ms (+65%)", "38 ms headroom"
}

// Evaluate checks r against t, in a fixed order.
func Evaluate(r query.Report, t Thresholds) []Check {
	var cs []Check
	if t.MinTPSP50 > 0 {
		cs = append(cs, atLeast("tokens/s p50", "--min-tps-p50", r.TokensPerSecP50, t.MinTPSP50, "tokens/s"))
	}
	if t.MaxITLP99 > 0 {
		cs = append(cs, atMost("ITL p99", "--max-itl-p99", ms(r.ITL.P99), ms(t.MaxITLP99), "ms"))
	}
	if t.MaxJank > 0 {
		cs = append(cs, atMost("jank (ITL p99/p50)", "--max-jank", r.Jank, t.MaxJank, "ratio"))
	}
	if t.MaxTTFTP95 > 0 {
		cs = append(cs, atMost("TTFT p95", "--max-ttft-p95", ms(r.TTFT.P95), ms(t.MaxTTFTP95), "ms"))
	}
	if t.SetStallShare {
		cs = append(cs, atMost("gaps over 200 ms", "--max-stall-share", r.StallShare, t.MaxStallShare, "share"))
	}
	if t.SetBeforeHeadersShare && r.Streams > 0 {
		cs = append(cs, atMost("ended before headers", "--max-before-headers-share", r.BeforeHeadersShare, t.MaxBeforeHeadersShare, "share"))
	}
	if t.SetErrorShare && r.Streams > 0 {
		cs = append(cs, atMost("failed streams", "--max-error-share", float64(r.Errors)/float64(r.Streams), t.MaxErrorShare, "share"))
	}
	return cs
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func atMost(name, flag string, v, limit float64, unit string) Check {
	c := Check{Name: name, Flag: flag, Op: "<=", Value: v, Limit: limit, Unit: unit, Pass: v <= limit}
	diff := v - limit
	if c.Pass {
		c.Margin = formatValue(-diff, unit) + " headroom"
	} else {
		c.Margin = "over by " + formatValue(diff, unit) + relative(diff, limit)
	}
	return c
}

func atLeast(name, flag string, v, limit float64, unit string) Check {
	c := Check{Name: name, Flag: flag, Op: ">=", Value: v, Limit: limit, Unit: unit, Pass: v >= limit}
	diff := limit - v
	if c.Pass {
		c.Margin = formatValue(-diff, unit) + " headroom"
	} else {
		c.Margin = "short by " + formatValue(diff, unit) + relative(-diff, limit)
	}
	return c
}

func relative(diff, limit float64) string {
	if limit == 0 {
		return ""
	}
	pct := diff / limit * 100
	s := strconv.FormatFloat(math.Abs(pct), 'f', 0, 64)
	if pct < 0 {
		return " (−" + s + "%)"
	}
	return " (+" + s + "%)"
}

// formatValue prints v in its unit, for tables and messages.
func formatValue(v float64, unit string) string {
	if v == 0 {
		v = 0 // no "-0.00"
	}
	switch unit {
	case "ms":
		return formatMs(v)
	case "share":
		return formatShare(v)
	case "tokens/s":
		return strconv.FormatFloat(v, 'f', 1, 64) + " tok/s"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func formatMs(v float64) string {
	switch a := math.Abs(v); {
	case a >= 10000:
		return strconv.FormatFloat(v/1000, 'f', 1, 64) + " s"
	case a >= 1000:
		return strconv.FormatFloat(v/1000, 'f', 2, 64) + " s"
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64) + " ms"
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64) + " ms"
	}
	return strconv.FormatFloat(v, 'f', 2, 64) + " ms"
}

func formatShare(v float64) string {
	p := v * 100
	if math.Abs(p) < 10 {
		return strconv.FormatFloat(p, 'f', 2, 64) + " %"
	}
	return strconv.FormatFloat(p, 'f', 1, 64) + " %"
}

// formatDur prints a latency; 0 (not measured) prints as "—".
func formatDur(d time.Duration) string {
	if d == 0 {
		return "—"
	}
	return formatMs(ms(d))
}
