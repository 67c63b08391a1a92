package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/itlmon/itlmon/e2e/nginx"
)

// TestHTTP2Browser puts the chat page and its API behind one Debian nginx
// serving HTTPS with HTTP/2, the usual production front, and reads streams
// in headless Chromium through the collector and ClickHouse (the set-up of
// TestAttributionBrowser). The page is https, the API same-origin on the
// same h2 connection; the module loads from the collector on
// http://127.0.0.1, which Chromium treats as potentially trustworthy, so it
// is not blocked as mixed content. The shared browser trusts the proxy's
// self-signed certificate (testCert).
//
// The same paced stream, with a 600 ms origin pause, goes through the same
// proxy over HTTP/1.1 and over HTTP/2: each row must say its protocol
// (http_proto, from resource timing's nextHopProtocol) and both must carry
// the same cadence, stall and re-chunking signals. Through a buffering h2
// proxy (proxy_buffering on, gzip) the stream must be stored as coalesced,
// as scenario 2 asserts over HTTP/1.1.
func TestHTTP2Browser(t *testing.T) {
	Browser(t)
	nginx.RequireReal(t)
	p := startAttrPage(t)
	upstream := strings.TrimPrefix(p.og.URL, "http://")
	var rows []attrRow
	t.Cleanup(func() {
		attrTable(t, "HTTP/1.1 and HTTP/2 through nginx, headless Chromium + collector + ClickHouse", rows)
	})

	paced := map[string]attrStored{} // by http_proto: the pause=600 stream
	scenarios := []struct {
		name, injected string
		proto          string // the stored http_proto
		opts           nginx.Options
		query          string
		smooth         bool // see attrRun
		check          func(t *testing.T, s attrStored)
	}{
		{"h1 nginx", "http/1.1; origin sleeps 600ms mid-stream", "http/1.1",
			nginx.Options{}, "pause=600", true, wantStoredOriginPause},
		{"h2 nginx", "https+h2; origin sleeps 600ms mid-stream", "h2",
			nginx.Options{TLS: testCert}, "pause=600", true, wantStoredOriginPause},
		{"h2 nginx buffer+gzip", "https+h2; proxy_buffering on; gzip on", "h2",
			nginx.Options{TLS: testCert, Buffering: true, Gzip: true}, "", false, wantStoredCoalesced},
	}
	// The streams run one after the other and are stored together; then
	// each scenario's checks.
	runs := make([]attrRun, len(scenarios))
	for i, sc := range scenarios {
		sc.opts.Upstream = upstream
		runs[i] = attrRun{base: nginx.Start(t, sc.opts).URL(), query: sc.query, smooth: sc.smooth}
	}
	stored := p.runAll(t, runs...)
	for i, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			s := stored[i]
			rows = append(rows, s.row(sc.name, sc.injected))
			if s.HTTPProto != sc.proto {
				t.Errorf("stored http_proto %q, want %q", s.HTTPProto, sc.proto)
			}
			sc.check(t, s)
			if sc.query == "pause=600" {
				paced[s.HTTPProto] = s
			}
		})
	}

	t.Run("h2 measures as h1", func(t *testing.T) {
		h1, ok1 := paced["http/1.1"]
		h2, ok2 := paced["h2"]
		if !ok1 || !ok2 {
			t.Fatalf("paced streams stored by protocol: %v; want http/1.1 and h2", keys(paced))
		}
		for _, s := range []attrStored{h1, h2} {
			// The cadence: gaps at the origin's interval, one gap at the pause.
			if p50 := usDur(s.GapP50); p50 < attrCadence*3/4 || p50 > attrCadence*3/2 {
				t.Errorf("%s: ITL p50 %v, want about the origin's %v", s.HTTPProto, p50, attrCadence)
			}
			// The pause's gap is the origin's sleep give or take how late the
			// browser read the tokens on either side of it.
			if gmax := usDur(s.GapMax); gmax < attrPause-150*time.Millisecond || gmax > attrPause+150*time.Millisecond {
				t.Errorf("%s: longest gap %v, want about the %v pause", s.HTTPProto, gmax, attrPause)
			}
			// Not re-chunked: about one event per read, few gaps under the
			// timer floor. A loaded machine coalesces a few reads on either
			// protocol (up to 8 % of gaps seen here); a re-chunking path
			// coalesces half of them or more (scenarios 2 and 4).
			if s.EventsPerRead > 1.5 || s.SubFloor > 0.25 {
				t.Errorf("%s: events/read %.2f, sub-floor share %.2f; want streamed (<= 1.5, <= 0.25)", s.HTTPProto, s.EventsPerRead, s.SubFloor)
			}
		}
		if d := usDur(h2.GapP50) - usDur(h1.GapP50); d < -attrCadence/4 || d > attrCadence/4 {
			t.Errorf("ITL p50 h2 %v, http/1.1 %v; want the same within %v", usDur(h2.GapP50), usDur(h1.GapP50), attrCadence/4)
		}
		if h2.Stalls != h1.Stalls || h2.ByCause != h1.ByCause || h2.JoinedByCause != h1.JoinedByCause || h2.TTFTCause != h1.TTFTCause {
			t.Errorf("h2 stalls %d by cause %v (joined %v), TTFT cause %s; http/1.1 %d, %v (%v), %s: want the same",
				h2.Stalls, h2.ByCause, h2.JoinedByCause, h2.TTFTCause, h1.Stalls, h1.ByCause, h1.JoinedByCause, h1.TTFTCause)
		}
	})
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
