package scenario

import (
	"bytes"
	"fmt"
	"github.com/itlmon/itlmon/collector/internal/itlmontest"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/gorilla/websocket"

	"github.com/itlmon/itlmon/collector/ingest"
	"github.com/itlmon/itlmon/collector/otlp"
	"github.com/itlmon/itlmon/collector/promoter"
	"github.com/itlmon/itlmon/collector/secret"
	"github.com/itlmon/itlmon/collector/server"
	"github.com/itlmon/itlmon/internal/chtest"
	"github.com/itlmon/itlmon/origin"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

// originKey is the shared key of site "chat"'s origin reporter.
const originKey = "origin-key-0123456789"

// withChat adds site "chat", whose origin reports timelines, to c.
func withChat(c *server.Config) {
	c.Sites = append(c.Sites, ingest.Site{Key: "chat", Origins: []string{itlmontest.PageOrigin}})
	c.OriginKeys = map[string]secret.Token{"chat": secret.New(originKey)}
	// The restart case sends the origin timeline seconds after its client
	// record (a collector restart between them, on a loaded machine up to
	// ~5 s): within this hold it still refines itl_streams.
	c.JoinHold = 10 * time.Second
}

// TestStatelessCollectors runs two collectors in-process on one ClickHouse:
// A with the embedded engine, B with a DSN to A's engine (database itlmon),
// as two collectors behind a load balancer. Any collector may receive any
// record of a stream, and what is stored must equal what one collector
// stores:
//   - a client record on one and the origin timeline of the same stream on
//     the other are stored joined (the stall refined to `origin`), in both
//     directions and in both orders;
//   - the same browser batch delivered to both at once (a load balancer
//     retry), in flushes carrying other rows, is stored once in itl_streams,
//     itl_promoted_ids, itl_timelines and the rollup, ClickHouse being slow
//     (every itl_timelines insert takes 1.5 s, longer than a flush interval,
//     so neither collector's insert is committed when the other's starts);
//   - a restart of B changes nothing: a client record B acked before it
//     stopped is joined with its origin timeline sent to A afterwards, and
//     the batch resent to the new B process is still stored once.
func TestStatelessCollectors(t *testing.T) {
	t.Parallel()
	a := itlmontest.StartMain(t, withChat)
	dsn := server.NewSecretDSN("clickhouse://" + a.Engine.NativeAddr() + "/itlmon")
	bData := t.TempDir()
	startB := func() *server.Main {
		return itlmontest.StartMain(t, func(c *server.Config) {
			withChat(c)
			c.ClickHouse, c.ChdbLib, c.Data = dsn, "", bData
		})
	}
	statelessScenario(t, a, startB, true, nil)
}

// TestClusterCollectors is TestStatelessCollectors on a cluster layout: two
// embedded engines as two shards (itlmon migrate --cluster --replication
// none), collector A on the first with --cluster, B on the second, each
// inserting through the Distributed inbox and promoting both shards. A
// stream's records meet on the shard of their join key whichever collector
// took them; reads go through the Distributed tables.
func TestClusterCollectors(t *testing.T) {
	t.Parallel()
	itlmontest.ChdbLib(t)
	nodes := chtest.Cluster(t, "itl", 2)
	var stderr bytes.Buffer
	migrate := exec.Command(itlmontest.Exe(t), "migrate", "--clickhouse", "clickhouse://"+nodes[0].NativeAddr()+"/itlmon",
		"--cluster", "itl", "--replication", "none", "--log-format", "json")
	migrate.Stderr = &stderr
	if err := migrate.Run(); err != nil {
		t.Fatalf("itlmon migrate --cluster: %v: %s", err, stderr.String())
	}
	on := func(node int, data string) func(*server.Config) {
		return func(c *server.Config) {
			withChat(c)
			c.ClickHouse = server.NewSecretDSN("clickhouse://" + nodes[node].NativeAddr() + "/itlmon")
			c.ChdbLib, c.Data, c.Cluster = "", data, "itl"
		}
	}
	a := itlmontest.StartMain(t, on(0, t.TempDir()))
	itlmontest.WaitSchema(t, a)
	bData := t.TempDir()
	startB := func() *server.Main { return itlmontest.StartMain(t, on(1, bData)) }
	var locals []driver.Conn
	for _, n := range nodes {
		c, err := clickhouse.Open(&clickhouse.Options{Addr: []string{n.NativeAddr()}, Auth: clickhouse.Auth{Database: "itlmon_local"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		locals = append(locals, c)
	}
	statelessScenario(t, a, startB, false, locals)
	// An edge timeline (wasm/edge) meets its client record on the shard of
	// their join key: the browser's row takes colo and region from it, and
	// itl_edge holds the join.
	e := pausedOrigin("it-edge-1")
	dialPeer(t, a).send(t, "chat", 1, joinedRecord(e, 13, 1))
	e.Vantage, e.Edge = beacon.VantageEdge, beacon.Edge{Colo: "AMS", Country: "NL", RegionCode: "NH", ClientTCPRTTMs: beacon.NoTime, HeadersUs: 80 * ms}
	postOrigin(t, a, e)
	const wantEdge = "('AMS','NL-NH','[(1,true)]')"
	var gotEdge string
	itlmontest.Settle(t, 30*time.Second, func() bool {
		err := a.DB.Conn().QueryRow(t.Context(), `SELECT toString((any(colo), any(region),
			(SELECT toString(groupArray((version, in_streams))) FROM itl_edge FINAL WHERE origin_id = 'it-edge-1')))
			FROM itl_streams WHERE origin_id = 'it-edge-1'`).Scan(&gotEdge)
		return err == nil && gotEdge == wantEdge
	})
	if gotEdge != wantEdge {
		t.Errorf("edge join on the cluster: colo, region, itl_edge (version, in_streams) = %s, want %s", gotEdge, wantEdge)
	}
	// A promoter of Replicated shards looks for running inbox inserts on
	// every server of the cluster: the real engine takes that query (the
	// window then read after SYSTEM SYNC REPLICA needs Keeper, not here).
	p, err := promoter.New([]promoter.Shard{{Conn: locals[0], Replicas: "itl"}}, promoter.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if look, err := p.Step(t.Context(), promoter.Shard{Conn: locals[0], Replicas: "itl"}); err != nil || look.Promoted {
		t.Errorf("Step on a promoted shard, looking at every replica's inserts: promoted %v, err %v; want nothing to do", look.Promoted, err)
	}
	// Both shards hold some of the streams.
	for i, c := range locals {
		var n uint64
		if err := c.QueryRow(t.Context(), "SELECT count() FROM itl_streams").Scan(&n); err != nil || n == 0 {
			t.Errorf("shard %d: %d streams (err %v), want some", i+1, n, err)
		}
	}
	// The OTLP export waits for the promotion of every shard: through the
	// Distributed tables, shardNum() tells the shards' windows apart.
	var shardNums uint64
	if err := a.DB.Conn().QueryRow(t.Context(), "SELECT uniqExact(shardNum()) FROM itl_inbox").Scan(&shardNums); err != nil || shardNums != 2 {
		t.Errorf("itl_inbox through the Distributed table: %d shard numbers (err %v), want 2", shardNums, err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	var ahead atomic.Int64 // the exporter's clock runs ahead once it started
	exp, err := otlp.New(otlp.Config{Endpoint: srv.URL, Conn: a.DB.Conn(), Now: func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }})
	if err != nil {
		t.Fatal(err)
	}
	ahead.Store(int64(2 * time.Minute))
	var exported int
	var exportErr error
	itlmontest.Settle(t, 30*time.Second, func() bool {
		n, err := exp.ExportDue(t.Context())
		exported, exportErr = exported+n, err
		return err == nil && exported > 0
	})
	if exported == 0 || exportErr != nil {
		t.Errorf("OTLP export on the cluster, two minutes on: %d minutes, err %v; want some", exported, exportErr)
	}
}

// statelessScenario is TestStatelessCollectors' scenario on collector a and
// collectors startB starts (again, on the same data root, after a stop).
// slow makes every itl_timelines insert take 1.5 s (one server only: a view
// on the table). shards, if any, are each shard's local database, waited on
// until promoted before the final counts.
func statelessScenario(t *testing.T, a *server.Main, startB func() *server.Main, slow bool, shards []driver.Conn) {
	b := startB()
	itlmontest.WaitSchema(t, b)
	conn := a.DB.Conn()

	// Joins across collectors, both directions, both orders.
	const run = 12
	wsA, wsB := dialPeer(t, a), dialPeer(t, b)
	o1, o2 := pausedOrigin("it12-1"), pausedOrigin("it12-2")
	wsA.send(t, "chat", 1, joinedRecord(o1, run, 1)) // client on A first, then its origin on B
	postOrigin(t, b, o1)
	postOrigin(t, a, o2) // origin on A first, then the client on B
	wsB.send(t, "chat", 1, joinedRecord(o2, run, 2))

	// The same batch on both, each in a flush with other rows, ClickHouse slow.
	if slow {
		if err := conn.Exec(t.Context(), `CREATE MATERIALIZED VIEW itl_test_slow_mv ENGINE = Null AS
			SELECT stream_id FROM itl_timelines WHERE sleep(1.5) = 0`); err != nil {
			t.Fatalf("slow view: %v", err)
		}
	}
	shared := make([]beacon.Record, 5)
	for i := range shared {
		shared[i] = timedRecord(run, 100+uint32(i))
	}
	var wg sync.WaitGroup
	for i, ws := range []*peerConn{wsA, wsB} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			other := uint32(200 + 10*i)
			ws.sendQuiet("test", 10, timedRecord(run, other), timedRecord(run, other+1))
			ws.sendQuiet("test", 11, shared...)
			ws.sendQuiet("test", 12, timedRecord(run, other+2), timedRecord(run, other+3))
		}()
	}
	wg.Wait()
	for _, ws := range []*peerConn{wsA, wsB} {
		ws.acks.Wait(t, 1+3, 60*time.Second) // the chat record and the three test batches
	}
	if slow {
		if err := conn.Exec(t.Context(), "DROP VIEW itl_test_slow_mv"); err != nil {
			t.Fatalf("drop slow view: %v", err)
		}
	}

	// B acks a client record, stops; a new B process starts on the same
	// data root; the origin timeline of that record arrives at A.
	o3 := pausedOrigin("it12-3")
	wsB.send(t, "chat", 2, joinedRecord(o3, run, 3))
	wsB.acks.Wait(t, 1+3+1, 30*time.Second)
	acked := time.Now()
	if err := b.Close(); err != nil {
		t.Fatalf("close B: %v", err)
	}
	b = startB()
	itlmontest.WaitSchema(t, b)
	postOrigin(t, a, o3)
	t.Logf("origin timeline of it12-3 stored on A %v after B acked its client record (B restarted in between)",
		time.Since(acked).Round(time.Millisecond))
	// The client resends the shared batch to the new B (its ack lost).
	wsB2 := dialPeer(t, b)
	wsB2.send(t, "test", 11, shared...)
	wsB2.acks.Wait(t, 1, 30*time.Second)

	// Joined, whichever collector got which side.
	ids := []string{"it12-1", "it12-2", "it12-3"}
	why := []string{"client on A, then origin on B", "origin on A, then client on B", "client acked by B, B restarted, origin on A"}
	const joined = "(1,1,0,['origin'])"
	got := make([]string, len(ids))
	itlmontest.Settle(t, 30*time.Second, func() bool {
		done := true
		for i, id := range ids {
			err := conn.QueryRow(t.Context(), `SELECT toString((count(), any(stalls_origin), any(stalls_unknown), any(stall_cause)))
				FROM itl_streams WHERE site = 'chat' AND origin_id = ?`, id).Scan(&got[i])
			if err != nil {
				got[i] = "error: " + err.Error()
			}
			done = done && got[i] == joined
		}
		return done
	})
	for i, id := range ids {
		if got[i] != joined {
			t.Errorf("stream %s (%s): itl_streams (rows, stalls_origin, stalls_unknown, causes) = %s, want %s (joined)", id, why[i], got[i], joined)
		}
	}

	// Stored once: 5 shared records and 2×4 others on site test.
	const want = 5 + 2*4
	wantCounts := fmt.Sprintf("(%d,%d,%d,%d,%d)", want, want, want, want, want)
	var counts string
	// The promoted ids are matched by their hex: itl_streams' ids are
	// FixedString(16), itl_promoted_ids' Strings, and a String compared
	// with a set of FixedStrings meets them converted, their trailing zero
	// bytes dropped (an id ending in 0x00, one in 256, would not match).
	itlmontest.Settle(t, 30*time.Second, func() bool {
		err := conn.QueryRow(t.Context(), `SELECT toString((
			(SELECT count() FROM itl_streams WHERE site = 'test'),
			(SELECT uniqExact(stream_id) FROM itl_streams WHERE site = 'test'),
			(SELECT count() FROM itl_promoted_ids WHERE kind = 'client' AND hex(stream_id) GLOBAL IN (SELECT hex(stream_id) FROM itl_streams WHERE site = 'test')),
			(SELECT count() FROM itl_timelines WHERE site = 'test'),
			(SELECT toUInt64(sum(streams)) FROM itl_rollup_1m WHERE site = 'test')))`).Scan(&counts)
		if err != nil {
			counts = "error: " + err.Error()
		}
		return counts == wantCounts
	})
	if counts != wantCounts {
		t.Errorf("site test (the same batch on both collectors, then resent to B after its restart): (itl_streams rows, distinct ids, itl_promoted_ids rows, itl_timelines rows, rollup streams) = %s, want %s",
			counts, wantCounts)
	}
	for _, sh := range shards {
		itlmontest.WaitPromoted(t, sh)
	}
	stored := itlmontest.StoredIDs(t, conn, "test")
	for i := range shared {
		if n := stored[shared[i].StreamID]; n != 1 {
			t.Errorf("shared record %d stored %d times in itl_streams, want 1", i, n)
		}
	}
}

// peerConn is a page's WebSocket to one collector, one per site.
type peerConn struct {
	m    *server.Main
	mu   sync.Mutex
	c    map[string]*websocket.Conn
	acks *itlmontest.AckReader // of every site's connection: acks are counted, not told apart
}

func dialPeer(t testing.TB, m *server.Main) *peerConn {
	return &peerConn{m: m, c: map[string]*websocket.Conn{}, acks: itlmontest.NewAckReader()}
}

// send sends one batch of recs on site's connection.
func (p *peerConn) send(t testing.TB, site string, seq uint64, recs ...beacon.Record) {
	t.Helper()
	if err := p.write(site, seq, recs); err != nil {
		t.Fatal(err)
	}
}

// sendQuiet is send for goroutines: a failed send shows as a missing ack.
func (p *peerConn) sendQuiet(site string, seq uint64, recs ...beacon.Record) {
	p.write(site, seq, recs)
}

func (p *peerConn) write(site string, seq uint64, recs []beacon.Record) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.c[site]
	if c == nil {
		h := http.Header{}
		h.Set("Origin", itlmontest.PageOrigin)
		h.Set("User-Agent", itlmontest.FirefoxUA)
		var err error
		if c, _, err = websocket.DefaultDialer.Dial(itlmontest.WSURL(p.m.URL(), site), h); err != nil {
			return err
		}
		p.c[site] = c
		go p.readAcks(site, uint64(len(p.c)), c)
	}
	bb := beacon.Batch{Seq: seq, Client: beacon.Client{ConnType: "4g", Release: "r1", ModuleVersion: "test"}, Records: recs}
	frame, err := bb.AppendBinary(nil)
	if err != nil {
		return err
	}
	return c.WriteMessage(websocket.BinaryMessage, frame)
}

// readAcks counts c's acks into p.acks, keyed by (conn, seq): conn numbers
// p's connections.
func (p *peerConn) readAcks(site string, conn uint64, c *websocket.Conn) {
	a := p.acks
	defer c.Close()
	for {
		_, msg, err := c.ReadMessage()
		if err == nil {
			var ack beacon.Ack
			if ack, err = beacon.DecodeAck(msg); err == nil {
				a.Add(conn<<56 | ack.Seq)
			}
		}
		if err != nil {
			if !websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway) {
				a.Fail(fmt.Errorf("%s: %w", site, err))
			}
			return
		}
	}
}

// postOrigin sends o as site chat's origin reporter does, to m.
func postOrigin(t testing.TB, m *server.Main, o beacon.Origin) {
	t.Helper()
	body, err := (&beacon.OriginBatch{Seq: 1, Site: "chat", Records: []beacon.Origin{o}}).AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", m.URL()+origin.Path+"?site=chat", bytes.NewReader(body))
	req.Header.Set(origin.HeaderKey, originKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("POST %s: %s, want 204", origin.Path, resp.Status)
	}
}

const ms = 1000

// pausedOrigin is an origin timeline: 30 content events 20 ms apart from
// 100 ms, pausing 600 ms before event 15 (collector/join's fixture).
func pausedOrigin(id string) beacon.Origin {
	o := beacon.Origin{ID: id, StartUnixMs: time.Now().UnixMilli(), Route: "/v1/chat", Format: 1, Status: 1,
		HTTPStatus: 200, TTFBUs: 90 * ms, DurationUs: 1300 * ms, Events: 31, ContentEvents: 30, Flushes: 31,
		MaxEventsPerFlush: 1, Bytes: 3000}
	for i := range 30 {
		e := uint32(100*ms + i*20*ms)
		if i >= 15 {
			e += 600 * ms
		}
		o.EmitUs = append(o.EmitUs, e)
		if i > 0 {
			o.ITL.Record(float64(e - o.EmitUs[i-1]))
		}
	}
	o.TTFTUs = o.EmitUs[0]
	return o
}

// joinedRecord is the browser's record of o, 40 ms later, its one stall
// attributed `unknown` (the page was idle and the read carried one event):
// joined with o, the stall is the origin's.
func joinedRecord(o beacon.Origin, run, i uint32) beacon.Record {
	r := itlmontest.Record(run, i)
	r.OriginID = o.ID
	r.StartUnixMs = o.StartUnixMs
	r.Format, r.Status, r.HTTPStatus = 1, 1, 200
	r.TTFBUs, r.TTFCUs, r.DurationUs = o.TTFBUs+40*ms, o.EmitUs[0]+40*ms, o.DurationUs+40*ms
	r.TTFTUs = o.EmitUs[0] + 40*ms
	r.Events, r.ContentEvents, r.Tokens, r.Reads = 31, 30, 30, 31
	r.GapP50Us, r.GapP95Us, r.GapP99Us, r.GapMaxUs = 20*ms, 20*ms, 620*ms, 620*ms
	r.ITL.Reset()
	r.Timeline = nil
	for k, e := range o.EmitUs {
		r.Timeline = append(r.Timeline, beacon.Stamp{AtUs: e + 40*ms, Read: uint32(k), Content: true})
		if k > 0 {
			r.ITL.Record(float64(e - o.EmitUs[k-1]))
		}
	}
	r.Stalls, r.StalledUs = 1, 620*ms
	r.StallsByCause[meter.CauseUnknown], r.StalledByCause[meter.CauseUnknown] = 1, 620*ms
	r.StallList = []beacon.Stall{{StartUs: o.EmitUs[14] + 40*ms, EndUs: o.EmitUs[15] + 40*ms, Cause: uint8(meter.CauseUnknown), NextReadEvents: 1}}
	r.TTFTCause = uint8(meter.CauseUnknown)
	return r
}

// timedRecord is record(run, i) with its timeline, so it has an
// itl_timelines row.
func timedRecord(run, i uint32) beacon.Record {
	r := itlmontest.Record(run, i)
	for k := range uint32(40) {
		r.Timeline = append(r.Timeline, beacon.Stamp{AtUs: 20_000 + k*20_000, Read: k, Content: true})
	}
	return r
}
