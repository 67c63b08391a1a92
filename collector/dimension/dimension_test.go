package dimension_test

import (
	"regexp"
	"testing"

	"github.com/itlmon/itlmon/collector/dimension"
)

// ident is what may enter SQL text as a column name.
var ident = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// TestRegistry: keys and OTLP attributes are unique, columns are plain
// identifiers (they enter SQL text), every dimension is labelled, and only
// rollup dimensions are exported or get a Grafana variable (both read
// itl_rollup_1m).
func TestRegistry(t *testing.T) {
	keys, attrs := map[string]bool{}, map[string]bool{}
	for _, d := range dimension.All() {
		if !ident.MatchString(d.Key) || !ident.MatchString(d.Column) {
			t.Errorf("%+v: key and column must match %s", d, ident)
		}
		if keys[d.Key] {
			t.Errorf("key %q twice", d.Key)
		}
		keys[d.Key] = true
		if d.Label == "" {
			t.Errorf("%q has no label", d.Key)
		}
		if d.OTLP != "" {
			if attrs[d.OTLP] {
				t.Errorf("OTLP attribute %q twice", d.OTLP)
			}
			attrs[d.OTLP] = true
		}
		if !d.Rollup && (d.OTLP != "" || d.Grafana) {
			t.Errorf("%q is not a rollup dimension: it can be neither exported nor a Grafana variable", d.Key)
		}
		if got, ok := dimension.Lookup(d.Key); !ok || got != d {
			t.Errorf("Lookup(%q) = %+v, %v", d.Key, got, ok)
		}
	}
	if _, ok := dimension.Lookup("nope"); ok {
		t.Errorf("Lookup(nope) found a dimension")
	}
	if len(dimension.Rollup()) == 0 || len(dimension.OTLP()) == 0 {
		t.Errorf("no rollup or no exported dimension")
	}
}
