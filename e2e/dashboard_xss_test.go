package e2e

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/itlmon/itlmon/collector/dimension"
	"github.com/itlmon/itlmon/collector/httpapi"
	"github.com/itlmon/itlmon/origin"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// xssBinding is the function every payload calls when it runs: a CDP
// binding, so a call reaches the test even when the page is broken.
const xssBinding = "__itlmonXSS"

// xssPayloads are the strings a forger stores through the public site key.
// Each that runs calls xssBinding with its number. None has '?' or '#'
// (path fields refuse them) and each fits the wire's 2 KB string limit.
var xssPayloads = []string{
	`<img src=x onerror="` + xssBinding + `('1')">`,
	`</script><script>` + xssBinding + `('2')</script>`,
	`javascript:` + xssBinding + `('3')//`,
	`"'><svg onload=` + xssBinding + `('4')>` + "`",
	"\u202Egnp.exe\u202C \u2067<b>rtl</b>\u2069 \u200F",
	"ctl \x01\x07\x08\x0b\x0c\x1b[31m\x7f\ttab\r\nline",
	"${" + xssBinding + "('5')} {{constructor.constructor('" + xssBinding + "(\"6\")')()}}",
	strings.Repeat("W", 1900) + `<iframe src="javascript:` + xssBinding + `('7')"></iframe>`,
}

// TestDashboardStoredScript stores, through the public ingest path with the
// site key (POST /v1/beacon, and the origin key's /v1/origin for the
// route), records whose every string field is a payload: markup with event
// handlers, a closing </script>, javascript: URLs, quotes, RTL overrides,
// control characters, template syntax, a string at the wire's limit. It
// opens every view of the dashboard in Chromium, and URLs carrying
// payloads, and checks on each: no payload ran (the binding was never
// called), the page saw no CSP violation and logged no error, and the view
// shows its data with the payloads as text, exactly. A string over the
// wire's limit (64 KB) is refused, its batch answered 400, and never stored. Last, the page enforces
// Trusted Types: assigning markup to innerHTML throws, the one violation
// expected.
func TestDashboardStoredScript(t *testing.T) {
	t.Parallel() // it times nothing
	Browser(t)
	began := time.Now()
	const site, pageOrigin, originKey = "xss", "https://chat.example.com", "xss-origin-key-0123456789"
	c := StartCollectorArgs(t, []string{"--origin-key", site + "=" + originKey, "--join-hold", "1s", "--log-level", "info"}, site+"="+pageOrigin)

	// The served page carries the policy.
	resp, err := http.Get(c.URL + "/dashboard/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("Content-Security-Policy"); got != httpapi.DashboardCSP {
		t.Fatalf("/dashboard/ Content-Security-Policy = %q, want %q", got, httpapi.DashboardCSP)
	}

	send := func(path string, body []byte, hdr map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", c.URL+path, bytes.NewReader(body))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		text, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(text)
	}
	post := func(path string, body []byte, hdr map[string]string) {
		t.Helper()
		if code, text := send(path, body, hdr); code != http.StatusNoContent {
			t.Fatalf("POST %s: %d %s, want 204", path, code, text)
		}
	}
	n := len(xssPayloads)
	at := func(i int) string { return xssPayloads[i%n] }
	// The origin's timeline of the first record, its route a payload: sent
	// first, so the record is joined when it is promoted.
	const joinedID = "xss-joined"
	ob := &beacon.OriginBatch{Seq: 1, Site: site, Records: []beacon.Origin{{ID: joinedID, StartUnixMs: time.Now().UnixMilli(), Route: at(0),
		Format: 1, Status: 1, HTTPStatus: 200, TTFBUs: 90_000, TTFTUs: 100_000, DurationUs: 1_000_000, Events: 3, ContentEvents: 2, Flushes: 3,
		MaxEventsPerFlush: 1, Bytes: 300, EmitUs: []uint32{100_000, 900_000}}}}
	body, err := ob.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	post(origin.Path+"?site="+site, body, map[string]string{origin.HeaderKey: originKey, "Content-Type": origin.ContentType})

	// One batch per payload: its release, user agent and client strings
	// that payload, its three records' strings the payloads after it.
	type stored struct{ model, release, apiOrigin, urlPath, proto string }
	byID := map[string]stored{}
	var models, releases, apiOrigins []string
	var joinedHex string
	for i := range n {
		b := beacon.Batch{Seq: uint64(i + 1), Site: site, Client: beacon.Client{UserAgent: at(i), UABrands: at(i + 1), UAPlatform: at(i + 2),
			ConnType: at(i + 3), ModuleVersion: at(i + 4), Release: at(i)}}
		for k := range 3 {
			gaps := []time.Duration{30 * time.Millisecond, 30 * time.Millisecond, (300 + 100*time.Duration(k)) * time.Millisecond, 30 * time.Millisecond, 30 * time.Millisecond}
			r := seedStream(time.Duration(200+50*i)*time.Millisecond, gaps)
			r.StartUnixMs = time.Now().UnixMilli()
			r.Model, r.URLOrigin, r.URLPath = at(i+k), at(i+2*k+1), "/"+at(i+k+2)
			r.HTTPProto, r.ContentType, r.PageOrigin, r.PagePath, r.OriginID = at(i+k+3), at(i+k+4), at(i+k+5), at(i+k+6), at(i+k+7)
			if i == 0 && k == 0 {
				r.OriginID = joinedID
				joinedHex = hex.EncodeToString(r.StreamID[:])
			}
			b.Records = append(b.Records, r)
			byID[hex.EncodeToString(r.StreamID[:])] = stored{r.Model, at(i), r.URLOrigin, r.URLPath, r.HTTPProto}
			models, apiOrigins = append(models, r.Model), append(apiOrigins, r.URLOrigin)
		}
		releases = append(releases, at(i))
		body, err := b.AppendBinary(nil)
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		post("/v1/beacon?site="+site, body, map[string]string{"Origin": pageOrigin, "Content-Type": "text/plain;charset=UTF-8",
			"User-Agent": at(i % 4) /* the first four are valid header values */})
	}
	// A 64 KB model: over the wire's string limit, the batch is refused.
	big := seedStream(200*time.Millisecond, []time.Duration{30 * time.Millisecond})
	big.Model = strings.Repeat("<b>64K</b>", 64<<10/10)
	body, err = (&beacon.Batch{Seq: uint64(n + 1), Site: site, Records: []beacon.Record{big}}).AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	if code, text := send("/v1/beacon?site="+site, body, map[string]string{"Origin": pageOrigin, "Content-Type": "text/plain;charset=UTF-8"}); code != http.StatusBadRequest ||
		!strings.Contains(text, "exceeds limit") {
		t.Errorf("a 64 KB model: %d %q, want 400 naming the limit", code, text)
	}
	t.Logf("collector started and records sent in %v", time.Since(began).Round(time.Millisecond))
	WaitStreams(t, c, site, 3*n)
	t.Logf("records readable after %v", time.Since(began).Round(time.Millisecond))
	longest := 0
	for _, p := range xssPayloads {
		longest = max(longest, len(p))
	}
	if got, want := c.Query(t, "SELECT count(), max(length(model)) FROM itl_streams WHERE site = '"+site+"'"), fmt.Sprintf("%d\t%d", 3*n, longest); got != want {
		t.Fatalf("stored count, longest model = %q, want %q: the payloads' records, not the 64 KB one", got, want)
	}

	// The browser: a binding the payloads call, and a listener for CSP
	// violations installed before the page's own scripts.
	tab := OwnTab(t) // a binding and a script on new documents
	console := watchConsole(t, tab)
	var mu sync.Mutex
	var ran []string
	if err := chromedp.Listen(tab, func(ev any) {
		if e, ok := ev.(*cdpruntime.EventBindingCalled); ok && e.Name == xssBinding {
			mu.Lock()
			ran = append(ran, e.Payload)
			mu.Unlock()
		}
	}); err != nil {
		t.Fatalf("listen: %v", err)
	}
	sctx, cancel := context.WithTimeout(tab, 20*time.Second)
	if _, err := chromedp.Call(sctx, cdpruntime.AddBinding, cdpruntime.AddBindingParams{Name: xssBinding}); err != nil {
		t.Fatalf("binding: %v", err)
	}
	if _, err := chromedp.Call(sctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: `
		window.__csp = [];
		document.addEventListener("securitypolicyviolation", e => window.__csp.push(e.effectiveDirective + " " + e.blockedURI + " " + e.sample));`}); err != nil {
		t.Fatalf("violation listener: %v", err)
	}
	cancel()
	dir := shotsDir(t)
	step := func(what string, a ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(tab, 20*time.Second)
		defer cancel()
		if err := chromedp.Do(ctx, a...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	step("viewport", chromedp.EmulateViewport(1280, 900))
	// wait polls expr (a JSON value, or null while not ready) and decodes it into out.
	wait := func(what, expr string, out any) {
		t.Helper()
		ctx, cancel := context.WithTimeout(tab, 20*time.Second)
		defer cancel()
		v, err := chromedp.Run(ctx, chromedp.Poll[string](`(() => { const v = (`+expr+`); return v == null ? null : JSON.stringify(v) })()`,
			chromedp.WithPollingInterval(50*time.Millisecond)))
		if err != nil {
			body, _ := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector("main").innerText.slice(0, 2000)`))
			t.Fatalf("%s: %v\npage:\n%s", what, err, body)
		}
		if err := json.Unmarshal([]byte(v), out); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	open := func(q url.Values) {
		t.Helper()
		if q.Get("site") == "" {
			q.Set("site", site)
		}
		q.Set("since", "1h")
		step("open "+q.Encode(), chromedp.Navigate(c.URL+"/dashboard/?"+q.Encode()))
	}
	// clean checks what must hold on every view: nothing ran, no violation,
	// no error logged but those allowed, every link inside the dashboard.
	clean := func(view string, allowLog ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(tab, 20*time.Second)
		defer cancel()
		// Let the charts draw (uPlot draws on the next frame).
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`, chromedp.EvalAwaitPromise)); err != nil {
			t.Fatalf("%s: frame: %v", view, err)
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("%s: screenshot: %v", view, err)
		}
		os.WriteFile(filepath.Join(dir, "xss-"+view+".png"), png, 0o644)
		var state struct {
			Binding   string   `json:"binding"`
			Violation []string `json:"violations"`
			BadLinks  []string `json:"badLinks"`
		}
		wait(view+" state", `({ binding: typeof window.`+xssBinding+`, violations: window.__csp,
			badLinks: [...document.querySelectorAll("a[href]")].map(a => a.href).filter(h => !h.startsWith(location.origin + "/dashboard/") && h !== "https://db-ip.com/") })`, &state)
		if state.Binding != "function" {
			t.Fatalf("%s: the binding is %q on the page: the check cannot see a payload run", view, state.Binding)
		}
		mu.Lock()
		if len(ran) > 0 {
			t.Errorf("%s: payloads ran: %q", view, ran)
			ran = nil
		}
		mu.Unlock()
		if len(state.Violation) > 0 {
			t.Errorf("%s: CSP violations: %q", view, state.Violation)
		}
		if len(state.BadLinks) > 0 {
			t.Errorf("%s: links out of the dashboard: %q", view, state.BadLinks)
		}
		for _, e := range console.take() {
			if !slices.ContainsFunc(allowLog, func(s string) bool { return strings.Contains(e, s) }) {
				t.Errorf("%s: console error: %s", view, e)
			}
		}
	}
	sorted := func(s []string) []string {
		s = slices.Clone(s)
		slices.Sort(s)
		return slices.Compact(s)
	}
	// keys returns the sorted data-key of the rows of table sel, each only
	// when its first cell shows it as text (else "MISMATCH: " and the cell).
	keys := func(what, sel string) []string {
		t.Helper()
		var got []string
		wait(what, `(() => { const rows = [...document.querySelectorAll("`+sel+` tbody tr[data-key]")];
			return rows.length ? rows.map(r => r.cells[0].textContent === r.dataset.key ? r.dataset.key : "MISMATCH: " + r.cells[0].textContent) : null })()`, &got)
		return sorted(got)
	}
	wantKeys := func(what string, got, want []string) {
		t.Helper()
		if want = sorted(want); !slices.Equal(got, want) {
			t.Errorf("%s: rows %q, want %q", what, got, want)
		}
	}
	var ok bool
	chartDrawn := func(id string) string {
		return `(() => { const u = document.querySelector("#` + id + `")._u; return u && u.data[0].length && u.scales.x.min != null ? true : null })()`
	}

	// Overview, broken down by model and by release.
	open(url.Values{"by": {"model"}})
	wantKeys("overview by model", keys("overview by model", "#breakdown"), models)
	wait("overview chart", chartDrawn("chart"), &ok)
	var streams string
	wait("streams tile", `(() => { const v = document.querySelector('.tile[data-k="streams"] .v').textContent; return v === "—" ? null : v })()`, &streams)
	if streams != "24" {
		t.Errorf("streams tile = %s, want 24", streams)
	}
	clean("overview-model")

	// The tabs and the compare list are built from GET /api/dimensions:
	// the registry's rollup dimensions for the breakdown and the causes,
	// every dimension (those only itl_streams has first) for re-chunking
	// and compare. A tab built so is a working tab: release is picked by a
	// click.
	var tabs struct{ By, Cause, Rechunk, Compare []string }
	wait("dimension tabs", `(() => {
		const l = s => [...document.querySelectorAll(s)].map(e => (e.dataset.by || e.value) + ":" + e.textContent);
		const t = { By: l("#tabs button"), Cause: l("#cause-tabs button"), Rechunk: l("#rechunk-tabs button"), Compare: l("#cmp-dim option") };
		return t.By.length ? t : null })()`, &tabs)
	var wantRollup, wantRaw, wantAll []string
	for _, d := range dimension.All() {
		wantAll = append(wantAll, d.Key+":"+d.Label)
		if d.Rollup {
			wantRollup = append(wantRollup, d.Key+":"+d.Label)
		} else {
			wantRaw = append(wantRaw, d.Key+":"+d.Label)
		}
	}
	for _, c := range []struct {
		what      string
		got, want []string
	}{
		{"breakdown tabs", tabs.By, wantRollup}, {"cause tabs", tabs.Cause, wantRollup},
		{"re-chunking tabs", tabs.Rechunk, append(wantRaw, wantRollup...)}, {"compare list", tabs.Compare, wantAll},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s = %q, want the registry's %q", c.what, c.got, c.want)
		}
	}
	step("click the release tab", chromedp.Click(chromedp.CSS(`#tabs button[data-by="release"]`)))
	var by string
	wait("release tab picked", `(() => { const b = document.querySelector('#tabs button[aria-selected="true"]');
		return b && b.dataset.by === "release" && new URLSearchParams(location.search).get("by") === "release" ? b.dataset.by : null })()`, &by)
	wantKeys("overview by release", keys("overview by release", "#breakdown"), releases)
	clean("overview-release")

	// A filter on a payload value, from the URL: the chip shows it, the
	// page shows that model's three streams.
	open(url.Values{"where": {"model=" + at(3)}})
	var chip string
	wait("filter chip", `(() => { const c = document.querySelector(".chip"); return c ? c.textContent : null })()`, &chip)
	if chip != "model = "+at(3)+"×" {
		t.Errorf("filter chip = %q, want the payload as text", chip)
	}
	wait("filtered tile", `(() => { const v = document.querySelector('.tile[data-k="streams"] .v').textContent; return v === "—" ? null : v })()`, &streams)
	if streams != "3" {
		t.Errorf("filtered streams tile = %s, want 3", streams)
	}
	clean("filter")

	// Causes per model: the segment table and both charts.
	open(url.Values{"view": {"causes"}, "cby": {"model"}})
	wantKeys("causes by model", keys("causes by model", "#cause-table"), models)
	wait("cause charts", chartDrawn("cause-stalls"), &ok)
	clean("causes")

	// Re-chunking per API origin.
	open(url.Values{"view": {"rechunk"}, "rby": {"api_origin"}})
	wantKeys("rechunk by api origin", keys("rechunk", "#rechunk-table"), apiOrigins)
	clean("rechunk")

	// Distribution.
	open(url.Values{"view": {"dist"}})
	wait("heatmap", chartDrawn("heatmap"), &ok)
	clean("dist")

	// Worst streams: each row shows its model and release as text.
	open(url.Values{"view": {"worst"}})
	var worst map[string]string
	wait("worst", `(() => { const rows = [...document.querySelectorAll("#worst-table tbody tr[data-id]")];
		return rows.length === 24 ? Object.fromEntries(rows.map(r => [r.dataset.id, r.cells[2].textContent])) : null })()`, &worst)
	for id, s := range byID {
		if got, want := worst[id], s.model+" · "+s.release; got != want {
			t.Errorf("worst stream %s shows %q, want %q", id, got, want)
		}
	}
	clean("worst")

	// The joined stream: its strings and the origin's route as text.
	open(url.Values{"view": {"stream"}, "id": {joinedHex}})
	var summary map[string]string
	wait("stream summary", `(() => { const dl = document.querySelector("#stream-summary"); if (!dl.children.length) return null;
		const o = {}; dl.querySelectorAll("dt").forEach(dt => o[dt.textContent] = dt.nextElementSibling.textContent); return o })()`, &summary)
	j := byID[joinedHex]
	for k, want := range map[string]string{"Model · release": j.model + " · " + j.release, "API": j.apiOrigin + j.urlPath + " " + j.proto} {
		if summary[k] != want {
			t.Errorf("stream view %s = %q, want %q", k, summary[k], want)
		}
	}
	if o := summary["Origin"]; !strings.HasSuffix(o, " · "+at(0)) {
		t.Errorf("stream view Origin = %q, want the route %q last", o, at(0))
	}
	wait("stream chart", chartDrawn("stream-chart"), &ok)
	clean("stream")

	// Compare two payload models: the options and the verdict name them.
	open(url.Values{"view": {"compare"}, "dim": {"model"}, "a": {at(0)}, "b": {at(1)}})
	var cmp struct {
		Options []string `json:"options"`
		Named   []string `json:"named"`
	}
	wait("compare", `(() => { const v = document.querySelector("#cmp-verdict"); if (v.dataset.worse === undefined) return null;
		return { options: [...document.querySelectorAll("#cmp-a option")].map(o => o.value), named: [...v.querySelectorAll("b")].map(b => b.textContent) } })()`, &cmp)
	if got := sorted(cmp.Options); !slices.Equal(got, sorted(models)) {
		t.Errorf("compare options %q, want the models %q", got, sorted(models))
	}
	if !slices.Equal(cmp.Named, []string{at(1), at(0)}) {
		t.Errorf("compare verdict names %q, want B then A: %q, %q", cmp.Named, at(1), at(0))
	}
	clean("compare")

	// Payloads in the URL: an unknown dimension is refused by the API and
	// its name shown in the banner, a stream id in the stream's title; the
	// refused requests are the only errors logged.
	open(url.Values{"where": {at(1) + "=1"}})
	var bannerText string
	wait("banner", `(() => { const b = document.querySelector("#banner"); return b.classList.contains("err") ? b.textContent : null })()`, &bannerText)
	if !strings.Contains(bannerText, at(1)) {
		t.Errorf("banner = %q, want the refused dimension as text", bannerText)
	}
	clean("url-where", "status of 400")
	open(url.Values{"view": {"stream"}, "id": {at(0)}})
	var title string
	wait("stream title", `(() => { const b = document.querySelector("#banner"); return b.classList.contains("err") ? document.querySelector("#stream-id").textContent : null })()`, &title)
	if title != at(0) {
		t.Errorf("stream title = %q, want the id as text", title)
	}
	clean("url-id", "status of 400", "status of 404")

	// Trusted Types are enforced: markup assigned to innerHTML throws, and
	// that is the one violation (and error) this page ever reports.
	var threw string
	wait("trusted types", `(() => { try { document.createElement("div").innerHTML = "<b>x</b>"; return "no" } catch (e) { return e.name } })()`, &threw)
	var violations []string
	wait("violation", `window.__csp.length ? window.__csp : null`, &violations) // reported as a task after the throw
	if threw != "TypeError" || len(violations) != 1 || !strings.HasPrefix(violations[0], "require-trusted-types-for ") {
		t.Errorf("innerHTML = markup: threw %q, violations %q; want a TypeError and one require-trusted-types-for violation", threw, violations)
	}
	console.take()
	t.Logf("every view checked after %v", time.Since(began).Round(time.Millisecond))
}
