package beacon

import (
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/itlmon/itlmon/wasm/hist"
	"pgregory.net/rapid"
)

// minimalBatch is the smallest useful batch: one aborted stream that never
// got a byte.
func minimalBatch() *Batch {
	return &Batch{
		Seq:  1,
		Site: "pk_demo",
		Records: []Record{{
			StreamID:    [16]byte{0x6f, 0x1e, 0x2a, 0x9c, 0x03, 0x44, 0x4b, 0x8e, 0x9a, 0x10, 0x5d, 0xc2, 0x7e, 0x31, 0x08, 0xf4},
			StartUnixMs: 1767225600000,
			PageOrigin:  "https://chat.example.com",
			PagePath:    "/",
			URLOrigin:   "https://chat.example.com",
			URLPath:     "/v1/chat/completions",
			Status:      2, // aborted before the response headers
			End:         3, // abort
			HeadersUs:   NoTime,
			TTFBUs:      NoTime, TTFCUs: NoTime, TTFTUs: NoTime,
			DurationUs: 1500000,
		}},
	}
}

// typicalRecord is one realistic record: n content events at ~20 ms with
// jitter and a few stalls, a 64-entry timeline, both histograms.
func typicalRecord(r *rand.Rand, i int) Record {
	rec := Record{
		OriginID:    "req_" + string(rune('a'+i)) + "3f9c2e1d",
		StartUnixMs: 1767225600000 + int64(i)*7301,
		PageOrigin:  "https://chat.example.com",
		PagePath:    "/c/new",
		URLOrigin:   "https://api.example.com",
		URLPath:     "/v1/chat/completions",
		Model:       "gpt-4o-mini",
		HTTPProto:   "h2",
		ContentType: "text/event-stream",
		Format:      1, Status: 1, HTTPStatus: 200,
		TokensReported: true,
	}
	for k := range rec.StreamID {
		rec.StreamID[k] = byte(r.Uint32())
	}
	var at uint32 = 180000 + 100*uint32(r.IntN(4000))
	rec.TTFBUs = at - 20000
	rec.HeadersUs = rec.TTFBUs - 1700
	rec.End = uint8(1 + i%2) // body end, closed after end
	rec.TTFCUs = at - 5000
	rec.TTFTUs = at
	n := 150 + r.IntN(250)
	read := uint32(3)
	var gaps []float64
	for e := 1; e < n; e++ {
		gap := 2e4 * math.Exp(0.2*r.NormFloat64())
		if r.IntN(80) == 0 {
			gap = 2.5e5 + r.Float64()*6e5
			rec.StallList = append(rec.StallList, Stall{StartUs: at, EndUs: at + uint32(gap), Cause: uint8(1 + r.IntN(3)), NextReadEvents: uint32(1 + r.IntN(4))})
			rec.Stalls++
			rec.StalledUs += uint64(gap)
		}
		if r.IntN(10) == 0 {
			gap = 0 // coalesced into the previous read
		} else {
			read++
		}
		gap = math.Round(gap/100) * 100 // Chromium's 100 µs clock
		at += uint32(gap)
		gaps = append(gaps, gap)
		rec.ITL.Record(gap)
		if e%3 == 0 {
			rec.ITLTokens.RecordN(gap/2, 2)
		}
		if len(rec.Timeline) < 64 {
			rec.Timeline = append(rec.Timeline, Stamp{AtUs: at, Read: read, Content: true})
		}
	}
	rec.TimelineDropped = uint32(n - 1 - len(rec.Timeline))
	rec.DurationUs = at + 1200
	rec.Events, rec.ContentEvents, rec.Tokens = uint32(n+2), uint32(n), uint32(n*13/10)
	rec.Reads, rec.Bytes = read, uint64(n)*142
	rec.GapP50Us = uint32(rec.ITL.Quantile(0.5))
	rec.GapP95Us = uint32(rec.ITL.Quantile(0.95))
	rec.GapP99Us = uint32(rec.ITL.Quantile(0.99))
	rec.GapMaxUs = uint32(rec.ITL.Max())
	rec.TPOTUs = (at - rec.TTFTUs) / uint32(n-1)
	rec.TokensPerSec = 1e6 / float32(rec.TPOTUs)
	rec.Jank = float32(rec.ITL.Quantile(0.99) / max(rec.ITL.Quantile(0.5), 1000))
	rec.EventsPerRead = float32(n) / float32(read)
	rec.MaxEventsPerRead = 3
	rec.BytesPerRead = float32(rec.Bytes) / float32(read)
	rec.SubFloorShare = float32(rec.ITL.ZeroCount()) / float32(len(gaps))
	for _, s := range rec.StallList {
		rec.StallsByCause[s.Cause]++
		rec.StalledByCause[s.Cause] += uint64(s.EndUs - s.StartUs)
	}
	rec.TTFTCause = 1
	return rec
}

// typicalBatch: 10 records, ~40 buckets per ITL histogram, 64-entry timelines.
func typicalBatch() *Batch {
	r := rand.New(rand.NewPCG(42, 7))
	b := &Batch{
		Seq:  17,
		Site: "pk_live_5f2c9a",
		Client: Client{
			UserAgent:     "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/142.0.0.0 Safari/537.36",
			UABrands:      "Chromium;142,Google Chrome;142,Not_A Brand;99",
			UAPlatform:    "Linux",
			ConnType:      "4g",
			ConnRTTMs:     50,
			TimerFloorUs:  100,
			ModuleVersion: "0.1.0",
			Release:       "web@2026.11.30",
		},
		Dropped: 2,
	}
	for i := range 10 {
		b.Records = append(b.Records, typicalRecord(r, i))
	}
	return b
}

// normalized returns a copy of b with histograms removed and empty slices
// nil, for reflect.DeepEqual; histograms are compared with Equal.
func normalized(b *Batch) *Batch {
	c := *b
	c.Records = nil
	for _, r := range b.Records {
		r.ITL, r.ITLTokens = hist.Histogram{}, hist.Histogram{}
		if len(r.StallList) == 0 {
			r.StallList = nil
		}
		if len(r.Timeline) == 0 {
			r.Timeline = nil
		}
		c.Records = append(c.Records, r)
	}
	return &c
}

func batchesEqual(a, b *Batch) bool {
	if len(a.Records) != len(b.Records) || !reflect.DeepEqual(normalized(a), normalized(b)) {
		return false
	}
	for i := range a.Records {
		if !a.Records[i].ITL.Equal(&b.Records[i].ITL) || !a.Records[i].ITLTokens.Equal(&b.Records[i].ITLTokens) {
			return false
		}
	}
	return true
}

// Generators for rapid.

func genString(field string) *rapid.Generator[string] {
	return rapid.Custom(func(t *rapid.T) string {
		s := rapid.OneOf(
			rapid.SampledFrom([]string{"", "https://chat.example.com", "/v1/chat/completions", "gpt-4o", "h2", "ünï©ødé ✓"}),
			rapid.String(),
		).Draw(t, field)
		if isPathField(field) {
			s = strings.Map(func(r rune) rune {
				if r == '?' || r == '#' {
					return '_'
				}
				return r
			}, s)
		}
		if !utf8.ValidString(s) {
			s = strings.ToValidUTF8(s, "?")
		}
		return s
	})
}

var genFloat = rapid.OneOf(
	rapid.Float32Range(0, 1e6),
	rapid.SampledFrom([]float32{0, math.MaxFloat32, math.SmallestNonzeroFloat32, 1}),
)

var genTime = rapid.OneOf(rapid.Just(NoTime), rapid.Uint32Range(0, 1e7), rapid.Uint32())

func genHist(t *rapid.T, name string) hist.Histogram {
	var h hist.Histogram
	for _, v := range rapid.SliceOfN(rapid.OneOf(rapid.Float64Range(0, 1e8), rapid.Just(0.0)), 0, 60).Draw(t, name) {
		h.Record(v)
	}
	return h
}

func genRecord(t *rapid.T) Record {
	var r Record
	copy(r.StreamID[:], rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, "stream_id"))
	r.OriginID = genString("origin_id").Draw(t, "origin_id")
	r.PageOrigin = genString("page_origin").Draw(t, "page_origin")
	r.PagePath = genString("page_path").Draw(t, "page_path")
	r.URLOrigin = genString("url_origin").Draw(t, "url_origin")
	r.URLPath = genString("url_path").Draw(t, "url_path")
	r.Model = genString("model").Draw(t, "model")
	r.HTTPProto = genString("http_proto").Draw(t, "http_proto")
	r.ContentType = genString("content_type").Draw(t, "content_type")
	r.StartUnixMs = rapid.Int64().Draw(t, "start")
	r.Format, r.Status = rapid.Uint8().Draw(t, "format"), rapid.Uint8().Draw(t, "status")
	r.HTTPStatus = rapid.Uint16().Draw(t, "http_status")
	r.TTFBUs, r.TTFCUs, r.TTFTUs, r.DurationUs = genTime.Draw(t, "ttfb"), genTime.Draw(t, "ttfc"), genTime.Draw(t, "ttft"), genTime.Draw(t, "dur")
	r.Events, r.ContentEvents, r.Tokens = rapid.Uint32().Draw(t, "events"), rapid.Uint32().Draw(t, "content"), rapid.Uint32().Draw(t, "tokens")
	r.TokensReported, r.Smooth = rapid.Bool().Draw(t, "reported"), rapid.Bool().Draw(t, "smooth")
	r.Reads, r.Bytes = rapid.Uint32().Draw(t, "reads"), rapid.Uint64().Draw(t, "bytes")
	if rapid.Bool().Draw(t, "stats") {
		r.GapP50Us, r.GapP95Us, r.GapP99Us, r.GapMaxUs = rapid.Uint32().Draw(t, "p50"), rapid.Uint32().Draw(t, "p95"), rapid.Uint32().Draw(t, "p99"), rapid.Uint32().Draw(t, "max")
		r.TPOTUs, r.TokensPerSec = rapid.Uint32().Draw(t, "tpot"), genFloat.Draw(t, "tps")
		r.Stalls, r.StalledUs, r.Jank = rapid.Uint32().Draw(t, "stalls"), rapid.Uint64().Draw(t, "stalled"), genFloat.Draw(t, "jank")
		r.EventsPerRead, r.MaxEventsPerRead = genFloat.Draw(t, "epr"), rapid.Uint32().Draw(t, "maxepr")
		r.BytesPerRead, r.SubFloorShare = genFloat.Draw(t, "bpr"), genFloat.Draw(t, "subfloor")
	}
	if rapid.Bool().Draw(t, "causes") {
		for i := range r.StallsByCause {
			r.StallsByCause[i] = rapid.Uint32().Draw(t, "by_cause")
			r.StalledByCause[i] = rapid.Uint64().Draw(t, "stalled_by_cause")
		}
		r.TTFTCause = rapid.Uint8Range(0, numCauses-1).Draw(t, "ttft_cause")
	}
	r.ITL = genHist(t, "itl")
	if rapid.Bool().Draw(t, "itl_tokens") {
		r.ITLTokens = genHist(t, "itl_tokens")
	}
	r.StallList = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Stall {
		return Stall{StartUs: rapid.Uint32().Draw(t, "start"), EndUs: rapid.Uint32().Draw(t, "end"), Cause: rapid.Uint8Range(0, numCauses-1).Draw(t, "cause"), NextReadEvents: rapid.Uint32().Draw(t, "next")}
	}), 0, 8).Draw(t, "stall_list")
	r.Timeline = rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Stamp {
		return Stamp{AtUs: rapid.Uint32().Draw(t, "at"), Read: rapid.Uint32().Draw(t, "read"), Content: rapid.Bool().Draw(t, "content")}
	}), 0, 20).Draw(t, "timeline")
	r.TimelineDropped = rapid.Uint32().Draw(t, "timeline_dropped")
	return r
}

func genBatch(t *rapid.T) *Batch {
	return &Batch{
		Seq:  rapid.Uint64().Draw(t, "seq"),
		Site: genString("site").Draw(t, "site"),
		Client: Client{
			UserAgent: genString("ua").Draw(t, "ua"), UABrands: genString("brands").Draw(t, "brands"),
			UAPlatform: genString("platform").Draw(t, "platform"), UAMobile: rapid.Bool().Draw(t, "mobile"),
			ConnType: genString("conn").Draw(t, "conn"), ConnRTTMs: rapid.Uint16().Draw(t, "rtt"),
			TimerFloorUs: rapid.Uint32().Draw(t, "floor"), CrossOriginIso: rapid.Bool().Draw(t, "coi"),
			ModuleVersion: genString("mv").Draw(t, "mv"), Release: genString("release").Draw(t, "release"),
		},
		Dropped: rapid.Uint32().Draw(t, "dropped"),
		Records: rapid.SliceOfN(rapid.Custom(genRecord), 0, 4).Draw(t, "records"),
	}
}
