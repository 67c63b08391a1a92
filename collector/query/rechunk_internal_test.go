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
		// The figures e2e TestAttributionBrowser/dashboard measured in Chromium behind the real
		// re-chunkers: the gaps between full buffers are network stalls, and
		// still the reads name a buffer, not a stalling hop.
		{"nginx buffering + gzip, short answer", Rechunk{EventsPerRead: 42, SubFloorShare: 1, CoalescedTTFTShare: 1, OneReadShare: 1}, PatternOneRead, true},
		{"nginx full 1 KB buffers", Rechunk{EventsPerRead: 14, SubFloorShare: 0.95, CoalescedTTFTShare: 1, SteadyShare: 1, NetworkStallShare: 1}, PatternSteady, true},
		{"nginx buffering + gzip, long answer", Rechunk{EventsPerRead: 1500, SubFloorShare: 1, CoalescedTTFTShare: 1, SteadyShare: 1, NetworkStallShare: 1}, PatternSteady, true},
		{"fast stream flushed per event (nginx, brotli, unbuffered)", Rechunk{EventsPerRead: 1.09, SubFloorShare: 0.09, BurstyShare: 1}, PatternNone, false},
		{"jitter proxy", Rechunk{EventsPerRead: 1.83, SubFloorShare: 0.46, BurstyShare: 1, NetworkStallShare: 1}, PatternHeld, true},
		// The origin's timelines (the origin middleware joined) decide who
		// batched: an origin writing 8 events per flush every 240 ms reads
		// like a buffer passed on when full; with its timelines it is the
		// origin's.
		{"origin bursts, no origin timelines", Rechunk{EventsPerRead: 7.6, SubFloorShare: 0.9, SteadyShare: 1, NetworkStallShare: 1}, PatternSteady, true},
		{"origin bursts", Rechunk{EventsPerRead: 7.6, SubFloorShare: 0.9, SteadyShare: 1, OriginBurstShare: 1}, PatternOrigin, true},
		{"origin bursts beside a smooth stream", Rechunk{EventsPerRead: 2.5, SubFloorShare: 0.5, SteadyShare: 0.5, OriginBurstShare: 0.5, OriginSmoothShare: 0.5}, PatternOrigin, true},
		{"origin bursts in one flush", Rechunk{EventsPerRead: 40, OneReadShare: 1, CoalescedTTFTShare: 1, OriginBurstShare: 1}, PatternOrigin, true},
		{"a few origins batch", Rechunk{EventsPerRead: 6, SteadyShare: 0.8, OriginBurstShare: 0.2, OriginSmoothShare: 0.8}, PatternSteady, true},
		{"proxy buffers, origin smooth", Rechunk{EventsPerRead: 12, SubFloorShare: 0.9, CoalescedTTFTShare: 1, SteadyShare: 1, NetworkStallShare: 1, OriginSmoothShare: 1}, PatternSteady, true},
		{"held path, origin smooth", Rechunk{EventsPerRead: 1.8, SubFloorShare: 0.4, BurstyShare: 1, NetworkStallShare: 1, OriginSmoothShare: 1}, PatternHeld, true},
		{"busy page, origin smooth", Rechunk{EventsPerRead: 1.3, BurstyShare: 0.6, SubFloorShare: 0.3, PageStallShare: 0.6, OriginSmoothShare: 1}, PatternPage, true},
		{"unbuffered, origin smooth", Rechunk{EventsPerRead: 1.02, OriginSmoothShare: 1}, PatternNone, false},
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
			// A pattern of the path says so when the origin's timelines
			// show it emitted one event at a time.
			path := tc.pattern == PatternOneRead || tc.pattern == PatternSteady || tc.pattern == PatternHeld || tc.pattern == PatternBursty
			want := Diagnoses[tc.pattern]
			if path && tc.r.OriginSmoothShare >= PatternShare {
				want += PathConfirmed
			}
			if r.Diagnosis != want {
				t.Errorf("diagnosis = %q, want %q", r.Diagnosis, want)
			}
		})
	}
}
