package promoter

import (
	"testing"
	"time"
)

// The rule that picks the one client record a timeline joins, on arrival
// times alone (the inbox's ingested_at).
func TestRuleOneRecordPerTimeline(t *testing.T) {
	base := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return base.Add(d) }
	const ttl, hold = 2 * time.Minute, 3 * time.Second
	for _, tc := range []struct {
		name     string
		names    []naming // in arrival order
		timeline time.Duration
		want     string // "" when none joins
	}{
		{"one record", []naming{{at(0), "a"}}, time.Second, "a"},
		{"a later record never takes it", []naming{{at(0), "z"}, {at(time.Millisecond), "a"}}, time.Second, "z"},
		{"same insert: the smaller stream id", []naming{{at(0), "a"}, {at(0), "b"}}, time.Second, "a"},
		{"the first is out of reach: the second is a conflict all the same",
			[]naming{{at(0), "a"}, {at(100 * time.Second), "b"}}, 150 * time.Second, ""},
		{"the next record after the TTL is a candidate again",
			[]naming{{at(0), "a"}, {at(ttl + time.Second), "b"}}, ttl + 2*time.Second, "b"},
		{"a timeline before its record, within the TTL", []naming{{at(ttl), "a"}}, time.Second, "a"},
		{"a timeline too early", []naming{{at(ttl + 2*time.Second), "a"}}, 0, ""},
		{"a late timeline joins the earlier record", []naming{{at(0), "a"}}, ttl - time.Second, "a"},
		{"a timeline past the TTL joins none", []naming{{at(0), "a"}}, ttl + 2*time.Second, ""},
	} {
		r := rule{ttl: ttl, hold: hold, names: tc.names}
		n, ok := r.winner(at(tc.timeline))
		if got := map[bool]string{true: n.streamID}[ok]; got != tc.want {
			t.Errorf("%s: joins %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestRuleCandidates(t *testing.T) {
	base := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	r := rule{ttl: time.Minute, hold: time.Second, names: []naming{
		{base, "a"}, {base.Add(time.Second), "b"}, {base.Add(2 * time.Minute), "c"}, {base.Add(2*time.Minute + 59*time.Second), "d"},
	}}
	for id, want := range map[string]bool{"a": true, "b": false, "c": true, "d": false, "unknown": false} {
		if got := r.isCandidate(id); got != want {
			t.Errorf("isCandidate(%s) = %v, want %v", id, got, want)
		}
	}
}
