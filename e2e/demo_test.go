package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/itlmon/itlmon/collector/query"
)

// demoRow is what /api/streams says of one demo stream.
type demoRow struct {
	StreamID         string             `json:"stream_id"`
	OriginID         string             `json:"origin_id"`
	URLOrigin        string             `json:"url_origin"`
	Model            string             `json:"model"`
	ContentEvents    uint32             `json:"content_events"`
	TTFTCause        string             `json:"ttft_cause"`
	StallsByCause    map[string]uint32  `json:"stalls_by_cause"`
	StalledMsByCause map[string]float64 `json:"stalled_ms_by_cause"`
	StallList        []struct {
		StartMs float64 `json:"start_ms"`
		EndMs   float64 `json:"end_ms"`
		Cause   string  `json:"cause"`
	} `json:"stall_list"`
}

// getAPI decodes the collector's read API at path into v.
func getAPI(t *testing.T, c *Collector, path string, v any) {
	t.Helper()
	resp, err := http.Get(c.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestDemoCauses: the demo chat as a new user runs it (`itlmon serve
// --demo`, the page's presets, one collector and one tab). The demo's
// endpoints run inside the origin middleware, so the stall preset's 800 ms
// pause is stored as the origin's, and the burst preset (8 events per write)
// is diagnosed on the re-chunking view as sent in bursts by the origin; the
// proxy preset goes through the demo's buffering proxy (its own API origin),
// whose held bytes are the network's stalls and whose full buffers are
// diagnosed as the path's, the origin's timelines showing one event per
// flush. The re-chunking view of the dashboard shows both labels.
func TestDemoCauses(t *testing.T) {
	Browser(t)
	// The product's default hold (3 s): the checks below need every origin
	// timeline joined, and the tests' short hold (testJoinHold) misses one
	// whose insert came a writer flush after its client record's.
	c := StartCollectorArgs(t, []string{"--join-hold", "3s"})
	ctx := NewTab(t)
	sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	// Ready: the module loaded (as on a page the user reads before asking),
	// and the page knows the proxy.
	if err := chromedp.Do(sctx,
		chromedp.Navigate(c.URL+"/demo/"),
		chromedp.Poll[chromedp.Void](`window.itlmon && itlmon.active && !document.getElementById('buffer').disabled`),
	); err != nil {
		t.Fatalf("demo page: %v", err)
	}
	if !Eval[bool](t, sctx, `itlmon.ready`) {
		t.Fatalf("itlmon not ready: %s", Eval[string](t, sctx, `itlmon.timing.error || ''`))
	}
	Eval[bool](t, sctx, `(window.demoIDs = [], itlmon.onStream(s => demoIDs.push(s.id)), true)`)
	presets := []string{"stall", "burst", "proxy"}
	for i, p := range presets {
		got := Eval[string](t, sctx, `(async () => {
			const s = document.getElementById('preset');
			s.value = `+strconv.Quote(p)+`;
			s.dispatchEvent(new Event('change'));
			document.getElementById('form').requestSubmit();
			for (;;) {
				const m = document.querySelectorAll('.metrics');
				if (m.length > `+strconv.Itoa(i)+`) return m[m.length - 1].textContent;
				await new Promise(r => setTimeout(r, 50));
			}
		})()`)
		t.Logf("%s: the page shows %s", p, got)
		if !strings.Contains(got, "complete") {
			t.Fatalf("%s: demo metrics = %q, want a complete stream", p, got)
		}
	}
	ids := Eval[[]string](t, sctx, `itlmon.settled().then(() => demoIDs)`)
	if len(ids) != len(presets) {
		t.Fatalf("%d streams measured, want %d", len(ids), len(presets))
	}
	proxyURL := Eval[string](t, sctx, `fetch('/demo/config.json').then(r => r.json()).then(c => c.proxy)`)
	waitSDKRows(t, c, "demo", ids)
	// Each joined with its origin timeline (the join lands with the row, or
	// with a later window when the timeline came after the join's hold: then
	// the row keeps the page's own causes, and the checks below fail).
	idsJSON, _ := json.Marshal(ids)
	if joined := Eval[bool](t, sctx, `(async () => {
		for (const end = Date.now() + 20000; Date.now() < end; await new Promise(r => setTimeout(r, 100))) {
			const s = await Promise.all(`+string(idsJSON)+`.map(id => fetch('/api/stream?site=demo&id=' + id).then(r => r.ok ? r.json() : {})));
			if (s.every(x => x.origin)) return true;
		}
		return false;
	})()`); !joined {
		t.Fatal("the demo streams were not all joined with their origin timelines within 20 s")
	}
	var streams struct {
		Streams []demoRow `json:"streams"`
	}
	getAPI(t, c, "/api/streams?site=demo&since=1h&limit=100", &streams)
	rows := map[string]demoRow{}
	for _, r := range streams.Streams {
		rows[r.StreamID] = r
	}
	stall, burst, proxied := rows[ids[0]], rows[ids[1]], rows[ids[2]]
	for i, r := range []demoRow{stall, burst, proxied} {
		t.Logf("%s: %s via %s, origin %q, TTFT cause %s, stalls %v (ms %v)", presets[i], r.Model, r.URLOrigin, r.OriginID, r.TTFTCause, r.StallsByCause, r.StalledMsByCause)
		if r.OriginID == "" || r.Model != "demo-"+presets[i] || r.ContentEvents < 60 {
			t.Errorf("%s: origin id %q, model %q, %d content events; want the origin middleware's id, demo-%s, all events", presets[i], r.OriginID, r.Model, r.ContentEvents, presets[i])
		}
		if r.StallsByCause["unknown"] != 0 {
			t.Errorf("%s: %d stalls without a cause, want every stall explained", presets[i], r.StallsByCause["unknown"])
		}
	}

	// Stall: the 800 ms pause is the origin's, and nothing else is. (A busy
	// machine may add stalls of the network's or the page's, and shorten
	// the pause's gap as the page saw it: a late read before it.)
	if n := stall.StallsByCause["origin"]; n != 1 {
		t.Errorf("stall preset: %d origin stalls (%+v), want one, the 800 ms pause", n, stall.StallList)
	}
	// Bursts: every gap between the origin's writes is the origin's.
	if burst.StallsByCause["origin"] == 0 || burst.StallsByCause["network"] != 0 {
		t.Errorf("burst preset: stalls %v, want the origin's only", burst.StallsByCause)
	}
	// Proxy: through the proxy's own origin; its held bytes are the network's.
	if proxied.URLOrigin != proxyURL || proxied.StallsByCause["network"] == 0 || proxied.StallsByCause["origin"] != 0 || proxied.TTFTCause != "network" {
		t.Errorf("proxy preset: via %s, stalls %v, TTFT cause %s; want via %s, network stalls only, the first token the network's",
			proxied.URLOrigin, proxied.StallsByCause, proxied.TTFTCause, proxyURL)
	}

	// Re-chunking, per model (each preset its own) and per API origin (the
	// proxy, and the collector itself serving the stall and burst presets:
	// half of those streams batched by the origin).
	rechunk := func(by string) map[string]query.Rechunk {
		var out struct {
			Rows []query.Rechunk `json:"rows"`
		}
		getAPI(t, c, "/api/rechunk?"+url.Values{"site": {"demo"}, "since": {"1h"}, "by": {by}}.Encode(), &out)
		m := map[string]query.Rechunk{}
		for _, r := range out.Rows {
			m[r.Key] = r
			t.Logf("rechunk by %s: %s: %.2f events/read, steady %.2f, bursty %.2f, one read %.2f, network stalls %.2f, origin bursts %.2f, smooth %.2f: %q",
				by, r.Key, r.EventsPerRead, r.SteadyShare, r.BurstyShare, r.OneReadShare, r.NetworkStallShare, r.OriginBurstShare, r.OriginSmoothShare, r.Pattern)
		}
		return m
	}
	path := func(r query.Rechunk) bool {
		switch r.Pattern {
		case query.PatternOneRead, query.PatternSteady, query.PatternHeld, query.PatternBursty:
			return r.Diagnosis == query.Diagnoses[r.Pattern]+query.PathConfirmed && r.OriginSmoothShare == 1
		}
		return false
	}
	byModel, byOrigin := rechunk("model"), rechunk("api_origin")
	if r := byModel["demo-burst"]; r.Pattern != query.PatternOrigin || r.OriginBurstShare != 1 || r.Diagnosis != query.Diagnoses[query.PatternOrigin] {
		t.Errorf("burst preset by model: %+v, want diagnosed as the origin's bursts", r)
	}
	if r := byModel["demo-proxy"]; !path(r) {
		t.Errorf("proxy preset by model: %+v, want a pattern of the path, confirmed by the origin's smooth timelines", r)
	}
	if r := byOrigin[c.URL]; r.Pattern != query.PatternOrigin || r.OriginBurstShare != 0.5 {
		t.Errorf("the collector's own API origin: %+v, want the origin's bursts", r)
	}
	if r := byOrigin[proxyURL]; !path(r) {
		t.Errorf("the proxy's API origin: %+v, want a pattern of the path, confirmed by the origin's smooth timelines", r)
	}

	// The dashboard shows both.
	if err := chromedp.Do(sctx, chromedp.Navigate(c.URL+"/dashboard/?site=demo&since=1h&view=rechunk&rby=model")); err != nil {
		t.Fatal(err)
	}
	got, err := chromedp.Run(sctx, chromedp.Poll[string](`(() => {
		const d = [...document.querySelectorAll("#diagnoses .diag")].map(e => e.dataset.key + "=" + e.dataset.pattern + "=" + e.querySelector("h2 .pill").textContent);
		return d.length >= 2 ? d.join(",") : null })()`, chromedp.WithPollingInterval(50*time.Millisecond)))
	if err != nil {
		t.Fatalf("dashboard diagnoses: %v", err)
	}
	if !strings.Contains(got, "demo-burst=origin=sent in bursts by the origin") || !strings.Contains(got, "demo-proxy="+byModel["demo-proxy"].Pattern+"=") {
		t.Errorf("dashboard diagnoses %s, want demo-burst as the origin's bursts and demo-proxy as %s", got, byModel["demo-proxy"].Pattern)
	}
}
