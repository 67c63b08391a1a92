package query_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/query"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/wasm/meter"
)

// writeRechunkHours stores n streams per hour over hours hours before base
// (and into base's hour) read in every pattern the re-chunking view tells
// apart (one read, steady, bursts, about one event a read), with stalls of
// the page and the network, first tokens waited for by the network, over a
// few API origins and protocols, and joins about a third of them with an
// origin timeline as the promoter writes it (itl_origin, version 1), some
// batched, some not.
func writeRechunkHours(t *testing.T, conn driver.Conn, base time.Time, hours, n int, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 11))
	var streams []collector.Stream
	for h := -hours; h <= 0; h++ {
		for range n {
			s := synth{ttft: time.Duration(200+rng.IntN(900)) * time.Millisecond, gaps: jittered(rng, rng.IntN(30), time.Duration(15+rng.IntN(40))*time.Millisecond)}
			r := s.record(t)
			ce := r.ContentEvents
			switch rng.IntN(5) {
			case 0: // the whole answer in one read
				r.Reads, r.MaxEventsPerRead, r.EventsPerRead = 1, ce, float32(ce)
			case 1: // steady
				r.EventsPerRead, r.MaxEventsPerRead = 3, 4
			case 2: // bursts
				r.EventsPerRead, r.MaxEventsPerRead = 1.2, 8
			}
			r.SubFloorShare = float32(rng.IntN(5)) / 8
			if rng.IntN(3) == 0 {
				r.TTFTCause = uint8(meter.CauseNetwork)
			}
			if rng.IntN(4) == 0 {
				r.StallsByCause[meter.CausePage] = 1
			}
			if rng.IntN(4) == 0 {
				r.StallsByCause[meter.CauseNetwork] = 2
			}
			r.URLOrigin = []string{"https://api.one.example", "https://api.two.example", "https://edge.example"}[rng.IntN(3)]
			r.HTTPProto = []string{"h2", "h3", "http/1.1"}[rng.IntN(3)]
			at := base.Add(time.Duration(h)*time.Hour + time.Duration(rng.IntN(3600))*time.Second + time.Duration(rng.IntN(1000))*time.Millisecond)
			streams = append(streams, collector.Stream{Record: r, Site: "rc", ReceivedAt: at,
				Country: []string{"DE", "FR", "US"}[rng.IntN(3)], Region: []string{"DE-BE", "FR-IDF", "US-CA"}[rng.IntN(3)],
				Browser: []string{"Chrome", "Firefox", "Safari"}[rng.IntN(3)], OS: "Linux", Device: []string{"desktop", "mobile"}[rng.IntN(2)],
				Release: []string{"r1", "r2"}[rng.IntN(2)], Colo: []string{"", "FRA"}[rng.IntN(2)]})
		}
	}
	ctx := context.Background()
	if err := store.InsertDirect(ctx, conn, streams); err != nil {
		t.Fatalf("insert: %v", err)
	}
	// The joined origin timelines of about a third of them (a stream is
	// joined once: not those of an earlier call), received 30 s
	// after the browser's record, with the browser's values as the join
	// copies them (promoter.joinedRow); batched when a fifth or more of
	// their gaps are zero-length.
	if err := conn.Exec(ctx, `INSERT INTO itl_origin (received_at, site, origin_id, version, started_at, route, content_events, itl_zero,
		stream_id, client_received_at, country, region, browser, os, device, model, release, colo, url_origin, http_proto, client_content_events)
		SELECT received_at + INTERVAL 30 SECOND, site, hex(stream_id), 1, started_at, '/v1/chat', 1 + cityHash64(stream_id, 1) % 40,
			cityHash64(stream_id, 2) % 12, stream_id, received_at, country, region, browser, os, device, model, release, colo, url_origin,
			http_proto, content_events
		FROM itl_streams WHERE site = 'rc' AND cityHash64(stream_id) % 3 = 0
			AND stream_id NOT IN (SELECT stream_id FROM itl_origin WHERE version = 1)`); err != nil {
		t.Fatalf("insert origins: %v", err)
	}
}

// TestRechunkRollupEqualsStreams: every re-chunking read that takes whole
// hours from itl_rechunk_1h answers what itl_streams joined with the origin
// timelines alone answers, by every dimension, for ranges on and off the
// hour, filtered by the dimension it breaks down by; reads naming two
// dimensions and ranges without a whole hour read itl_streams alone; and a
// rollup complete only from some hour on is read from it on.
func TestRechunkRollupEqualsStreams(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	conn := db.Conn()
	ctx := context.Background()
	base := time.Now().UTC().Truncate(time.Hour).Add(-time.Hour)
	// Two inserts, so that the rollup has rows of an hour in two parts.
	writeRechunkHours(t, conn, base, 30, 12, 1)
	writeRechunkHours(t, conn, base.Add(-2*time.Hour), 20, 8, 2)

	got, want := &tableConn{Conn: conn}, &tableConn{Conn: conn, minuteOnly: true}
	check := func(name string, hourly bool, f query.Filter, dim string) {
		t.Helper()
		r := sameAnswer(t, got, want, name, func(c query.Conn) (any, error) { return query.RechunkBy(ctx, c, f, dim) })
		if strings.Contains(r, "itl_rechunk_1h") != hourly {
			t.Errorf("%s: read %q; the rechunk rollup read: %v, want %v", name, r, !hourly, hourly)
		}
	}
	reads := func(label string, f query.Filter, wholeHours bool) {
		for _, dim := range query.RawDimensions() {
			check(label+": by "+dim, wholeHours, f, dim)
		}
		same, other := f, f
		same.Where = map[string]string{"browser": "Chrome"}
		other.Where = map[string]string{"region": "US-CA"}
		check(label+": by browser where browser", wholeHours, same, "browser")
		check(label+": by api_origin where region", false, other, "api_origin")
		check(label+": by region where region", wholeHours, other, "region")
	}
	reads("off the hour at both ends", query.Filter{Site: "rc", Since: base.Add(-29*time.Hour + 17*time.Minute + 20*time.Second), Until: base.Add(43*time.Minute + 5*time.Second)}, true)
	reads("on the hour", query.Filter{Site: "rc", Since: base.Add(-20 * time.Hour), Until: base.Add(-2 * time.Hour)}, true)
	reads("until now", query.Filter{Site: "rc", Since: base.Add(-25*time.Hour + 30*time.Minute)}, true)
	reads("within an hour", query.Filter{Site: "rc", Since: base.Add(-5*time.Hour + 10*time.Minute), Until: base.Add(-5*time.Hour + 50*time.Minute)}, false)

	// The rollup complete only from an hour on, as after its migration on a
	// database with streams (the hours before it missing there): the hours
	// before it are read from itl_streams.
	from := base.Add(-10 * time.Hour)
	completeOnlyFrom(t, conn, "itl_rechunk_1h", "hour", from)
	reads("partly complete", query.Filter{Site: "rc", Since: base.Add(-26*time.Hour + 5*time.Minute), Until: base.Add(10 * time.Minute)}, true)
	reads("before it is complete", query.Filter{Site: "rc", Since: base.Add(-26 * time.Hour), Until: from.Add(30 * time.Minute)}, false)
}
