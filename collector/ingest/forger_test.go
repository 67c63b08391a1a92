package ingest

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/itlmon/itlmon/wasm/beacon"
)

// The tests below hold ingest to what it promises against a forger: anyone
// with a site's public key, sending its page's Origin from a client that is
// not a browser. Such records are accepted (nothing tells them from a
// page's); they are counted by site; they cannot pass the site's rate
// budget, however many connections and POSTs carry them, and another
// site's budget is not theirs to spend; and what they make ingest hold
// never passes the memory budget.

// postBeacon posts body to the beacon endpoint as a non-browser client.
func (f *fixture) postBeacon(t *testing.T, site, origin string, body []byte) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", f.srv.URL+"/v1/beacon?site="+site, bytes.NewReader(body))
	req.Header.Set("Origin", origin)
	req.Header.Set("User-Agent", "curl/8.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func (f *fixture) siteRecords(site string) float64 {
	return value(f.h.m.siteRecords.WithLabelValues(site))
}
func (f *fixture) siteLimited(site, budget string) float64 {
	return value(f.h.m.siteLimited.WithLabelValues(site, budget))
}

// TestForgerAcceptedAndCounted: the page's Origin from curl is admitted,
// and its records are counted by site.
func TestForgerAcceptedAndCounted(t *testing.T) {
	f := newFixture(t, nil)
	if resp := f.postBeacon(t, "chat", pageOrigin, mustBatch(t, 1, "chat", 3)); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("forged POST = %d, want 204", resp.StatusCode)
	}
	c, _, err := websocket.DefaultDialer.Dial(f.wsURL("chat"), http.Header{"Origin": {pageOrigin}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.WriteMessage(websocket.BinaryMessage, mustBatch(t, 2, "chat", 2))
	if ack := readAck(t, c); ack.Seq != 2 || ack.Reject != beacon.RejectNone {
		t.Fatalf("ack = %+v, want seq 2 accepted", ack)
	}
	if got := f.siteRecords("chat"); got != 5 {
		t.Fatalf("itlmon_ingest_site_records_total{site=chat} = %v, want 5", got)
	}
	if got := f.siteRecords("open"); got != 0 {
		t.Fatalf("itlmon_ingest_site_records_total{site=open} = %v, want 0", got)
	}
}

// TestForgerSiteBudget: with the clock stopped (no refill), a site's
// budget is spent once, over every connection and POST together; past it a
// WebSocket batch is refused with 1013 and a POST with 429, both counted
// under the site; another site's records still go through.
func TestForgerSiteBudget(t *testing.T) {
	now := time.Unix(1_790_000_000, 0)
	f := newFixture(t, func(c *Config) {
		c.SiteRate, c.SiteBurst, c.MaxRateWait = 5, 5, 10*time.Millisecond
		c.Now = func() time.Time { return now }
	})
	dial := func(site string) *websocket.Conn {
		c, _, err := websocket.DefaultDialer.Dial(f.wsURL(site), http.Header{"Origin": {pageOrigin}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a := dial("chat")
	a.WriteMessage(websocket.BinaryMessage, mustBatch(t, 1, "chat", 5)) // the whole budget
	if ack := readAck(t, a); ack.Reject != beacon.RejectNone {
		t.Fatalf("first batch: ack %+v, want accepted", ack)
	}
	b := dial("chat") // a fresh connection has a fresh connection budget, not a fresh site budget
	b.WriteMessage(websocket.BinaryMessage, mustBatch(t, 2, "chat", 3))
	ce, acks := readClose(t, b)
	if ce.Code != websocket.CloseTryAgainLater || !strings.Contains(ce.Text, "site chat") {
		t.Fatalf("close = %d %q, want 1013 naming the site's rate limit", ce.Code, ce.Text)
	}
	if len(acks) != 1 || acks[0].Reject != beacon.RejectOverload {
		t.Fatalf("acks = %+v, want one RejectOverload", acks)
	}
	resp := f.postBeacon(t, "chat", pageOrigin, mustBatch(t, 3, "chat", 2))
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("POST over the site budget = %d (Retry-After %q), want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if got := f.siteLimited("chat", BudgetSite); got != 5 {
		t.Fatalf("rate limited records{chat,site} = %v, want 5", got)
	}
	if got := f.siteRecords("chat"); got != 5 {
		t.Fatalf("records{chat} = %v, want 5 (the budget)", got)
	}
	// Another site's budget is its own.
	if resp := f.postBeacon(t, "open", "https://anything.example", mustBatch(t, 4, "open", 5)); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("other site's POST = %d, want 204", resp.StatusCode)
	}
	if got := f.siteLimited("open", BudgetSite); got != 0 {
		t.Fatalf("rate limited records{open,site} = %v, want 0", got)
	}
}

// TestForgerMemoryBudget: connections that declare frames and never send
// them hold their declared lengths until the budget is spent; every further
// one is shed (1013) before its payload is read, and a POST of any site is
// answered 503 with Retry-After while the budget is spent (the module keeps
// its batch and comes back): memory held never passes the budget. Once the
// forger goes, records go through again.
func TestForgerMemoryBudget(t *testing.T) {
	const budget, frame = 12_050, 4000 // room for three frames, not a batch besides
	f := newFixture(t, func(c *Config) { c.Memory = budget })
	var held []*websocket.Conn
	for i := range 5 {
		c, _, err := f.dial(t, "chat", pageOrigin)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.NetConn().Write(append(rawFrameHeader(frame), make([]byte, 10)...)); err != nil {
			t.Fatal(err)
		}
		if i < budget/frame {
			f.waitMemory(t, int64(i+1)*frame)
			held = append(held, c)
			continue
		}
		ce, _ := readClose(t, c)
		if ce.Code != websocket.CloseTryAgainLater {
			t.Fatalf("connection %d: close %d %q, want 1013", i, ce.Code, ce.Text)
		}
		if used := f.h.budget.used.Load(); used > budget {
			t.Fatalf("memory held %d, over the budget %d", used, budget)
		}
	}
	if got := f.shed("ws", ShedMemory); got != 2 {
		t.Fatalf("shed{ws,memory} = %v, want 2", got)
	}
	resp := f.postBeacon(t, "open", "https://anything.example", mustBatch(t, 1, "open", 1))
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("POST while the budget is spent = %d, want 503 with Retry-After", resp.StatusCode)
	}
	for _, c := range held {
		c.Close()
	}
	f.waitMemory(t, 0)
	if resp := f.postBeacon(t, "open", "https://anything.example", mustBatch(t, 2, "open", 1)); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("POST once the forger is gone = %d, want 204", resp.StatusCode)
	}
}
