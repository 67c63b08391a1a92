package query

import "testing"

func TestRechunkClassify(t *testing.T) {
	for _, tc := range []struct {
		name    string
		r       Rechunk
		pattern string
		flagged bool
	}{
		{"unbuffered", Rechunk{EventsPerRead: 1.02}, PatternNone, false},
		{"buffering proxy", Rechunk{EventsPerRead: 40, OneReadShare: 1, CoalescedTTFTShare: 1}, PatternOneRead, true},
		{"flush when full", Rechunk{EventsPerRead: 4, SteadyShare: 0.9}, PatternSteady, true},
		{"busy page", Rechunk{EventsPerRead: 1.3, BurstyShare: 0.6, SubFloorShare: 0.3, PageStallShare: 0.6}, PatternPage, true},
		{"page beats network", Rechunk{BurstyShare: 0.6, PageStallShare: 0.5, NetworkStallShare: 0.5}, PatternPage, true},
		{"held path", Rechunk{EventsPerRead: 1.4, BurstyShare: 1, NetworkStallShare: 1}, PatternHeld, true},
		{"encoder", Rechunk{EventsPerRead: 2, BurstyShare: 0.8}, PatternBursty, true},
		{"a few backlogs", Rechunk{EventsPerRead: 1.1, BurstyShare: 0.2, NetworkStallShare: 0.2}, PatternNone, false},
		{"sub-floor without pattern", Rechunk{EventsPerRead: 1.1, SubFloorShare: 0.25}, PatternNone, true},
		// The figures TestDashboardViews measured in Chromium behind the real
		// re-chunkers: the gaps between full buffers are network stalls, and
		// still the reads name a buffer, not a stalling hop.
		{"nginx buffering + gzip, short answer", Rechunk{EventsPerRead: 42, SubFloorShare: 1, CoalescedTTFTShare: 1, OneReadShare: 1}, PatternOneRead, true},
		{"nginx full 1 KB buffers", Rechunk{EventsPerRead: 14, SubFloorShare: 0.95, CoalescedTTFTShare: 1, SteadyShare: 1, NetworkStallShare: 1}, PatternSteady, true},
		{"nginx buffering + gzip, long answer", Rechunk{EventsPerRead: 1500, SubFloorShare: 1, CoalescedTTFTShare: 1, SteadyShare: 1, NetworkStallShare: 1}, PatternSteady, true},
		{"fast stream flushed per event (nginx, brotli, unbuffered)", Rechunk{EventsPerRead: 1.09, SubFloorShare: 0.09, BurstyShare: 1}, PatternNone, false},
		{"jitter proxy", Rechunk{EventsPerRead: 1.83, SubFloorShare: 0.46, BurstyShare: 1, NetworkStallShare: 1}, PatternHeld, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.r
			r.classify()
			if r.Pattern != tc.pattern || r.Flagged != tc.flagged {
				t.Errorf("pattern, flagged = %q, %v; want %q, %v", r.Pattern, r.Flagged, tc.pattern, tc.flagged)
			}
			if (r.Diagnosis != "") != (tc.pattern != "") {
				t.Errorf("diagnosis %q for pattern %q", r.Diagnosis, r.Pattern)
			}
		})
	}
}
