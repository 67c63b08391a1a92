package query_test

import (
	"context"
	"encoding/hex"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/itlmon/itlmon/collector/query"
)

// TestCompareSampleEqualsStreams: itl_streams_sample holds exactly the
// streams whose hash is below the bound, and a comparison answers, stream
// for stream, what it answers from itl_streams alone for the same streams:
// from the sample when a side has the limit's streams there, or fewer but
// at least the floor (then the answer from itl_streams with that many),
// from itl_streams when it has fewer or the range starts before the sample
// is complete.
func TestCompareSampleEqualsStreams(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	conn := db.Conn()
	ctx := context.Background()
	base := time.Now().UTC().Truncate(time.Hour).Add(-time.Hour)
	// Two inserts, so that the sample has rows of an hour in two parts.
	writeHours(t, conn, base, 40, 40, 11)
	writeHours(t, conn, base.Add(-3*time.Hour), 20, 30, 12)

	want := ids(t, conn, "SELECT stream_id FROM itl_streams WHERE cityHash64(stream_id) < pow(2, 60)")
	if got := ids(t, conn, "SELECT stream_id FROM itl_streams_sample"); !slices.Equal(got, want) {
		t.Fatalf("itl_streams_sample holds %d streams, itl_streams %d below the bound (or other ones)", len(got), len(want))
	}
	var total uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM itl_streams").Scan(&total); err != nil {
		t.Fatal(err)
	}
	if n := len(want); n < int(total)/32 || n > int(total)/8 {
		t.Fatalf("itl_streams_sample holds %d of %d streams, not about a sixteenth", n, total)
	}

	got, raw := &tableConn{Conn: conn}, &tableConn{Conn: conn, minuteOnly: true}
	// Sides read from the sample (the limit's streams there, or fewer but
	// at least the floor), from itl_streams with too few of their streams
	// in the sample, from itl_streams with the sample not complete.
	var fromSample, fewer, tooFew, notComplete int
	// inSample counts the streams of a side in the sample.
	inSample := func(f query.Filter, col, v string) int {
		t.Helper()
		q := "SELECT count() FROM itl_streams_sample WHERE site = ? AND received_at >= ? AND received_at < ? AND " + col + " = ?"
		args := []any{f.Site, f.Since, f.Until, v}
		for k, w := range f.Where {
			q += " AND " + k + " = ?"
			args = append(args, w)
		}
		var n uint64
		if err := conn.QueryRow(ctx, q, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return int(n)
	}
	// check compares the answer through got with the one through raw
	// (itl_streams alone) for the streams the sample gives each side (all
	// of the limit's, or the k < limit the sample holds when k is at least
	// the floor: the side's k smallest hashes), and which tables the read
	// through got took its streams from.
	check := func(name string, f query.Filter, dim, col, a, b string, limit, floor int, sampleComplete bool) {
		t.Helper()
		g, err := query.CompareLimits(ctx, got, f, dim, a, b, [2]int{limit, limit}, floor)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		wantSample, wantStreams := 0, 0
		limits := [2]int{limit, limit}
		for i, v := range []string{a, b} {
			k := 0
			if sampleComplete {
				k = inSample(f, col, v)
			}
			switch {
			case !sampleComplete:
				wantStreams++
				notComplete++
			case k >= limit:
				wantSample++
				fromSample++
			case k >= floor:
				wantSample++
				fewer++
				limits[i] = k
			default:
				// The sample read first, then itl_streams.
				wantSample++
				wantStreams++
				tooFew++
			}
		}
		w, err := query.CompareLimits(ctx, raw, f, dim, a, b, limits, floor)
		if err != nil {
			t.Fatalf("%s (itl_streams alone): %v", name, err)
		}
		if rawRead := sampleReads(raw); rawRead[0] != 0 {
			t.Fatalf("%s: the read of itl_streams alone read the sample", name)
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s: with the sample\n%+v\nfrom itl_streams alone, at most %v streams a side\n%+v", name, g, limits, w)
		}
		if r := sampleReads(got); r != [2]int{wantSample, wantStreams} {
			t.Errorf("%s: the sides were read %d times from the sample and %d from itl_streams, want %d and %d",
				name, r[0], r[1], wantSample, wantStreams)
		}
	}
	reads := func(label string, f query.Filter, complete bool) {
		fr := f
		fr.Where = map[string]string{"region": "DE-BE"}
		for _, limit := range []int{4, 12, 40, 150} {
			for _, floor := range []int{limit, limit / 3} {
				l := label + ", at most " + strconv.Itoa(limit) + ", at least " + strconv.Itoa(floor) + " from the sample"
				check(l+": by browser", f, "browser", "browser", "Chrome", "Firefox", limit, floor, complete)
				check(l+": by release where region", fr, "release", "release", "r1", "r2", limit, floor, complete)
			}
		}
	}
	reads("the sample complete from the start", query.Filter{Site: "h", Since: base.Add(-41 * time.Hour), Until: base.Add(time.Hour)}, true)
	reads("off the hour", query.Filter{Site: "h", Since: base.Add(-30*time.Hour + 17*time.Minute), Until: base.Add(-4*time.Hour + 5*time.Second)}, true)

	// The sample complete only from an hour on, as after its migration on
	// a database with streams (the streams before it missing): a range
	// from before it reads itl_streams.
	from := base.Add(-20 * time.Hour)
	completeOnlyFrom(t, conn, "itl_streams_sample", "received_at", from)
	reads("a range from before the sample is complete", query.Filter{Site: "h", Since: from.Add(-10*time.Hour + 20*time.Minute), Until: base}, false)
	reads("a range from when it is complete", query.Filter{Site: "h", Since: from, Until: base.Add(time.Hour)}, true)
	t.Logf("sides read from the sample %d times (%d of them with fewer than the limit), from itl_streams with too few in it %d, with it not complete %d",
		fromSample+fewer, fewer, tooFew, notComplete)
	if fromSample < 4 || fewer < 4 || tooFew < 4 || notComplete < 4 {
		t.Errorf("sides read from the sample with the limit's streams %d times, with fewer %d, from itl_streams with too few in it %d, with it not complete %d: want every path taken",
			fromSample, fewer, tooFew, notComplete)
	}
}

// ids are the stream ids a query returns, hex, sorted.
func ids(t *testing.T, conn driver.Conn, q string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out = append(out, hex.EncodeToString([]byte(id)))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// sampleReads counts the reads of a side's streams sent through c since
// the last call, from itl_streams_sample and from itl_streams, and forgets
// them.
func sampleReads(c *tableConn) [2]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n [2]int
	for _, q := range c.sent {
		switch {
		case strings.Contains(q, "FROM itl_streams_sample WHERE") && strings.Contains(q, "ORDER BY hash"):
			n[0]++
		case strings.Contains(q, "FROM itl_streams WHERE") && strings.Contains(q, "ORDER BY cityHash64(stream_id)"):
			n[1]++
		}
	}
	c.sent = nil
	return n
}
