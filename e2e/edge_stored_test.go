package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/itlmon/itlmon/e2e/nginx"
)

// TestEdgeStored: Chromium → workerd (the Go edge Worker) → the origin
// (behind the origin middleware), with a real collector receiving all three
// vantage points: the page's record (WebSocket), the origin's and the edge's
// timelines (POST /v1/origin). The promoter joins them: the browser's row
// takes colo, country and region from the injected request.cf, itl_edge
// holds the edge's timeline joined with both, and colo is a dimension of the
// rollup's API.
func TestEdgeStored(t *testing.T) {
	Browser(t)
	c := StartCollectorArgs(t, []string{"--origin-key", edgeSite + "=" + edgeKey, "--join-hold", "3s", "--log-level", "info"}, edgeSite+"=*")
	o, _ := startEdgeOrigin(t, &edgeSink{URL: c.URL}) // the middleware reports to the collector
	o.SetCollector(c.URL, edgeSite)
	wd := startWorkerd(t, o.URL, c.URL)

	id, _ := edgeStoredStream(t, c, o, wd.URL, 1)

	// The browser's row: where the edge says the client is.
	want := "FRA\tDE\tDE-" + edgeCF.RegionCode
	if row := c.Query(t, "SELECT colo, country, region FROM itl_streams WHERE origin_id = '"+id+"'"); row != want {
		t.Fatalf("itl_streams colo, country, region = %q, want %q", row, want)
	}
	// The edge's row, joined with the browser's record and the origin's
	// timeline (the page, the middleware and the Worker each report once
	// the stream ends: within the hold of each other).
	edge := joinedEdge(t, c, id, "has_origin, in_streams, colo, edge_region, asn, content_events, added_ttft_edge_browser_us IS NOT NULL, added_ttft_origin_edge_us IS NOT NULL")
	if want := "true\ttrue\tFRA\tDE-HE\t3320\t40\t1\t1"; edge != want {
		t.Fatalf("itl_edge row %q, want %q", edge, want)
	}
	t.Logf("itl_edge: %s; added per hop (µs): %s", edge,
		c.Query(t, "SELECT added_ttft_origin_edge_us, added_ttft_edge_browser_us, added_p50_origin_edge_us, added_p50_edge_browser_us FROM itl_edge FINAL WHERE origin_id = '"+id+"'"))
	// Stored as the edge saw it: its ITL p50 within 2 ms of the origin's, and
	// the edge→browser hop adding about nothing to the cadence on loopback.
	var edgeP50, originP50, addedP50 int64
	if _, err := fmt.Sscan(strings.ReplaceAll(c.Query(t, "SELECT gap_p50_us, origin_gap_p50_us, ifNull(added_p50_edge_browser_us, -999999) FROM itl_edge FINAL WHERE origin_id = '"+id+"'"), "\t", " "),
		&edgeP50, &originP50, &addedP50); err != nil {
		t.Fatalf("itl_edge gaps: %v", err)
	}
	if d := edgeP50 - originP50; d < -2000 || d > 2000 {
		t.Errorf("stored edge ITL p50 %d µs, origin's %d µs: want within 2 ms", edgeP50, originP50)
	}
	if addedP50 < -5000 || addedP50 > 5000 {
		t.Errorf("added ITL p50 on edge→browser %d µs, want near zero (within 5 ms) through a direct loopback path", addedP50)
	}

	// colo is a dimension of the read API.
	resp, err := http.Get(c.URL + "/api/summary?" + url.Values{"site": {edgeSite}, "since": {"1h"}, "by": {"colo"}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		By   string `json:"by"`
		Rows []struct {
			Key    string `json:"key"`
			Report struct {
				Streams int64 `json:"streams"`
			} `json:"report"`
		} `json:"rows"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/api/summary?by=colo: %s, %v", resp.Status, err)
	}
	if out.By != "colo" || len(out.Rows) != 1 || out.Rows[0].Key != "FRA" || out.Rows[0].Report.Streams < 1 {
		t.Fatalf("/api/summary by colo = %+v, want one row FRA", out)
	}
}

// edgeStoredStream opens the page through base (the Worker, or a proxy in
// front of it) in a new tab whose requests carry the injected request.cf,
// with itlmon loaded from collector c, runs one stream, waits until c
// stored it (the n-th stream of the site) and returns its origin id and
// stream id.
func edgeStoredStream(t *testing.T, c *Collector, o *Origin, base string, n int) (originID, streamID string) {
	t.Helper()
	ctx := OwnTab(t) // extra headers
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := chromedp.Call(sctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("network.enable: %v", err)
	}
	if _, err := chromedp.Call(sctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{cfBlobHeader: edgeCFJSON()}}); err != nil {
		t.Fatalf("extra headers: %v", err)
	}
	if !OpenPage(t, ctx, strings.Replace(o.PageURL(nil, false), o.URL, base, 1)) {
		t.Fatalf("itlmon did not become ready through %s: %s", base, Eval[string](t, ctx, `itlmon.timing.error`))
	}
	got := RunStream(t, ctx, StreamOpts{Query: "tokens=40&interval_ms=20"})
	if got.Error != "" || got.Status != 200 {
		t.Fatalf("page: status %d error %q", got.Status, got.Error)
	}
	st := StreamByID(t, WaitStreams(t, c, edgeSite, n), lastSummary(t, ctx).ID)
	if st.OriginID == "" {
		t.Fatalf("stored stream %s has no origin id (X-Itlmon-Stream through the Worker)", st.StreamID)
	}
	return strings.ReplaceAll(st.OriginID, "'", ""), st.StreamID
}

// joinedEdge waits (20 s) for the joined itl_edge row of stream id and
// returns its columns cols (TabSeparated); the last row read when none.
func joinedEdge(t *testing.T, c *Collector, id, cols string) string {
	t.Helper()
	q := "SELECT version, " + cols + " FROM itl_edge FINAL WHERE origin_id = '" + id + "'"
	var row string
	Eventually(20*time.Second, 50*time.Millisecond, func() bool {
		row = c.Query(t, q)
		return strings.HasPrefix(row, "1\t")
	})
	return strings.TrimPrefix(row, "1\t")
}

// TestEdgeStoredHops: nginx buffering a stream (proxy_buffering + gzip:
// the whole answer in one read at the end) in front of the Worker or behind
// it. The stored attribution names the hop: the browser's wait for the
// first token is network on origin_edge when the edge already got the
// answer whole, on edge_browser when the edge got it smooth.
func TestEdgeStoredHops(t *testing.T) {
	nginx.RequireReal(t)
	Browser(t)
	c := StartCollectorArgs(t, []string{"--origin-key", edgeSite + "=" + edgeKey, "--join-hold", "3s", "--log-level", "info"}, edgeSite+"=*")
	o, _ := startEdgeOrigin(t, &edgeSink{URL: c.URL})
	o.SetCollector(c.URL, edgeSite)
	hostOf := func(u string) string { return strings.TrimPrefix(u, "http://") }
	// The demo APIs send X-Accel-Buffering: no, as streaming servers
	// should; this nginx buffers them anyway, as a misconfigured one does.
	const ignoreAccel = "proxy_ignore_headers X-Accel-Buffering;"
	for i, tc := range []struct {
		name  string
		front func(t *testing.T) string // the page's base URL
		hop   string
		edge  func(reads, maxPerRead uint32) bool
	}{
		{"nginx between origin and Worker", func(t *testing.T) string {
			ng := nginx.Start(t, nginx.Options{Upstream: hostOf(o.URL), Buffering: true, Gzip: true, Extra: ignoreAccel})
			return startWorkerd(t, ng.URL(), c.URL).URL
		}, "origin_edge", func(reads, maxPerRead uint32) bool { return maxPerRead >= 20 }},
		{"nginx between Worker and browser", func(t *testing.T) string {
			wd := startWorkerd(t, o.URL, c.URL)
			return nginx.Start(t, nginx.Options{Upstream: hostOf(wd.URL), Buffering: true, Gzip: true, Extra: ignoreAccel}).URL()
		}, "edge_browser", func(reads, maxPerRead uint32) bool { return reads >= 30 && maxPerRead <= 3 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, sid := edgeStoredStream(t, c, o, tc.front(t), i+1)
			row := joinedEdge(t, c, id, "has_origin, in_streams, reads, max_events_per_read, ttft_cause, ttft_hop, added_ttft_origin_edge_us, added_ttft_edge_browser_us")
			t.Logf("itl_edge has_origin, in_streams, reads, max events/read, ttft cause, hop, added TTFT origin→edge, edge→browser (µs): %s", row)
			f := strings.Split(row, "\t")
			if len(f) != 8 {
				t.Fatalf("itl_edge row %q: not joined", row)
			}
			reads, _ := strconv.ParseUint(f[2], 10, 32)
			maxPerRead, _ := strconv.ParseUint(f[3], 10, 32)
			if f[0] != "true" || f[1] != "true" || !tc.edge(uint32(reads), uint32(maxPerRead)) || f[4] != "network" || f[5] != tc.hop {
				t.Fatalf("itl_edge row %q: want joined with the origin, in itl_streams, the edge's reads as the hop says, network on %s", row, tc.hop)
			}
			if got, want := c.Query(t, "SELECT ttft_cause, ttft_hop, colo FROM itl_streams WHERE origin_id = '"+id+"'"), "network\t"+tc.hop+"\tFRA"; got != want {
				t.Fatalf("itl_streams ttft_cause, ttft_hop, colo = %q, want %q", got, want)
			}
			// The dashboard's one-stream view says it too.
			resp, err := http.Get(c.URL + "/api/stream?" + url.Values{"site": {edgeSite}, "id": {sid}}.Encode())
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var d struct {
				Colo      string `json:"colo"`
				TTFTCause string `json:"ttft_cause"`
				TTFTHop   string `json:"ttft_hop"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || d.Colo != "FRA" || d.TTFTCause != "network" || d.TTFTHop != tc.hop {
				t.Fatalf("/api/stream: %+v (%v), want colo FRA, network on %s", d, err, tc.hop)
			}
		})
	}
}
