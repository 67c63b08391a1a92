package benchreport

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// seedSQL inserts n streams (numbers start..start+n of total) into
// itl_streams, made by the engine: received over the 30 days before now in
// the order of their numbers, oldest first, as production inserts arrive (an
// insert covers a slice of time, not all 30 days: spread over every day
// partition, a 10 M seed slowed to 1,300 rows/s), three sites, regions,
// browsers, models and releases with skewed weights, the stream's ITL as a
// sparse histogram in the store's layout (hist scale 5: bucket i holds
// (2^(i/32), 2^((i+1)/32)] µs, ascending indexes, no zero counts) around a
// cadence per model, stalls over 200 ms with causes in the histogram and the
// stall arrays, TTFT, TPOT and the re-chunking signals; some streams aborted,
// failed (before the headers or with an HTTP error), and re-chunked by a
// buffering proxy (one read at the end: every gap in the zero bucket).
// Random values are hashes of the stream's number: the same numbers give the
// same rows.
func seedSQL(now time.Time, start, n, total int) string {
	// Columns: hashes of the number, uniform in [0, 1).
	var u strings.Builder
	for k := 1; k <= 16; k++ {
		u.WriteString(", (cityHash64(number, " + strconv.Itoa(k) + ") % 1000003) / 1000003 AS u" + strconv.Itoa(k))
	}
	r := strings.NewReplacer(
		"{NOW_MS}", strconv.FormatInt(now.UnixMilli(), 10),
		"{START}", strconv.Itoa(start), "{N}", strconv.Itoa(n), "{TOTAL}", strconv.Itoa(total),
		"{U}", u.String(),
		"{SITE}", weighted("u1", 60, 25, 15),
		"{GEO}", weighted("u2", geoWeights()...),
		"{BROWSER}", weighted("u3", browserWeights()...),
		"{MODEL}", weighted("u4", 40, 25, 20, 15),
		"{PROTO}", weighted("u5", 70, 20, 10),
		"{STATUS}", weighted("u7", 93, 4, 2, 1),
		"{CAUSE}", weighted("(cityHash64(n, 200 + j) % 1000) / 1000", 40, 30, 15, 15),
		"{TTFT_CAUSE}", weighted("u16", 50, 35, 15),
		"{W}", shapeWeights(),
		"{COUNTRIES}", geoCol(0), "{REGIONS}", geoCol(1),
		"{BROWSERS}", browserCol(0), "{MAJORS}", browserCol(1), "{OSES}", browserCol(2), "{DEVICES}", browserCol(3),
	)
	return r.Replace(seedTemplate)
}

// weighted is the 1-based index picked by u (a column uniform in [0, 1))
// among weights.
func weighted(u string, weights ...float64) string {
	var sum float64
	for _, w := range weights {
		sum += w
	}
	var b strings.Builder
	b.WriteString("arrayFirstIndex(c -> c > " + u + ", [")
	var cum float64
	for i, w := range weights {
		cum += w
		if i > 0 {
			b.WriteString(", ")
		}
		if i == len(weights)-1 {
			b.WriteString("2.0")
			break
		}
		b.WriteString(strconv.FormatFloat(cum/sum, 'f', 6, 64))
	}
	b.WriteString("])")
	return b.String()
}

// shapeWeights is the share of a stream's regular gaps per bucket offset
// -24..36 from the bucket of its median gap: a log-normal-like bump, wider
// above the median (about 1.3x per 12 buckets).
func shapeWeights() string {
	ws := make([]float64, 61)
	var sum float64
	for i := range ws {
		k, s := float64(i-24), 8.0
		if k > 0 {
			s = 12
		}
		ws[i] = math.Exp(-k * k / (2 * s * s))
		sum += ws[i]
	}
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = strconv.FormatFloat(w/sum, 'f', 6, 64)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

var seedGeo = []struct {
	country, region string
	w               float64
}{
	{"US", "US-CA", 10}, {"US", "US-NY", 7}, {"US", "US-TX", 6}, {"US", "US-WA", 3}, {"DE", "DE-BE", 4}, {"DE", "DE-BY", 4},
	{"GB", "GB-ENG", 7}, {"FR", "FR-IDF", 4}, {"IN", "IN-KA", 5}, {"IN", "IN-MH", 4}, {"BR", "BR-SP", 4}, {"JP", "JP-13", 4},
	{"CA", "CA-ON", 3}, {"AU", "AU-NSW", 2}, {"NL", "NL-NH", 2}, {"PL", "PL-14", 1.5}, {"SG", "SG-01", 1.5}, {"ES", "ES-MD", 2},
	{"IT", "IT-25", 2}, {"MX", "MX-CMX", 1.5},
}

func geoWeights() []float64 {
	ws := make([]float64, len(seedGeo))
	for i, g := range seedGeo {
		ws[i] = g.w
	}
	return ws
}

func geoCol(c int) string {
	vs := make([]string, len(seedGeo))
	for i, g := range seedGeo {
		vs[i] = "'" + [2]string{g.country, g.region}[c] + "'"
	}
	return "[" + strings.Join(vs, ", ") + "]"
}

var seedBrowsers = []struct {
	browser, major, os, device string
	w                          float64
}{
	{"Chrome", "131", "Windows", "desktop", 28}, {"Chrome", "131", "macOS", "desktop", 12}, {"Chrome", "131", "Android", "mobile", 14},
	{"Safari", "18", "iOS", "mobile", 13}, {"Safari", "18", "macOS", "desktop", 6}, {"Edge", "131", "Windows", "desktop", 9},
	{"Firefox", "133", "Windows", "desktop", 4}, {"Firefox", "133", "Linux", "desktop", 2}, {"Chrome", "131", "Linux", "desktop", 2},
	{"Samsung Browser", "27", "Android", "mobile", 2}, {"Chrome", "130", "Windows", "desktop", 4}, {"Safari", "17", "iOS", "mobile", 4},
}

func browserWeights() []float64 {
	ws := make([]float64, len(seedBrowsers))
	for i, b := range seedBrowsers {
		ws[i] = b.w
	}
	return ws
}

func browserCol(c int) string {
	vs := make([]string, len(seedBrowsers))
	for i, b := range seedBrowsers {
		v := [4]string{b.browser, b.major, b.os, b.device}[c]
		if c != 1 {
			v = "'" + v + "'"
		}
		vs[i] = v
	}
	return "[" + strings.Join(vs, ", ") + "]"
}

// seedTemplate: A draws the uniforms, B the stream's facts, C its gaps
// (histogram, stalls), D the derived figures; the outer SELECT names the
// columns as the store writes them. Times in µs. The bucket index of v is
// ceil(32·log2 v) − 1 (hist.BucketIndex).
const seedTemplate = `
INSERT INTO itl_streams (received_at, started_at, site, stream_id, origin_id, page_origin, page_path, url_origin, url_path,
	model, http_proto, content_type, format, status, http_status, end_reason, headers_us,
	ttfb_us, ttfc_us, ttft_us, ttft_idx, duration_us, events, content_events, tokens, tokens_reported, reads, bytes,
	gap_p50_us, gap_p95_us, gap_p99_us, gap_max_us, tpot_us, tokens_per_sec, tpot_idx, stalls, stalled_us, jank, smooth,
	events_per_read, max_events_per_read, bytes_per_read, sub_floor_share,
	stalls_unknown, stalls_network, stalls_page, stalls_origin, stalled_us_unknown, stalled_us_network, stalled_us_page, stalled_us_origin, ttft_cause,
	itl_idx, itl_cnt, itl_zero, itl_sum, itl_min, itl_max, itl_tok_idx, itl_tok_cnt, itl_tok_zero, itl_tok_sum, itl_tok_min, itl_tok_max,
	stall_start_us, stall_end_us, stall_cause, stall_next_read_events, timeline_dropped,
	release, module_version, conn_type, conn_rtt_ms, timer_floor_us, country, region, browser, browser_major, os, device)
SELECT
	recv, recv - toIntervalMillisecond(toInt64(dur / 1000)), site, stream_id, if(cityHash64(stream_id) % 3 = 0, lower(hex(stream_id)), ''), 'https://' || site || '.example.com', '/c', url_origin, '/v1/chat/completions',
	model, proto, if(nocontent, 'application/json', 'text/event-stream'), if(mi = 3, 'anthropic', 'openai_chat'), status, http_status, end_reason,
	if(before_h, NULL, toUInt32(ttft * 0.55)),
	if(before_h, NULL, toUInt32(ttft * 0.6)), if(nocontent, NULL, toUInt32(ttft * 0.95)), if(nocontent, NULL, toUInt32(ttft)),
	if(nocontent, 0, toInt32(ceil(32 * log2(ttft))) - 1), toUInt32(dur),
	events, ce, ce * k, u6 < 0.7, reads, bytes,
	p50, p95, p99, gmax, tpot, tps, if(tps > 0, toInt32(ceil(32 * log2(1e6 / tps))) - 1, 0),
	ns, toUInt64(arraySum(sg)), jank, jank < 4 AND tps > 7,
	epr, mepr, if(reads > 0, bytes / reads, 0), if(coal, 1, u12 * 0.03),
	arrayCount(c -> c = 'unknown', sc), arrayCount(c -> c = 'network', sc), arrayCount(c -> c = 'page', sc), arrayCount(c -> c = 'origin', sc),
	arraySum((g, c) -> if(c = 'unknown', g, 0), sg, sc), arraySum((g, c) -> if(c = 'network', g, 0), sg, sc),
	arraySum((g, c) -> if(c = 'page', g, 0), sg, sc), arraySum((g, c) -> if(c = 'origin', g, 0), sg, sc),
	multiIf(coal, 'network', nocontent OR ttft < 2e6, 'none', ['origin', 'unknown', 'page'][{TTFT_CAUSE}]),
	hidx, hcnt, zero, isum, imin, imax,
	tidx, arrayMap(c -> c * k, hcnt), zero * k, isum,
	if(empty(tidx), 0, pow(2, (tidx[1] + 0.5) / 32)), if(empty(tidx), 0, pow(2, (tidx[-1] + 0.5) / 32)),
	arrayMap((j, g) -> toUInt32(ttft + (j + 1) * (isum - arraySum(sg)) / (ns + 1)), range(ns), sg),
	arrayMap((j, g) -> toUInt32(ttft + (j + 1) * (isum - arraySum(sg)) / (ns + 1) + g), range(ns), sg),
	sc, arrayMap(c -> toUInt32(if(c = 'network', 4, 1)), sc), 0,
	rel, 'v0.9.0', if(device = 'mobile', ['4g', 'wifi'][1 + (u13 < 0.6)], ''), toUInt16(30 + u14 * 170), if(browser = 'Firefox', 1000, 100),
	country, region, browser, browser_major, os, device
FROM
(
	SELECT *,
		toUInt32(if(nocontent, 0, 1 + zero + arraySum(hcnt))) AS ce,
		if(ce > 0, ce + 2, 0) AS events,
		toUInt32(multiIf(before_h, 0, nocontent OR coal, 1, greatest(1, round(events / (1.05 + u15 * 0.3))))) AS reads,
		if(reads > 0, events / reads, 0) AS epr,
		toUInt32(if(coal, events, ceil(epr * 2) + if(has(sc, 'network'), 4, 0))) AS mepr,
		toUInt64(events * (90 + u11 * 60) + 300) AS bytes,
		if(coal, 0, arraySum((i, c) -> c * pow(2, (i + 0.5) / 32), hidx, hcnt)) AS isum,
		if(empty(hidx), 0, pow(2, (hidx[1] + 0.5) / 32)) AS imin,
		if(empty(hidx), 0, pow(2, (hidx[-1] + 0.5) / 32)) AS imax,
		arrayMap(i -> toInt32(i - if(k = 3, 51, 0)), hidx) AS tidx,
		toUInt32(if(empty(hidx), 0, g50)) AS p50,
		toUInt32(p50 * 1.45) AS p95,
		toUInt32(if(ns > 0 AND ns * 100 >= ce, arrayMax(sg), p50 * 1.7)) AS p99,
		toUInt32(imax) AS gmax,
		multiIf(before_h, wait, nocontent, ttft, ttft + isum + 20000) AS dur,
		toUInt32(if(ce >= 2 AND isum > 0, isum / (ce - 1), 0)) AS tpot,
		toFloat32(if(tpot > 0, 1e6 * k / tpot, 0)) AS tps,
		toFloat32(if(p50 > 0, p99 / greatest(p50, 1000), 0)) AS jank
	FROM
	(
		SELECT *,
			arrayMap(i -> toInt32(cidx + i - 24), range(61)) AS idxs,
			arrayMap(w -> toUInt64(round(w * ngaps)), {W}) AS cnts,
			arrayMap(j -> toUInt32(200001 + cityHash64(n, 100 + j) % 1800000), range(ns)) AS sg,
			arrayMap(j -> ['network', 'origin', 'page', 'unknown'][{CAUSE}], range(ns)) AS sc,
			mapAdd((arrayFilter((i, c) -> c > 0, idxs, cnts), arrayFilter(c -> c > 0, cnts)),
				(arrayMap(g -> toInt32(ceil(32 * log2(g)) - 1), sg), arrayMap(g -> toUInt64(1), sg))) AS merged,
			if(coal, [], merged.1) AS hidx,
			if(coal, [], merged.2) AS hcnt,
			toUInt64(if(coal, ngaps, 0)) AS zero
		FROM
		(
			SELECT *,
				['chat', 'docs', 'support'][si] AS site,
				{COUNTRIES}[gi] AS country, {REGIONS}[gi] AS region,
				{BROWSERS}[bi] AS browser, toUInt16({MAJORS}[bi]) AS browser_major, {OSES}[bi] AS os, {DEVICES}[bi] AS device,
				['gpt-4o-mini', 'gpt-4o', 'claude-sonnet-4', 'llama-3.1-70b'][mi] AS model,
				['h2', 'h3', 'http/1.1'][pi] AS proto,
				if(pi = 3, 'https://gw.example.net', 'https://api.example.com') AS url_origin,
				multiIf(age_ms > 12 * 86400000, 'web-2026.11.1', age_ms > 2 * 86400000, if(u6 < 0.05, 'web-2026.11.1', 'web-2026.11.2'),
					if(u6 < 0.7, 'web-2026.11.3', 'web-2026.11.2')) AS rel,
				['complete', 'aborted', 'error', 'http_error'][sti] AS status,
				[200, 200, 200, [429, 500, 503][1 + (n % 3)]][sti] * NOT before_h AS http_status,
				['body_end', 'abort', 'error', 'body_end'][sti] AS end_reason,
				if(mi = 3, 3, 1) AS k,
				sqrt(-2 * log(u8 + 1e-9)) * cos(2 * pi() * u9) AS z1,
				sqrt(-2 * log(u8 + 1e-9)) * sin(2 * pi() * u9) AS z2,
				sqrt(-2 * log(u10 + 1e-9)) * cos(2 * pi() * u11) AS z3,
				[18000, 30000, 24000, 40000][mi] * exp(0.25 * z3) * if(rel = 'web-2026.11.3', 1.15, 1) AS g50,
				toInt32(ceil(32 * log2(g50))) - 1 AS cidx,
				toUInt32(if(nocontent OR coal, 0, if(u12 < 0.08, 1 + cityHash64(n, 50) % 3, 0))) AS ns,
				least(4000, 20 + exp(log(200) + 0.7 * z2)) * if(sti = 2, 0.4, 1) AS ce_target,
				toUInt64(if(nocontent, 0, greatest(ce_target, toFloat64(ns + 2)) - 1 - ns)) AS ngaps,
				[380000, 650000, 820000, 450000][mi] * exp(0.45 * z1) + if(coal, ngaps * g50, 0) AS ttft,
				2e6 + u16 * 28e6 AS wait
			FROM
			(
				SELECT *,
					number AS n,
					intDiv(({TOTAL} - 1 - number) * 2592000000, {TOTAL}) + cityHash64(number, 0) % intDiv(2592000000 + {TOTAL} - 1, {TOTAL}) AS age_ms,
					fromUnixTimestamp64Milli(toInt64({NOW_MS} - age_ms), 'UTC') AS recv,
					toFixedString(reinterpretAsString(cityHash64(number, 'id1')) || reinterpretAsString(cityHash64(number, 'id2')), 16) AS stream_id,
					{SITE} AS si, {GEO} AS gi, {BROWSER} AS bi, {MODEL} AS mi, {PROTO} AS pi, {STATUS} AS sti,
					sti IN (2, 3) AND u13 < 0.3 AS before_h,
					before_h OR sti = 4 AS nocontent,
					pi = 3 AND u14 < 0.4 AS coal
				FROM (SELECT number {U} FROM numbers_mt({START}, {N}))
			)
		)
	)
)
SETTINGS max_insert_threads = 2`
