package grafana_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// This file expands a dashboard query the way Grafana and the ClickHouse
// data source plugin (grafana-clickhouse-datasource v4) do before the SQL
// reaches ClickHouse, in the same three steps:
//
//  1. the plugin's frontend, applyConditionalAll: each
//     $__conditionalAll(condition, $var) becomes 1=1 when the variable's
//     current value is '' or $__all (All), else the condition;
//  2. Grafana's template service (templateSrv.replace) with the plugin's
//     format function: $var, ${var} and [[var]] take the variable's value;
//     ${var:singlequote} quotes each value (a ' inside escaped as \'), joined
//     with ','; without a format, the plugin quotes a multi-value list as
//     'a','b' and inserts a single value as it is; All stands for every
//     option's value (or the variable's allValue, inserted as it is);
//     unknown names are left alone;
//  3. the plugin's backend macros (pkg/macros): $__timeFilter(col) →
//     col >= toDateTime(<from s>) AND col <= toDateTime(<to s>),
//     $__timeInterval(col) → toStartOfInterval(toDateTime(col), INTERVAL
//     <interval s, at least 1> second), $__fromTime / $__toTime →
//     toDateTime(<s>), $__fromTime_ms / $__toTime_ms →
//     fromUnixTimestamp64Milli(<ms>), $__timeFilter_ms(col) with those,
//     $__interval_s → the interval's seconds.
//
// A macro this file does not know fails the expansion, so a dashboard that
// starts using one is caught here rather than in Grafana.

// varValue is a template variable's current value: one value, or several
// (multi-value), or All.
type varValue struct {
	values   []string // the options (All expands to these)
	current  []string // nil with all
	all      bool
	multi    bool
	allValue string // custom All value, "" for none
}

type expandEnv struct {
	vars     map[string]varValue
	from, to time.Time
	interval time.Duration
}

// expand runs the three steps on sql.
func (e expandEnv) expand(sql string) (string, error) {
	sql, err := e.conditionalAll(sql)
	if err != nil {
		return "", err
	}
	sql = e.templateReplace(sql)
	return e.macros(sql)
}

const conditionalAll = "$__conditionalAll("

// conditionalAll is the plugin's applyConditionalAll: from the last
// occurrence backwards, the macro's two arguments split at top-level commas.
func (e expandEnv) conditionalAll(sql string) (string, error) {
	for i := strings.LastIndex(sql, conditionalAll); i >= 0; i = strings.LastIndex(sql, conditionalAll) {
		args, end, err := macroArgs(sql, i+len(conditionalAll)-1)
		if err != nil {
			return "", err
		}
		if len(args) != 2 {
			return "", fmt.Errorf("$__conditionalAll: %d arguments, want 2", len(args))
		}
		phrase := args[0]
		if m := varNameRe.FindStringSubmatch(strings.TrimSpace(args[1])); m != nil {
			name := m[1] + m[2]
			if v, ok := e.vars[name]; ok && (v.all || len(v.current) == 0 || (len(v.current) == 1 && v.current[0] == "")) {
				phrase = "1=1"
			}
		}
		sql = sql[:i] + phrase + sql[end:]
	}
	return sql, nil
}

// varNameRe is the plugin's /(?<=\$\{)[\w\d]+(?=\})|(?<=\$)[\w\d]+/ without
// look-behind: ${name} or $name.
var varNameRe = regexp.MustCompile(`^\$(?:\{(\w+)\}|(\w+))`)

// macroArgs splits the parenthesised arguments starting at sql[open] == '('
// at commas of depth one, and returns the index just past the ')'.
func macroArgs(sql string, open int) ([]string, int, error) {
	depth, last := 0, open+1
	var args []string
	for i := open; i < len(sql); i++ {
		switch sql[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return append(args, sql[last:i]), i + 1, nil
			}
		case ',':
			if depth == 1 {
				args = append(args, sql[last:i])
				last = i + 1
			}
		}
	}
	return nil, 0, fmt.Errorf("unbalanced parentheses after %q", sql[:open])
}

// templateRe is Grafana's variable regex (public/app/features/variables/utils.ts).
var templateRe = regexp.MustCompile(`\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.([^:^\}]+))?(?::([^\}]+))?\}`)

func (e expandEnv) templateReplace(sql string) string {
	return templateRe.ReplaceAllStringFunc(sql, func(m string) string {
		g := templateRe.FindStringSubmatch(m)
		name, format := g[1]+g[2]+g[4], g[3]+g[6]
		v, ok := e.vars[name]
		if !ok {
			return m // built-ins and backend macros ($__timeFilter...) stay
		}
		if v.all && v.allValue != "" {
			return v.allValue
		}
		vals := v.current
		if v.all {
			vals = v.values
		}
		switch format {
		case "singlequote":
			q := make([]string, len(vals))
			for i, s := range vals {
				q[i] = "'" + strings.ReplaceAll(s, "'", `\'`) + "'"
			}
			return strings.Join(q, ",")
		case "":
			if v.multi || v.all {
				return "'" + strings.Join(vals, "','") + "'"
			}
			return strings.Join(vals, "")
		default:
			panic("BUG: grafana test: format " + format + " not emulated")
		}
	})
}

var macroRe = regexp.MustCompile(`\$__(\w+)`)

func (e expandEnv) macros(sql string) (string, error) {
	dt := func(t time.Time) string { return fmt.Sprintf("toDateTime(%d)", t.Unix()) }
	dt64 := func(t time.Time) string { return fmt.Sprintf("fromUnixTimestamp64Milli(%d)", t.UnixMilli()) }
	secs := max(int(e.interval/time.Second), 1)
	var out strings.Builder
	for {
		loc := macroRe.FindStringSubmatchIndex(sql)
		if loc == nil {
			out.WriteString(sql)
			return out.String(), nil
		}
		out.WriteString(sql[:loc[0]])
		name, rest := sql[loc[2]:loc[3]], sql[loc[1]:]
		var args []string
		if strings.HasPrefix(rest, "(") {
			a, end, err := macroArgs(rest, 0)
			if err != nil {
				return "", err
			}
			args, rest = a, rest[end:]
			for i := range args {
				args[i] = strings.TrimSpace(args[i])
			}
		}
		want := map[string]int{"timeFilter": 1, "timeFilter_ms": 1, "timeInterval": 1, "fromTime": 0, "toTime": 0,
			"fromTime_ms": 0, "toTime_ms": 0, "interval_s": 0}
		n, ok := want[name]
		if !ok {
			return "", fmt.Errorf("macro $__%s is not emulated here", name)
		}
		if len(args) != n {
			return "", fmt.Errorf("macro $__%s: %d arguments, want %d", name, len(args), n)
		}
		switch name {
		case "timeFilter":
			fmt.Fprintf(&out, "%s >= %s AND %s <= %s", args[0], dt(e.from), args[0], dt(e.to))
		case "timeFilter_ms":
			fmt.Fprintf(&out, "%s >= %s AND %s <= %s", args[0], dt64(e.from), args[0], dt64(e.to))
		case "timeInterval":
			fmt.Fprintf(&out, "toStartOfInterval(toDateTime(%s), INTERVAL %d second)", args[0], secs)
		case "fromTime":
			out.WriteString(dt(e.from))
		case "toTime":
			out.WriteString(dt(e.to))
		case "fromTime_ms":
			out.WriteString(dt64(e.from))
		case "toTime_ms":
			out.WriteString(dt64(e.to))
		case "interval_s":
			fmt.Fprintf(&out, "%d", secs)
		}
		sql = rest
	}
}

func TestExpand(t *testing.T) {
	from, to := time.Unix(1700000000, 0), time.Unix(1700003600, 0)
	e := expandEnv{from: from, to: to, interval: 5 * time.Minute, vars: map[string]varValue{
		"site":    {values: []string{"shop", "o'brien"}, current: []string{"o'brien"}},
		"region":  {values: []string{"DE-BE", "FR-IDF"}, all: true, multi: true},
		"browser": {values: []string{"Chrome", "Firefox", "Safari"}, current: []string{"Chrome", "Firefox"}, multi: true},
		"dim":     {values: []string{"region"}, current: []string{"region"}},
	}}
	for _, c := range []struct{ in, want string }{
		{"site = ${site:singlequote}", `site = 'o\'brien'`},
		{"$__conditionalAll(region IN (${region:singlequote}), $region)", "1=1"},
		{"$__conditionalAll(browser IN (${browser:singlequote}), $browser)", "browser IN ('Chrome','Firefox')"},
		{"browser IN ($browser)", "browser IN ('Chrome','Firefox')"},
		{"region IN ($region)", "region IN ('DE-BE','FR-IDF')"},
		{"toString(${dim})", "toString(region)"},
		{"$__timeFilter(minute)", "minute >= toDateTime(1700000000) AND minute <= toDateTime(1700003600)"},
		{"$__timeFilter_ms(t)", "t >= fromUnixTimestamp64Milli(1700000000000) AND t <= fromUnixTimestamp64Milli(1700003600000)"},
		{"$__timeInterval(minute) AS time", "toStartOfInterval(toDateTime(minute), INTERVAL 300 second) AS time"},
		{"$__fromTime, $__toTime, $__interval_s", "toDateTime(1700000000), toDateTime(1700003600), 300"},
		{"$unknown $__interval", "$unknown $__interval"},
	} {
		if c.in == "$unknown $__interval" {
			if _, err := e.expand(c.in); err == nil {
				t.Errorf("expand(%q): no error for a macro it does not know", c.in)
			}
			continue
		}
		got, err := e.expand(c.in)
		if err != nil {
			t.Errorf("expand(%q): %v", c.in, err)
			continue
		}
		if got != c.want {
			t.Errorf("expand(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
