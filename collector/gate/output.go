package gate

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/itlmon/itlmon/collector/query"
)

// Result is one gate run: what was measured, the report and the checks.
type Result struct {
	Source      string         `json:"source"` // "probe" or "rum"
	Target      string         `json:"target"` // redacted URL, or the RUM filter
	Concurrency int            `json:"concurrency,omitempty"`
	Elapsed     time.Duration  `json:"-"`
	Report      query.Report   `json:"report"`
	Checks      []Check        `json:"checks"`
	Pass        bool           `json:"pass"`
	Failures    map[string]int `json:"failed_streams,omitempty"` // by reason
}

// MarshalJSON adds elapsed in seconds.
func (r Result) MarshalJSON() ([]byte, error) {
	type plain Result
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // "<=" stays readable
	err := enc.Encode(struct {
		plain
		ElapsedSec float64 `json:"elapsed_s,omitempty"`
	}{plain(r), r.Elapsed.Seconds()})
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), err
}

func newResult(source, target string, rep query.Report, t Thresholds) Result {
	res := Result{Source: source, Target: target, Report: rep, Checks: Evaluate(rep, t), Pass: true}
	for _, c := range res.Checks {
		res.Pass = res.Pass && c.Pass
	}
	return res
}

// FailedChecks are the checks that did not pass.
func (r *Result) FailedChecks() []Check {
	var f []Check
	for _, c := range r.Checks {
		if !c.Pass {
			f = append(f, c)
		}
	}
	return f
}

// WriteText writes the human-readable report.
func (r *Result) WriteText(w io.Writer) error {
	rep := &r.Report
	var b strings.Builder
	fmt.Fprintf(&b, "itlmon gate %s · %s\n", r.Source, r.Target)
	fmt.Fprintf(&b, "%s streams", group(rep.Streams))
	switch {
	case r.Source == "probe" && rep.BeforeHeaders > 0:
		fmt.Fprintf(&b, " (%s failed, %s of them before the response headers)", group(rep.Errors), group(rep.BeforeHeaders))
	case r.Source == "probe":
		fmt.Fprintf(&b, " (%s failed)", group(rep.Errors))
	case rep.Errors > 0:
		fmt.Fprintf(&b, " (%s not completed: %s aborted, %s failed", group(rep.Errors), group(rep.Aborted), group(rep.Failed))
		if rep.BeforeHeaders > 0 {
			fmt.Fprintf(&b, "; %s of them before the response headers, after %.0f ms on average", group(rep.BeforeHeaders), rep.BeforeHeadersWaitMs)
		}
		b.WriteString(")")
	}
	if r.Concurrency > 0 {
		fmt.Fprintf(&b, ", concurrency %d", r.Concurrency)
	}
	if r.Elapsed > 0 {
		fmt.Fprintf(&b, ", %.1f s", r.Elapsed.Seconds())
	}
	fmt.Fprintf(&b, " · %s tokens\n", group(rep.Tokens))
	if len(r.Failures) > 0 {
		fmt.Fprintf(&b, "failed: %v\n", failureList(r.Failures))
	}
	b.WriteString("\n")

	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	dist := func(name string, d query.Dist, unit string) {
		if d.Count == 0 {
			fmt.Fprintf(tw, "  %s\t—\t\t\t\t%s\n", name, "no data")
			return
		}
		// Measured zeros are real (events delivered in one read): print them.
		f := func(d time.Duration) string { return formatMs(ms(d)) }
		fmt.Fprintf(tw, "  %s\tp50 %s\tp95 %s\tp99 %s\tmax %s\t%s %s\n", name,
			f(d.P50), f(d.P95), f(d.P99), f(d.Max), group(int64(d.Count)), unit)
	}
	dist("TTFT", rep.TTFT, "streams")
	dist("ITL (per chunk)", rep.ITL, "gaps")
	if rep.ITLTokens.Count > 0 {
		dist("ITL (per token)", rep.ITLTokens, "token gaps")
	} else {
		fmt.Fprintf(tw, "  ITL (per token)\t—\t\t\t\tunknown: tokens per event not reported\n")
	}
	floor := ""
	if rep.TokensPerSecP50 > 0 {
		floor = fmt.Sprintf("%.1f× the reading floor (~%.0f tokens/s)", rep.TokensPerSecP50/query.ReadingFloorTPS, query.ReadingFloorTPS)
	}
	fmt.Fprintf(tw, "  tokens/s per stream\tp50 %.1f\tTPOT %s\t\t\t%s\n", rep.TokensPerSecP50, formatDur(rep.TPOTP50), floor)
	fmt.Fprintf(tw, "  gaps over 200 ms\t%s\t\t\t\t%s stalls\n", formatShare(rep.StallShare), group(rep.Stalls))
	fmt.Fprintf(tw, "  jank (p99/p50)\t%.2f\t\t\t\t\n", rep.Jank)
	fmt.Fprintf(tw, "  verdict\t%s\t\t\t\tSMOOTH = jank < %.0f and tokens/s > %.0f; %s of streams SMOOTH on their own\n",
		rep.Verdict, query.SmoothMaxJank, query.SmoothMinTPS, formatShare(rep.SmoothShare))
	tw.Flush()

	if len(r.Checks) > 0 {
		b.WriteString("\n")
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  CHECK\tVALUE\tLIMIT\tRESULT\t\n")
		for _, c := range r.Checks {
			res := "pass"
			if !c.Pass {
				res = "FAIL"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s %s\t%s\t%s\n", c.Name, formatValue(c.Value, c.Unit), opSign(c.Op), formatValue(c.Limit, c.Unit), res, c.Margin)
		}
		tw.Flush()
	}
	b.WriteString("\n")
	if r.Pass {
		fmt.Fprintf(&b, "PASS: all %d checks passed\n", len(r.Checks))
	} else {
		f := r.FailedChecks()
		fmt.Fprintf(&b, "FAIL: %d of %d checks failed:", len(f), len(r.Checks))
		for i, c := range f {
			if i > 0 {
				b.WriteString(";")
			}
			cmp := ">"
			if c.Op == ">=" {
				cmp = "<"
			}
			fmt.Fprintf(&b, " %s %s %s %s (%s), %s", c.Name, formatValue(c.Value, c.Unit), cmp, formatValue(c.Limit, c.Unit), c.Flag, c.Margin)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func opSign(op string) string {
	if op == ">=" {
		return "≥"
	}
	return "≤"
}

// group prints n with thousands separators.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	if len(s) <= 3 || n < 0 {
		return s
	}
	var b strings.Builder
	pre := len(s) % 3
	if pre > 0 {
		b.WriteString(s[:pre])
	}
	for i := pre; i < len(s); i += 3 {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s[i : i+3])
	}
	return b.String()
}

// WriteJSON writes the result as one indented JSON object.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

// JUnit XML, as read by Jenkins, GitLab, GitHub test reporters.
type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Time     string      `xml:"time,attr"`
	Props    []junitProp `xml:"properties>property,omitempty"`
	Cases    []junitCase `xml:"testcase"`
}

type junitProp struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Class   string        `xml:"classname,attr"`
	Name    string        `xml:"name,attr"`
	Time    string        `xml:"time,attr"`
	Failure *junitFailure `xml:"failure,omitempty"`
	Out     string        `xml:"system-out,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// WriteJUnit writes one test suite with one test case per check.
func (r *Result) WriteJUnit(w io.Writer) error {
	s := junitSuite{
		Name:  "itlmon gate " + r.Source,
		Tests: len(r.Checks),
		Time:  strconv.FormatFloat(r.Elapsed.Seconds(), 'f', 3, 64),
		Props: []junitProp{
			{"target", r.Target},
			{"streams", strconv.FormatInt(r.Report.Streams, 10)},
			{"failed_streams", strconv.FormatInt(r.Report.Errors, 10)},
			{"before_headers", strconv.FormatInt(r.Report.BeforeHeaders, 10)},
			{"verdict", r.Report.Verdict},
		},
	}
	for _, c := range r.Checks {
		name := fmt.Sprintf("%s %s %s", c.Name, opSign(c.Op), formatValue(c.Limit, c.Unit))
		jc := junitCase{Class: "itlmon.gate." + r.Source, Name: name, Time: "0",
			Out: fmt.Sprintf("%s = %s (%s)", c.Name, formatValue(c.Value, c.Unit), c.Margin)}
		if !c.Pass {
			s.Failures++
			jc.Failure = &junitFailure{
				Type:    "threshold",
				Message: fmt.Sprintf("%s %s, limit %s %s: %s", c.Name, formatValue(c.Value, c.Unit), opSign(c.Op), formatValue(c.Limit, c.Unit), c.Margin),
				Text:    fmt.Sprintf("%s failed: %s (flag %s)", c.Name, c.Margin, c.Flag),
			}
		}
		s.Cases = append(s.Cases, jc)
	}
	sort.SliceStable(s.Cases, func(i, j int) bool { return s.Cases[i].Failure != nil && s.Cases[j].Failure == nil })
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(junitSuites{Suites: []junitSuite{s}}); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
