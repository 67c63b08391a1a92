package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
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

	// The page through the Worker, itlmon loaded from the collector, every
	// request carrying the injected request.cf.
	ctx := NewTab(t)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := chromedp.Call(sctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("network.enable: %v", err)
	}
	if _, err := chromedp.Call(sctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{cfBlobHeader: edgeCFJSON()}}); err != nil {
		t.Fatalf("extra headers: %v", err)
	}
	page := strings.Replace(o.PageURL(nil, false), o.URL, wd.URL, 1)
	if !OpenPage(t, ctx, page) {
		t.Fatalf("itlmon did not become ready through the Worker: %s", Eval[string](t, ctx, `itlmon.timing.error`))
	}
	got := RunStream(t, ctx, StreamOpts{Query: "tokens=40&interval_ms=20"})
	if got.Error != "" || got.Status != 200 {
		t.Fatalf("page: status %d error %q", got.Status, got.Error)
	}
	sum := lastSummary(t, ctx)
	st := StreamByID(t, WaitStreams(t, c, edgeSite, 1), sum.ID)
	if st.OriginID == "" {
		t.Fatalf("stored stream %s has no origin id (X-Itlmon-Stream through the Worker)", sum.ID)
	}
	id := strings.ReplaceAll(st.OriginID, "'", "")

	// The browser's row: where the edge says the client is.
	want := "FRA\tDE\tDE-" + edgeCF.RegionCode
	if row := c.Query(t, "SELECT colo, country, region FROM itl_streams WHERE origin_id = '"+id+"'"); row != want {
		t.Fatalf("itl_streams colo, country, region = %q, want %q", row, want)
	}
	// The edge's row, joined with the browser's record and the origin's
	// timeline (the page, the middleware and the Worker each report once
	// the stream ends: within the hold of each other).
	var edge string
	q := `SELECT version, has_origin, in_streams, colo, edge_region, asn, content_events, added_ttft_edge_browser_us IS NOT NULL,
		added_ttft_origin_edge_us IS NOT NULL FROM itl_edge FINAL WHERE origin_id = '` + id + `'`
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if edge = c.Query(t, q); strings.HasPrefix(edge, "1\t") || time.Now().After(deadline) {
			break
		}
	}
	if want := "1\ttrue\ttrue\tFRA\tDE-HE\t3320\t40\t1\t1"; edge != want {
		t.Fatalf("itl_edge row %q, want %q", edge, want)
	}
	t.Logf("itl_edge: %s; added per hop (µs): %s", edge,
		c.Query(t, "SELECT added_ttft_origin_edge_us, added_ttft_edge_browser_us, added_p50_origin_edge_us, added_p50_edge_browser_us FROM itl_edge FINAL WHERE origin_id = '"+id+"'"))

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
