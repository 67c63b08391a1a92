package join_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/collector/join"
	"github.com/itlmon/itlmon/collector/promoter"
	"github.com/itlmon/itlmon/collector/secret"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/poll"
	"github.com/itlmon/itlmon/origin"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// upgradeKey is the shared origin key of site "chat" in these tests.
const upgradeKey = "upgrade-test-key-0123456789"

// upgradeCollector is one collector on db: its writer, origin intake and
// promoter, and its /v1/origin served on a loopback port.
type upgradeCollector struct {
	w   *store.Writer
	in  *join.Intake
	url string
}

func startUpgradeCollector(t *testing.T, db *store.DB) *upgradeCollector {
	t.Helper()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	w, err := store.NewWriter(db, store.WriterOptions{SpoolDir: t.TempDir(), FlushInterval: 50 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	p, err := promoter.New([]promoter.Shard{{Conn: db.Conn()}}, promoter.Config{
		Hold: 100 * time.Millisecond, Grace: 50 * time.Millisecond, Interval: 20 * time.Millisecond, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); p.Run(ctx) }()
	in := join.NewIntake(w, log)
	mux := http.NewServeMux()
	in.Register(mux, join.StaticKeys(map[string]secret.Token{"chat": secret.New(upgradeKey)}))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		w.Shutdown(sctx)
		cancel()
		<-ran
	})
	return &upgradeCollector{w: w, in: in, url: srv.URL}
}

// post sends body to c's /v1/origin as site chat and returns the status.
func (c *upgradeCollector) post(t *testing.T, body []byte) int {
	t.Helper()
	req, err := http.NewRequest("POST", c.url+origin.Path+"?site=chat", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(origin.HeaderKey, upgradeKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// upgradeTimeline is an origin timeline of 3 content events.
func upgradeTimeline(id string) beacon.Origin {
	o := beacon.Origin{ID: id, StartUnixMs: time.Now().UnixMilli(), Route: "/v1/chat", Format: 1, Status: 1,
		HTTPStatus: 200, TTFBUs: 90_000, TTFTUs: 100_000, DurationUs: 400_000, Events: 3, ContentEvents: 3,
		Flushes: 3, MaxEventsPerFlush: 1, Bytes: 300, EmitUs: []uint32{100_000, 120_000, 140_000}}
	o.ITL.Record(20_000)
	o.ITL.Record(20_000)
	return o
}

// upgradeClient is the browser's record of o.
func upgradeClient(o beacon.Origin) collector.Stream {
	var r beacon.Record
	rand.Read(r.StreamID[:])
	r.OriginID, r.StartUnixMs = o.ID, o.StartUnixMs
	r.Format, r.Status, r.HTTPStatus, r.End = 1, 1, 200, 1
	r.HeadersUs, r.TTFBUs, r.TTFCUs, r.TTFTUs, r.DurationUs = 120_000, 130_000, 140_000, 140_000, 450_000
	r.Events, r.ContentEvents, r.Reads = 3, 3, 3
	return collector.Stream{Record: r, Site: "chat", ReceivedAt: time.Now(), Country: "DE", Browser: "Chrome", OS: "Linux", Device: "desktop"}
}

// futureVantage is a vantage point no collector of this version knows.
const futureVantage = 2

// newerSenderBatch encodes timelines as a sender one minor version newer
// than this collector would, following the wire rule (docs/formats.md): the
// header carries minor beacon.Minor+1, and every timeline's section ends in
// fields this collector does not know (future). A timeline with vantage
// futureVantage has the vantage byte (the last field of an origin
// timeline's section at beacon.Minor) set to it; its own fields follow.
// It returns the batch and each timeline's section as sent.
func newerSenderBatch(t *testing.T, seq uint64, future []byte, vantages []byte, recs ...beacon.Origin) (msg []byte, sections [][]byte) {
	t.Helper()
	msg = []byte{0x89, 'I', 'T', beacon.Version, beacon.Minor + 1, byte(beacon.KindOrigin)}
	msg = binary.AppendUvarint(msg, seq)
	msg = binary.AppendUvarint(msg, uint64(len("chat")))
	msg = append(msg, "chat"...)
	msg = binary.AppendUvarint(msg, 0) // dropped
	msg = binary.AppendUvarint(msg, uint64(len(recs)))
	for i := range recs {
		one, err := (&beacon.OriginBatch{Records: recs[i : i+1]}).AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		// header, seq 0, site "", dropped 0, 1 record: 10 bytes.
		n, k := binary.Uvarint(one[10:])
		sec := bytes.Clone(one[10+k : 10+k+int(n)])
		if vantages[i] == futureVantage {
			if sec[len(sec)-1] != byte(beacon.VantageOrigin) {
				t.Fatal("BUG: the vantage is not the section's last byte")
			}
			sec[len(sec)-1] = futureVantage
		}
		sec = append(sec, future...)
		msg = binary.AppendUvarint(msg, uint64(len(sec)))
		msg = append(msg, sec...)
		sections = append(sections, sec)
	}
	return msg, sections
}

// TestRollingUpgradeIngest: during a rolling upgrade a newer sender (an
// origin middleware or edge Worker one minor ahead) talks to collectors
// that do not know its new fields or its new vantage point, side by side
// on one ClickHouse. Nothing is lost: every timeline is acknowledged (204,
// not the 503 its reporter would resend for ever) and stored as it was
// sent, the fields these collectors do not read included, under the kind
// a newer collector reads (vantage2). Nothing is blocked: what they
// understand (an origin timeline of the newer minor) is promoted and joined
// with the browser's record, and the sender's batches after the one with
// the new vantage are taken as well. (How a promoter treats the vantage2
// rows, which only a newer collector can promote, is not this test's: the
// timelines it checks promoted are in windows without them.)
func TestRollingUpgradeIngest(t *testing.T) {
	db := newDB(t)
	a, b := startUpgradeCollector(t, db), startUpgradeCollector(t, db)
	future := []byte{0x07, 0xfe, 0xed} // a newer minor's fields
	known1, known2, known3 := upgradeTimeline("req-up-1"), upgradeTimeline("req-up-2"), upgradeTimeline("req-up-3")
	new1, new2 := upgradeTimeline("req-v2-1"), upgradeTimeline("req-v2-2")
	sections := map[string][]byte{}
	send := func(c *upgradeCollector, seq uint64, vantages []byte, recs ...beacon.Origin) {
		t.Helper()
		msg, secs := newerSenderBatch(t, seq, future, vantages, recs...)
		if got := c.post(t, msg); got != http.StatusNoContent {
			t.Fatalf("newer batch %d: status %d, want 204", seq, got)
		}
		for i, o := range recs {
			sections[o.ID] = secs[i]
		}
	}

	// Read as far as this version goes: the newer minor's origin timeline
	// is promoted and joined with its client record.
	a.w.SubmitStreams(context.Background(), []collector.Stream{upgradeClient(known1)}, func(error) {})
	send(a, 1, []byte{0}, known1)
	waitRow(t, db, "SELECT count() FROM itl_origin FINAL WHERE origin_id = 'req-up-1'", uint64(1))
	waitRow(t, db, "SELECT count() FROM itl_streams WHERE origin_id = 'req-up-1'", uint64(1))

	// A vantage neither collector knows, alone and with a known timeline,
	// to each of them; then the sender goes on.
	send(a, 2, []byte{futureVantage}, new1)
	send(b, 3, []byte{futureVantage, 0}, new2, known2)
	send(b, 4, []byte{0}, known3)

	// Stored whole: a newer collector finds the sender's section, its
	// future fields included, under the sender's minor.
	for id, sec := range sections {
		var kind, payload string
		waitRow(t, db, "SELECT count() FROM itl_inbox WHERE stream_id = '"+id+"'", uint64(1))
		if err := db.Conn().QueryRow(context.Background(), "SELECT kind, payload FROM itl_inbox WHERE stream_id = $1", id).Scan(&kind, &payload); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if want := map[bool]string{true: "vantage2", false: store.KindOrigin}[id[:6] == "req-v2"]; kind != want {
			t.Fatalf("%s: kind %q, want %q", id, kind, want)
		}
		if p := []byte(payload); p[4] != beacon.Minor+1 || !bytes.HasSuffix(p, sec) {
			t.Fatalf("%s: payload minor %d, or the sender's section (its future fields) not kept:\n% x", id, p[4], p)
		}
		// This version reads its part of it.
		row := store.InboxRow{Kind: kind, Payload: payload}
		if o, err := row.Origin(); kind == store.KindOrigin && (err != nil || o.ID != id || len(o.EmitUs) != 3) {
			t.Fatalf("%s: this version reads %+v, %v", id, o, err)
		}
	}
	sa, sb := a.in.Stats(), b.in.Stats()
	if got, want := [4]uint64{sa.Origins + sb.Origins, sa.Newer + sb.Newer, sa.Failed + sb.Failed, sa.Refused + sb.Refused}, [4]uint64{3, 2, 0, 0}; got != want {
		t.Fatalf("origins, newer, failed, refused = %v, want %v (a %+v, b %+v)", got, want, sa, sb)
	}
}

// TestPoisonedBatchRefusedOnce: a batch that can never be stored (another
// major version, malformed, over a limit) is answered with a 4xx and
// counted; the real reporter drops it on that answer and counts it, sends
// its next batch, and nothing it sent before is lost.
func TestPoisonedBatchRefusedOnce(t *testing.T) {
	db := newDB(t)
	c := startUpgradeCollector(t, db)
	good, err := (&beacon.OriginBatch{Seq: 1, Site: "chat", Records: []beacon.Origin{upgradeTimeline("req-p-1")}}).AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	major := bytes.Clone(good)
	major[3] = beacon.Version + 1
	tooMany := []byte{0x89, 'I', 'T', beacon.Version, beacon.Minor, byte(beacon.KindOrigin), 1, 4, 'c', 'h', 'a', 't', 0}
	tooMany = binary.AppendUvarint(tooMany, uint64(beacon.DefaultLimits.MaxRecords)+1)
	for _, tc := range []struct {
		name string
		body []byte
		want int
	}{
		{"good", good, http.StatusNoContent},
		{"next major", major, http.StatusBadRequest},
		{"truncated", good[:len(good)-3], http.StatusBadRequest},
		{"over the record limit", tooMany, http.StatusBadRequest},
		{"over the body limit", make([]byte, join.MaxOriginBody+1), http.StatusRequestEntityTooLarge},
	} {
		if got := c.post(t, tc.body); got != tc.want {
			t.Fatalf("%s: status %d, want %d", tc.name, got, tc.want)
		}
	}
	if st := c.in.Stats(); st.Refused != 4 || st.Failed != 0 || st.Origins != 1 {
		t.Fatalf("stats %+v, want 4 refused, 0 failed, 1 origin", st)
	}

	// The real reporter: its first batch is poisoned on the way (a proxy
	// that bumps the major version), its second is not.
	var poisoned bool
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := new(bytes.Buffer)
		body.ReadFrom(r.Body)
		p := body.Bytes()
		if !poisoned {
			poisoned = true
			p[3] = beacon.Version + 1
		}
		req, _ := http.NewRequestWithContext(r.Context(), "POST", c.url+r.URL.RequestURI(), bytes.NewReader(p))
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
	}))
	defer proxy.Close()
	rp, err := origin.New(origin.Config{Collector: proxy.URL, Site: "chat", Key: upgradeKey, BatchSize: 1, FlushInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	h := rp.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"))
	}))
	for range 2 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/v1/chat/completions", nil))
		// One batch at a time (BatchSize 1): the first is the poisoned one.
		// Its round trip reaches the real engine.
		if !poll.Until(10*time.Second, 10*time.Millisecond, func() bool {
			st := rp.Stats()
			return st.Rejected+st.Sent == st.Queued
		}) {
			t.Fatalf("reporter stats %+v: a batch neither sent nor rejected", rp.Stats())
		}
	}
	if err := rp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := rp.Stats(); st.Rejected != 1 || st.Sent != 1 || st.Retries != 0 {
		t.Fatalf("reporter stats %+v, want 1 rejected, 1 sent, no retries", st)
	}
	if st := c.in.Stats(); st.Refused != 5 || st.Origins != 2 {
		t.Fatalf("intake stats %+v, want 5 refused, 2 origins", st)
	}
	waitRow(t, db, "SELECT count() FROM itl_origin FINAL WHERE origin_id = 'req-p-1'", uint64(1))
}

// waitRow polls query until it scans want or 15 s pass (this file's own,
// so that it does not depend on the promoter's tests).
func waitRow[T comparable](t *testing.T, db *store.DB, query string, want T) {
	t.Helper()
	var got T
	var err error
	// The rows are promoted inside the real engine, on its clock.
	if poll.Until(15*time.Second, 50*time.Millisecond, func() bool {
		err = db.Conn().QueryRow(context.Background(), query).Scan(&got)
		return err == nil && got == want
	}) {
		return
	}
	t.Fatalf("%s\n= %v (err %v), want %v", query, got, err, want)
}
