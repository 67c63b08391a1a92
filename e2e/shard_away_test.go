package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/itlmon/itlmon/collector/chdb"
	"github.com/itlmon/itlmon/e2e/nginx"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// awayFor is how long the shard stays away at least: an outage of half a
// minute, in which both collectors' writers back off five times (1, 2, 4, 8,
// 16 s, toward their 30 s cap) and the live shard promotes windows. It stays
// away until the live shard has promoted a window too (within liveWithin).
const (
	awayFor    = 30 * time.Second
	liveWithin = 30 * time.Second
)

// TestShardAway: two `itlmon serve --cluster itl` collectors, one on each
// node of a two-shard cluster of embedded engines, behind nginx; a headless
// Chromium page streams answers from an origin the whole time, its module
// sending the records through nginx, and two WebSocket clients (one per
// collector, round robin) send batches of records as the module does, each
// batch after the last one's ack, for a steady load.
// Shard 2's engine is SIGKILLed while an insert into its inbox runs and
// kept away 30 s, and until shard 1 has promoted a window meanwhile: the
// collectors keep acking (the one on shard 2's node spools; the other's
// inserts fail for shard 2, are spooled, and land shard 1's rows at once),
// /readyz of the collector on shard 2's node says not ready. Shard 2
// restarts; once a promotion's insert runs on it, it is SIGKILLed again and
// restarted by its supervisor. Then every acked record is stored exactly once
// (itl_streams, and itl_promoted_ids' client ids, through the Distributed
// tables), records acked while shard 2 was away are stored on shard 2
// (promoted after its return), and every wait has a bound.
func TestShardAway(t *testing.T) {
	Browser(t)
	nginx.RequireReal(t)
	// Its assertions time nothing (every bound is a deadline of tens of
	// seconds), and most of its 80 s is the outage and the replays' back-off:
	// beside the other parallel tests rather than alone.
	t.Parallel()
	began := time.Now()
	db := startClusterDB(t)
	og := StartOrigin(t)
	const site, page = "away", "https://page.example.com"
	collector := func(node int) *Collector {
		return StartCollectorArgs(t, []string{"--clickhouse", db.dsn(node), "--cluster", lbcCluster, "--log-level", "info"}, site+"="+page+","+og.URL)
	}
	a, b := collector(0), collector(1)
	lb := Balance(t, nginx.Options{}, a, b)
	og.SetCollector(lb.URL(), site)
	away := db.engines[1]
	t.Logf("cluster, migration, collectors and balancer up in %v", time.Since(began).Round(time.Millisecond))

	// The clients: each sends a batch of 3 records, waits for its ack (a
	// minute at most), and sends the next, until stop.
	var (
		mu    sync.Mutex
		acked = map[string]time.Time{} // stream id (hex) -> when its batch was acked
		stop  = make(chan struct{})
		wg    sync.WaitGroup
		next  uint32
	)
	for c := range 2 {
		ws, _, err := websocket.DefaultDialer.Dial("ws://"+lb.Addr+"/v1/ws?site="+site, http.Header{"Origin": {page}})
		if err != nil {
			t.Fatalf("WebSocket through nginx: %v\n%s", err, lb.ErrorLog())
		}
		t.Cleanup(func() { ws.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := uint64(1); ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				bb := beacon.Batch{Seq: seq, Client: beacon.Client{ModuleVersion: "e2e"}}
				var ids []string
				mu.Lock()
				for range 3 {
					next++
					r := testRecord(page, "away-test", 0xa3, byte(c), next) // client c's own ids
					bb.Records = append(bb.Records, r)
					ids = append(ids, fmt.Sprintf("%x", r.StreamID))
				}
				mu.Unlock()
				p, err := bb.AppendBinary(nil)
				if err == nil {
					err = ws.WriteMessage(websocket.BinaryMessage, p)
				}
				if err == nil {
					ws.SetReadDeadline(time.Now().Add(time.Minute))
					_, p, err = ws.ReadMessage()
				}
				var ack beacon.Ack
				if err == nil {
					ack, err = beacon.DecodeAck(p)
				}
				if err == nil && ack.Seq != seq {
					err = fmt.Errorf("ack of seq %d, want %d", ack.Seq, seq)
				}
				if err != nil {
					t.Errorf("client %d, batch %d: %v", c, seq, err)
					return
				}
				mu.Lock()
				for _, id := range ids {
					acked[id] = time.Now()
				}
				mu.Unlock()
			}
		}()
	}
	stopClients := func() {
		close(stop)
		wg.Wait()
	}
	defer func() {
		select {
		case <-stop:
		default:
			stopClients()
		}
	}()
	// The page: answers of 20 tokens 20 ms apart, one after the other, until
	// __awayStop.
	tab := clusterTab{"page", NewTab(t)}
	if !OpenPage(t, tab.ctx, og.PageURL(map[string]any{"flushMs": 100}, false)) {
		t.Fatalf("page: itlmon did not become ready: %s", Eval[string](t, tab.ctx, `itlmon.timing.error`))
	}
	Eval[bool](t, tab.ctx, `(window.__awayRun = (async () => {
		while (!window.__awayStop) { const r = await e2e.stream('tokens=20&interval_ms=20'); if (r.error || r.status !== 200) return r.status + ' ' + r.error; }
		return '';
	})(), true)`)
	pageStreams := func() int { return len(PageSummaries(t, tab.ctx)) }
	ackedBetween := func(from, to time.Time) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, at := range acked {
			if at.After(from) && at.Before(to) {
				n++
			}
		}
		return n
	}

	// Shard 2 away, SIGKILLed while an insert into its inbox runs.
	if !Eventually(60*time.Second, 50*time.Millisecond, func() bool {
		return engineCount(t, away, "SELECT count() FROM itlmon_local.itl_streams") > 0
	}) {
		t.Fatal("shard 2 promoted no stream within 60 s of the clients' start")
	}
	caught := inFlight(t, away, 30*time.Second, "query_kind = 'Insert' AND positionCaseInsensitive(query, 'itl_inbox') > 0")
	if err := away.Crash(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	pageAtKill := pageStreams()
	t.Logf("shard 2 SIGKILLed %v after the start (%s)", killed.Sub(began).Round(time.Millisecond), caught)

	// Meanwhile shard 1 promotes windows that began after the kill, the
	// collectors keep acking, and the collector on shard 2's node is not
	// ready.
	if !Eventually(liveWithin, 100*time.Millisecond, func() bool {
		var n uint64
		err := db.locals[0].QueryRow(t.Context(), "SELECT count() FROM itl_promoted WHERE promoted_window >= toDateTime(?, 'UTC') AND streams > 0",
			killed.Unix()).Scan(&n)
		return err == nil && n > 0
	}) {
		t.Fatalf("shard 1 promoted no window that began after the kill within %v of it: inbox (rows, last ingested, since the kill), last promoted window, now: %s",
			liveWithin, db.oneOn(t, 0, "(SELECT count(), max(ingested_at), countIf(ingested_at >= toDateTime(?, 'UTC')) FROM itl_inbox), (SELECT max(promoted_window) FROM itl_promoted), now()", killed.Unix()))
	}
	if code := readyz(t, b); code == http.StatusOK {
		t.Errorf("collector %s on shard 2's node: /readyz %d while shard 2 is away, want not ready", b.Addr, code)
	}
	if code := readyz(t, a); code != http.StatusOK {
		t.Errorf("collector %s on shard 1's node: /readyz %d while shard 2 is away, want 200", a.Addr, code)
	}
	// sleep: the one real wait, the shard stays away awayFor by the clock, as a
	// server that is down for that long would (the collectors' retries and
	// back-off run on their own clocks in their own processes).
	time.Sleep(time.Until(killed.Add(awayFor)))
	during := ackedBetween(killed, time.Now())
	if during == 0 {
		t.Fatalf("no record acked while shard 2 was away")
	}
	pageDuring := pageStreams() - pageAtKill
	if pageDuring == 0 {
		t.Fatalf("the page streamed no answer while shard 2 was away")
	}
	if err := away.Restart(t.Context()); err != nil {
		t.Fatalf("restart shard 2: %v", err)
	}
	back := time.Now()
	t.Logf("shard 2 back after %v; %d records acked meanwhile and the page streamed %d answers; collector on its node spooled %v records, the other %v",
		back.Sub(killed).Round(time.Millisecond), during, pageDuring, b.metric(t, "itlmon_store_rows_spooled_total"), a.metric(t, "itlmon_store_rows_spooled_total"))

	// Shard 2 SIGKILLed again during a promotion (an insert into a table the
	// promoter fills), and restarted by its supervisor.
	caught = inFlight(t, away, 90*time.Second,
		"query_kind = 'Insert' AND match(query, '(?i)INSERT INTO[[:space:]]+`?(itl_streams|itl_timelines|itl_promoted_ids|itl_promoted)`?[[:space:](]')")
	if err := away.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("shard 2 SIGKILLed again %v after its return (%s)", time.Since(back).Round(time.Millisecond), caught)
	if err := away.Ready(t.Context()); err != nil {
		t.Fatal(err)
	}
	// A few more batches after the second return, then the clients stop.
	n := ackedBetween(back, time.Now().Add(time.Hour))
	if !Eventually(60*time.Second, 50*time.Millisecond, func() bool { return ackedBetween(back, time.Now().Add(time.Hour)) >= n+12 }) {
		t.Fatalf("clients acked %d records in the minute after shard 2's second return, want 12", ackedBetween(back, time.Now().Add(time.Hour))-n)
	}
	stopClients()
	if e := Eval[string](t, tab.ctx, `(window.__awayStop = true, window.__awayRun)`); e != "" {
		t.Fatalf("page: an answer failed: %s", e)
	}
	// Every record of the page acked: its module holds nothing.
	tab.acked(t, 60*time.Second)
	pageIDs := PageSummaries(t, tab.ctx)
	mu.Lock()
	for _, s := range pageIDs {
		acked[s.ID] = time.Time{} // checked stored once; the clients' ack times date the outage
	}
	mu.Unlock()
	t.Logf("the page streamed %d answers, %d of them while shard 2 was away, all acked", len(pageIDs), pageDuring)

	// Everything replayed and promoted.
	waitSpooled(t, 90*time.Second, a, b)
	// Every acked record is in an inbox now. Each shard has promoted them
	// all once no inbox row ingested before this moment is newer than its
	// last promoted window: a window is promoted only the hold and grace
	// after its end, so rows the replays landed a moment ago are still
	// waiting, and the check must not stop short of them.
	for i := range db.locals {
		var until time.Time
		if err := db.locals[i].QueryRow(t.Context(), "SELECT now64(6)").Scan(&until); err != nil {
			t.Fatal(err)
		}
		pendingQuery := pendingBefore(until)
		if !Eventually(60*time.Second, 100*time.Millisecond, func() bool { return db.oneOn(t, i, pendingQuery) == "0" }) {
			w0, e0 := a.metric(t, "itlmon_promote_windows_total")+b.metric(t, "itlmon_promote_windows_total"), a.metric(t, "itlmon_promote_errors_total")+b.metric(t, "itlmon_promote_errors_total")
			seen := map[string]string{}
			Eventually(5*time.Second, 5*time.Millisecond, func() bool {
				rows, err := db.locals[i].Query(t.Context(), "SELECT query_id, toString(elapsed), substring(replaceRegexpAll(query, '[[:space:]]+', ' '), 1, 90) FROM system.processes WHERE query NOT LIKE '%system.processes%' AND query NOT LIKE '%sleepEachRow%'")
				if err == nil {
					for rows.Next() {
						var id, el, q string
						rows.Scan(&id, &el, &q)
						seen[id] = el + " " + q
					}
					rows.Close()
				}
				return false
			})
			for id, q := range seen {
				t.Logf("shard %d running in 5 s: %s %s", i+1, id[:8], q)
			}
			t.Logf("shard %d: promoter windows %v -> %v, errors %v -> %v in 5 s; system.errors: %s", i+1, w0,
				a.metric(t, "itlmon_promote_windows_total")+b.metric(t, "itlmon_promote_windows_total"), e0,
				a.metric(t, "itlmon_promote_errors_total")+b.metric(t, "itlmon_promote_errors_total"),
				db.oneOn(t, i, "SELECT groupArray((name, value, toString(last_error_time), substring(last_error_message, 1, 200))) FROM (SELECT * FROM system.errors ORDER BY last_error_time DESC LIMIT 6)"))
			t.Fatalf("shard %d: inbox rows not promoted within 60 s of the spools' replay: %s pending; last promoted window %s, now %s; promoters seen %s; running %s; collectors' promoter windows %v, %v, errors %v, %v",
				i+1, db.oneOn(t, i, pendingQuery), db.oneOn(t, i, "SELECT max(promoted_window) FROM itl_promoted"), db.oneOn(t, i, "SELECT now()"),
				db.oneOn(t, i, "SELECT groupArray((collector, max_seen)) FROM (SELECT collector, max(seen) AS max_seen FROM itl_promoters GROUP BY collector)"),
				db.oneOn(t, i, "SELECT groupArray((elapsed, query_kind, substring(query, 1, 80))) FROM system.processes WHERE query NOT LIKE '%system.processes%'")+
					"; the promoter's look: "+db.oneOn(t, i, `WITH (SELECT max(promoted_window) FROM itl_promoted) AS last
		SELECT now64(6), last,
			(SELECT min(ingested_at) FROM itl_inbox WHERE ingested_at >= last + INTERVAL 1 SECOND),
			(SELECT max(elapsed) FROM system.processes WHERE query_kind = 'Insert' AND positionCaseInsensitive(query, 'itl_inbox') > 0),
			(SELECT min(collector) FROM itl_promoters WHERE seen > now64(3) - toIntervalMillisecond(10000))`),
				a.metric(t, "itlmon_promote_windows_total"), b.metric(t, "itlmon_promote_windows_total"),
				a.metric(t, "itlmon_promote_errors_total"), b.metric(t, "itlmon_promote_errors_total"))
		}
	}
	t.Logf("spools replayed and every inbox row promoted %v after shard 2's return", time.Since(back).Round(time.Millisecond))

	// Every acked record stored once, and nothing else.
	mu.Lock()
	defer mu.Unlock()
	for _, table := range []string{"itl_streams", "itl_promoted_ids"} {
		got := map[string]uint64{}
		rows, err := db.dist.Query(t.Context(), "SELECT lower(hex(stream_id)), count() FROM "+table+" WHERE site = ? AND "+
			map[string]string{"itl_streams": "1", "itl_promoted_ids": "kind = 'client'"}[table]+" GROUP BY stream_id", site)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id string
			var n uint64
			if err := rows.Scan(&id, &n); err != nil {
				t.Fatal(err)
			}
			got[id] = n
		}
		rows.Close()
		bad := 0
		for id := range acked {
			if got[id] != 1 {
				if bad++; bad <= 5 {
					t.Errorf("%s: acked stream %s stored %d times, want once", table, id, got[id])
				}
			}
		}
		if bad > 0 && table == "itl_streams" {
			// Where the missing records are: their inbox rows on each
			// shard, and the windows promoted around them.
			shown := 0
			for id := range acked {
				if got[id] == 1 || shown >= 6 {
					continue
				}
				shown++
				for i := range db.locals {
					t.Logf("%s on shard %d: inbox (part, ingested_at, received_at, part written) %s", id, i+1, db.oneOn(t, i, `SELECT groupArray((_part, toString(ingested_at), toString(received_at), (SELECT toString(modification_time) FROM system.parts WHERE database = 'itlmon_local' AND table = 'itl_inbox' AND name = _part))) FROM itl_inbox WHERE lower(hex(stream_id)) = ?`, id))
					t.Logf("%s on shard %d: windows promoted around its ingested_at (window, promoted_at, records, streams, copies, collector) %s", id, i+1, db.oneOn(t, i, `SELECT groupArray((toString(promoted_window), toString(promoted_at), records, streams, copies, collector)) FROM (SELECT * FROM itl_promoted WHERE promoted_window >= (SELECT toStartOfSecond(min(ingested_at)) - 3 FROM itl_inbox WHERE lower(hex(stream_id)) = ?) AND promoted_window <= (SELECT toStartOfSecond(max(ingested_at)) + 3 FROM itl_inbox WHERE lower(hex(stream_id)) = ?) ORDER BY promoted_window, promoted_at)`, id, id))
				}
			}
		}
		if len(got) != len(acked) || bad > 0 {
			t.Errorf("%s: %d streams of site %s, %d acked, %d acked streams not stored exactly once", table, len(got), site, len(acked), bad)
		}
	}
	// The rollups count what they roll up, on each shard: the engine killed
	// during a promotion must not leave a view's part counted twice.
	for i := range db.locals {
		q := `SELECT (SELECT count() FROM itl_streams WHERE site = ?), (SELECT sum(streams) FROM itl_rollup_1m WHERE site = ?),
			(SELECT sum(streams) FROM itl_rollup_1m_site WHERE site = ?),
			(SELECT sum(streams) FROM itl_rollup_1h WHERE site = ?), (SELECT sum(streams) FROM itl_rollup_1h_dim WHERE site = ? AND dim = ''),
			(SELECT sum(streams) FROM itl_rollup_1d_dim WHERE site = ? AND dim = '')`
		if got := db.oneOn(t, i, q, site, site, site, site, site, site); !allEqual(got) {
			t.Errorf("shard %d: streams in itl_streams, itl_rollup_1m, itl_rollup_1m_site, itl_rollup_1h, itl_rollup_1h_dim, itl_rollup_1d_dim = %s, want all equal", i+1, got)
			db.dumpRollup(t, site)
		}
	}
	// Records acked while shard 2 was away, stored on shard 2: promoted
	// after its return.
	var onAway uint64
	var ids []string
	for id, at := range acked {
		if at.After(killed) && at.Before(back) {
			ids = append(ids, id)
		}
	}
	if err := db.locals[1].QueryRow(t.Context(), "SELECT count() FROM itl_streams WHERE site = ? AND lower(hex(stream_id)) IN ?", site, ids).Scan(&onAway); err != nil {
		t.Fatal(err)
	}
	if onAway == 0 {
		t.Errorf("none of the %d records acked while shard 2 was away is stored on shard 2", len(ids))
	}
	t.Logf("%d records acked, each stored once; %d acked while shard 2 was away, %d of them stored on shard 2; inbox copies dropped at promotion: %s; test took %v",
		len(acked), len(ids), onAway, db.one(t, "SELECT sum(copies) FROM itl_promoted"), time.Since(began).Round(time.Millisecond))
}

// pendingBefore is a query counting a shard's inbox rows ingested before
// until and newer than its last promoted window.
func pendingBefore(until time.Time) string {
	return fmt.Sprintf(`SELECT count() FROM itl_inbox WHERE ingested_at < fromUnixTimestamp64Micro(%d)
	AND ingested_at >= (SELECT max(promoted_window) FROM itl_promoted) + INTERVAL 1 SECOND`, until.UnixMicro())
}

// oneOn is one on shard i's local database.
func (db *clusterDB) oneOn(t *testing.T, i int, query string, args ...any) string {
	t.Helper()
	var s string
	if err := db.locals[i].QueryRow(t.Context(), "SELECT toString(("+query+"))", args...).Scan(&s); err != nil {
		return err.Error()
	}
	return s
}

// testRecord is a synthetic stream of model on page (ten tokens 50 ms
// apart, the stream's own timings fixed) whose id is idA, idB, then zeros,
// then n: tests that send records themselves number them, and check each
// id stored once.
func testRecord(page, model string, idA, idB byte, n uint32) beacon.Record {
	r := beacon.Record{StartUnixMs: time.Now().UnixMilli(), PageOrigin: page, PagePath: "/chat",
		URLOrigin: "https://api.example.com", URLPath: "/v1/chat/completions", Model: model,
		HTTPProto: "h2", ContentType: "text/event-stream", HTTPStatus: 200,
		TTFBUs: 10_000, TTFCUs: 12_000, TTFTUs: 15_000, DurationUs: 500_000,
		Events: 11, ContentEvents: 10, Tokens: 10, Reads: 10, Bytes: 1000}
	for range 9 {
		r.ITL.Record(50_000)
	}
	r.StreamID[0], r.StreamID[1] = idA, idB
	r.StreamID[12], r.StreamID[13], r.StreamID[14], r.StreamID[15] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	return r
}

// engineQuery runs query on e over HTTP and returns its answer, trimmed.
func engineQuery(e *chdb.Engine, query string) (string, error) {
	resp, err := http.Post("http://"+e.HTTPAddr()+"/?"+url.Values{"query": {query}}.Encode(), "text/plain", nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, body)
	}
	return strings.TrimSpace(string(body)), nil
}

// engineCount runs a count query on e; -1 when it fails.
func engineCount(t *testing.T, e *chdb.Engine, query string) int {
	t.Helper()
	s, err := engineQuery(e, query)
	if err != nil {
		return -1
	}
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("%s: %q: %v", query, s, err)
	}
	return n
}

// inFlight waits (within at most) until e's system.processes shows a query
// matching where, and says what it saw: the kill point. Queries run for
// milliseconds, so it looks as often as the engine answers.
func inFlight(t *testing.T, e *chdb.Engine, within time.Duration, where string) string {
	t.Helper()
	var seen string
	if Eventually(within, time.Millisecond, func() bool {
		s, err := engineQuery(e, "SELECT substring(replaceRegexpAll(query, '[[:space:]]+', ' '), 1, 60) FROM system.processes WHERE "+where+" LIMIT 1")
		seen = s
		return err == nil && s != ""
	}) {
		return "while running: " + seen
	}
	t.Fatalf("no query matching %s ran on the engine within %v", where, within)
	return ""
}

// readyz returns the status of c's /readyz.
func readyz(t *testing.T, c *Collector) int {
	t.Helper()
	resp, err := http.Get(c.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// allEqual reports whether the fields of a tuple ClickHouse formatted,
// "(a,b,...)", are all the same.
func allEqual(tuple string) bool {
	f := strings.Split(strings.Trim(tuple, "()"), ",")
	for _, v := range f[1:] {
		if v != f[0] {
			return false
		}
	}
	return len(f) > 1
}
