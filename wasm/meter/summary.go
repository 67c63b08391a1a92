package meter

import (
	"math"

	"github.com/itlmon/itlmon/wasm/hist"
)

// Metric definitions (docs/measuring.md states the same):
//
//   - t0 is just before the page issued fetch. TTFB = first body byte (the
//     first non-empty read), TTFC = first stream event, TTFT = first content
//     event (a role-only chunk, an empty delta, a ping, [DONE] do not count).
//     An event's time is the arrival time of the read that completed it (for
//     SSE the read holding the blank line that dispatches it).
//   - ITL: one sample per gap between consecutive content events (N content
//     events give N-1 gaps); events delivered by one read have gap 0.
//   - Token-normalised ITL (ITLTokens): with k tokens per content event, each
//     gap is recorded as max(1, round(k)) samples of gap/k. k is
//     Options.TokensPerEvent when set, else Tokens/ContentEvents when the API
//     reported usage (streams report only a total, so it is spread evenly),
//     else unknown and ITLTokens stays empty.
//   - TPOT = (t_last - t_first_content)/(N-1) over content events; it never
//     includes TTFT. TPOTToken = (t_last - t_first_content)/(Tokens-1) when
//     tokens are known (usage or TokensPerEvent), as vLLM's benchmark
//     computes TPOT. TokensPerSec = 1/TPOTToken when tokens are known, else
//     1/TPOT (content events per second); 0 when fewer than two content
//     events or when they all arrived at once (rate not measurable).
//   - Gap quantiles: exact on the raw gaps with linear interpolation (numpy's
//     default) up to MaxExactGaps gaps, from the ITL histogram beyond.
//   - Stall: a gap > 200 ms. Jank = p99/p50 of the gaps (max/median below 100
//     gaps) with the median floored at 1 ms. Smooth = Jank < 4 && TokensPerSec > 7.
//   - Re-chunking: EventsPerRead over reads that carried at least one event,
//     MaxEventsPerRead, BytesPerRead over all reads, SubFloorShare = share of
//     gaps below Options.TimerFloor.
//   - Attribution of a stall (and of the wait for the first content, [0, TTFT]):
//     CausePage when MarkBusy intervals cover at least half of it; else
//     CauseNetwork when the read that ended it carried two or more content
//     events (coalesced delivery); else CausePage when any busy interval
//     overlaps it; else CauseUnknown. The collector may refine to CauseOrigin.
//     TTFTCause is CauseNone when there is no content event.

// Summary returns the stream's metrics. It is valid at any time and final
// after End. The returned slices and histograms are the caller's.
func (m *Meter) Summary() Summary {
	var s Summary
	m.SummaryInto(&s)
	return s
}

// SummaryInto is Summary reusing s's slices and histograms: with a Summary
// kept across streams it does not allocate in the steady state.
func (m *Meter) SummaryInto(s *Summary) {
	itl, itlTok := s.ITL, s.ITLTokens
	stallList, timeline := s.StallList[:0], s.Timeline[:0]
	*s = Summary{
		Format:         m.format,
		Status:         m.status,
		End:            m.end,
		Terminal:       m.terminal,
		HTTPStatus:     m.httpStatus,
		TTFB:           m.ttfb,
		TTFC:           m.ttfc,
		TTFT:           m.ttft,
		Duration:       m.endAt,
		Events:         m.events,
		ContentEvents:  m.content,
		Tokens:         m.content * max(1, m.opts.TokensPerEvent),
		TokensReported: m.tokensReported,
		Reads:          m.reads,
		Bytes:          m.bytes,
		GapMax:         m.gapMax,
		Stalls:         m.stalls,
		StalledFor:     m.stalledFor,
	}
	if m.tokensReported {
		s.Tokens = int(min(m.tokens, math.MaxInt32))
	}
	if m.reads > 0 {
		m.backfillStalls()
	}

	// Histograms.
	itl.Reset()
	itl.Merge(&m.itl)
	s.ITL = itl
	itlTok.Reset()
	m.tokenITL(&itlTok, s.Tokens)
	s.ITLTokens = itlTok

	// Gap quantiles, jank.
	n := len(m.gaps) + int(m.overflow.Count())
	if n > 0 {
		if m.overflow.Count() == 0 {
			// Nothing needs the gaps in arrival order: sort them in place
			// (already sorted when Summary is taken again with no new gap).
			heapSort((*gapOrder)(m))
			s.GapP50 = exactQuantile(m.gaps, 0.50)
			s.GapP95 = exactQuantile(m.gaps, 0.95)
			s.GapP99 = exactQuantile(m.gaps, 0.99)
		} else {
			s.GapP50 = fromMicros(m.itl.Quantile(0.50))
			s.GapP95 = fromMicros(m.itl.Quantile(0.95))
			s.GapP99 = fromMicros(m.itl.Quantile(0.99))
		}
		top := s.GapP99
		if n < 100 {
			top = s.GapMax
		}
		s.Jank = float64(top) / float64(max(s.GapP50, Millisecond))
		s.SubFloorShare = float64(m.subFloor) / float64(n)
	}

	// TPOT, tokens/s.
	if m.content >= 2 {
		span := m.lastContent - m.ttft
		s.TPOT = span / Duration(m.content-1)
		tokensKnown := m.tokensReported || m.opts.TokensPerEvent > 0
		if span > 0 {
			if tokensKnown && s.Tokens >= 2 {
				s.TPOTToken = span / Duration(s.Tokens-1)
				s.TokensPerSec = float64(s.Tokens-1) / span.Seconds()
			} else {
				s.TokensPerSec = float64(m.content-1) / span.Seconds()
			}
		}
	}
	s.Smooth = n > 0 && s.Jank < 4 && s.TokensPerSec > 7

	// Re-chunking.
	withEvents, maxEv := m.readsWithEvents, m.maxEventsRead
	if m.reads > 0 && m.cur.events > 0 {
		withEvents++
		maxEv = max(maxEv, m.cur.events)
	}
	if withEvents > 0 {
		s.EventsPerRead = float64(m.events) / float64(withEvents)
	}
	s.MaxEventsPerRead = maxEv
	if m.reads > 0 {
		s.BytesPerRead = float64(m.bytes) / float64(m.reads)
	}

	// Attribution.
	m.mergeBusy()
	for _, r := range m.stallRecs {
		c := m.cause(r.start, r.end, int(r.nextContent))
		s.StallsByCause[c]++
		s.StalledByCause[c] += r.end - r.start
	}
	if u := m.stalls - len(m.stallRecs); u > 0 {
		s.StallsByCause[CauseUnknown] += u
		s.StalledByCause[CauseUnknown] += m.untracked
	}
	if m.content > 0 {
		rc := m.ttftReadContent
		if m.ttftRead == m.cur.idx {
			rc = m.cur.content
		}
		s.TTFTCause = m.cause(0, m.ttft, rc)
	}

	// The longest MaxStalls stalls, in time order.
	m.stallScratch = append(m.stallScratch[:0], m.stallRecs...)
	if len(m.stallScratch) > m.opts.MaxStalls {
		heapSort((*stallsLongestFirst)(m))
		m.stallScratch = m.stallScratch[:m.opts.MaxStalls]
		heapSort((*stallsByStart)(m))
	}
	recs := m.stallScratch
	for _, r := range recs {
		stallList = append(stallList, Stall{
			Start: r.start, End: r.end,
			Cause:          m.cause(r.start, r.end, int(r.nextContent)),
			NextReadEvents: r.nextEvents,
		})
	}
	s.StallList = stallList
	s.Timeline = append(timeline, m.timeline...)
	s.TimelineDropped = m.events - len(m.timeline)
}

// Sorting goes through heapSort's one non-generic implementation: each
// slices.Sort* instantiation would add its own copy to the browser module.
// The orders are views of the Meter (a pointer conversion, so sorting does
// not allocate): gapOrder sorts m.gaps, stallsLongestFirst and stallsByStart
// m.stallScratch, busyByStart m.busy.
type (
	gapOrder           Meter
	stallsLongestFirst Meter
	stallsByStart      Meter
	busyByStart        Meter
)

func (o *gapOrder) Len() int           { return len(o.gaps) }
func (o *gapOrder) Less(i, j int) bool { return o.gaps[i] < o.gaps[j] }
func (o *gapOrder) Swap(i, j int)      { o.gaps[i], o.gaps[j] = o.gaps[j], o.gaps[i] }

func (o *stallsLongestFirst) Len() int { return len(o.stallScratch) }
func (o *stallsLongestFirst) Less(i, j int) bool {
	r := o.stallScratch
	di, dj := r[i].end-r[i].start, r[j].end-r[j].start
	return di > dj || di == dj && r[i].start < r[j].start // the earlier of two as long
}
func (o *stallsLongestFirst) Swap(i, j int) {
	o.stallScratch[i], o.stallScratch[j] = o.stallScratch[j], o.stallScratch[i]
}

func (o *stallsByStart) Len() int           { return len(o.stallScratch) }
func (o *stallsByStart) Less(i, j int) bool { return o.stallScratch[i].start < o.stallScratch[j].start }
func (o *stallsByStart) Swap(i, j int) {
	o.stallScratch[i], o.stallScratch[j] = o.stallScratch[j], o.stallScratch[i]
}

func (o *busyByStart) Len() int           { return len(o.busy) }
func (o *busyByStart) Less(i, j int) bool { return o.busy[i].start < o.busy[j].start }
func (o *busyByStart) Swap(i, j int)      { o.busy[i], o.busy[j] = o.busy[j], o.busy[i] }

func fromMicros(us float64) Duration {
	return Duration(math.Round(us * float64(Microsecond)))
}

// exactQuantile is numpy's default (linear) quantile of sorted values.
func exactQuantile(sorted []Duration, q float64) Duration {
	h := float64(len(sorted)-1) * q
	lo := int(math.Floor(h))
	if lo >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	a, b := float64(sorted[lo]), float64(sorted[lo+1])
	return Duration(math.Round(a + (h-float64(lo))*(b-a)))
}

// tokenITL fills h with the token-normalised ITL (see the definitions above).
func (m *Meter) tokenITL(h *hist.Histogram, tokens int) {
	var k float64
	switch {
	case m.opts.TokensPerEvent > 0:
		k = float64(m.opts.TokensPerEvent)
	case m.tokensReported && m.content > 0 && tokens > 0:
		k = float64(tokens) / float64(m.content)
	default:
		return
	}
	n := uint64(max(1, math.Round(k)))
	for _, g := range m.gaps {
		h.RecordN(micros(g)/k, n)
	}
	if m.overflow.Count() > 0 {
		h.RecordN(0, m.overflow.ZeroCount()*n)
		m.overflow.Buckets(func(index int32, count uint64) {
			h.RecordN(hist.BucketValue(index)/k, count*n)
		})
	}
}

// mergeBusy sorts the busy intervals and merges overlapping ones, in place.
func (m *Meter) mergeBusy() {
	if len(m.busy) < 2 {
		return
	}
	heapSort((*busyByStart)(m))
	out := m.busy[:1]
	for _, b := range m.busy[1:] {
		last := &out[len(out)-1]
		if b.start <= last.end {
			last.end = max(last.end, b.end)
			continue
		}
		out = append(out, b)
	}
	m.busy = out
}

// busyOverlap is how much of [start, end] the (merged) busy intervals cover.
func (m *Meter) busyOverlap(start, end Duration) Duration {
	var d Duration
	for _, b := range m.busy {
		if b.start >= end {
			break
		}
		if lo, hi := max(b.start, start), min(b.end, end); hi > lo {
			d += hi - lo
		}
	}
	return d
}

// cause attributes the interval [start, end] that ended with a read carrying
// readContent content events.
func (m *Meter) cause(start, end Duration, readContent int) Cause {
	busy := m.busyOverlap(start, end)
	switch {
	case busy > 0 && 2*busy >= end-start:
		return CausePage
	case readContent >= 2:
		return CauseNetwork
	case busy > 0:
		return CausePage
	}
	return CauseUnknown
}
