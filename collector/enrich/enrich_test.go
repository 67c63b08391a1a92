package enrich

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"

	"github.com/itlmon/itlmon/wasm/beacon"
)

func mustNew(tb testing.TB, o Options) *Enricher {
	tb.Helper()
	e, err := New(o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close() })
	return e
}

func TestUserAgent(t *testing.T) {
	e := mustNew(t, Options{})
	tests := []struct {
		name, ua   string
		browser    string
		major      uint16
		os, device string
	}{
		{"chrome linux", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/142.0.0.0 Safari/537.36", "Chrome", 142, "Linux", "desktop"},
		{"headless chrome", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/142.0.0.0 Safari/537.36", "Chrome", 142, "Linux", "bot"},
		{"firefox", "Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0", "Firefox", 133, "Linux", "desktop"},
		{"safari mac", "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Safari/605.1.15", "Safari", 18, "macOS", "desktop"},
		{"edge windows", "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.2903.86", "Edge", 131, "Windows", "desktop"},
		{"chrome android", "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.6778.104 Mobile Safari/537.36", "Chrome", 131, "Android", "mobile"},
		{"safari iphone", "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1", "Safari", 18, "iOS", "mobile"},
		{"safari ipad", "Mozilla/5.0 (iPad; CPU OS 17_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.6 Mobile/15E148 Safari/604.1", "Safari", 17, "iOS", "tablet"},
		{"googlebot", "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", "unknown", 0, "unknown", "bot"},
		{"gptbot", "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.2; +https://openai.com/gptbot)", "Safari", 0, "unknown", "bot"},
		{"curl", "curl/8.5.0", "unknown", 0, "unknown", "bot"},
		{"empty", "", "unknown", 0, "unknown", "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.ua != "" {
				h.Set("User-Agent", tt.ua)
			}
			got := e.Lookup(h, "127.0.0.1:1234", nil)
			if got.Browser != tt.browser || got.BrowserMajor != tt.major || got.OS != tt.os || got.Device != tt.device {
				t.Fatalf("Lookup = %s %d %s %s, want %s %d %s %s", got.Browser, got.BrowserMajor, got.OS, got.Device,
					tt.browser, tt.major, tt.os, tt.device)
			}
		})
	}
}

func TestClientHints(t *testing.T) {
	e := mustNew(t, Options{})
	// Chromium's reduced UA with a Chromium token the parser reads without a version.
	const chromiumUA = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chromium/142.0.0.0 Chrome/142.0.0.0 Safari/537.36"
	tests := []struct {
		name    string
		headers map[string]string
		client  *beacon.Client
		browser string
		major   uint16
		os, dev string
	}{
		{"headers", map[string]string{
			"User-Agent":         chromiumUA,
			"Sec-CH-UA":          `"Chromium";v="142", "Google Chrome";v="142", "Not_A Brand";v="99"`,
			"Sec-CH-UA-Platform": `"Windows"`,
			"Sec-CH-UA-Mobile":   "?0",
		}, nil, "Chrome", 142, "Windows", "desktop"},
		{"edge hints", map[string]string{
			"User-Agent": chromiumUA,
			"Sec-CH-UA":  `"Not)A;Brand";v="8", "Chromium";v="138", "Microsoft Edge";v="138"`,
		}, nil, "Edge", 138, "Linux", "desktop"},
		{"mobile hint", map[string]string{
			"User-Agent":         chromiumUA,
			"Sec-CH-UA":          `"Chromium";v="142"`,
			"Sec-CH-UA-Platform": `"Android"`,
			"Sec-CH-UA-Mobile":   "?1",
		}, nil, "Chrome", 142, "Android", "mobile"},
		{"batch client facts", map[string]string{"User-Agent": chromiumUA},
			&beacon.Client{UABrands: "Not_A Brand;99,Chromium;142", UAPlatform: "Android", UAMobile: true},
			"Chrome", 142, "Android", "mobile"},
		{"headless brand", map[string]string{
			"User-Agent": chromiumUA,
			"Sec-CH-UA":  `"HeadlessChrome";v="142", "Chromium";v="142"`,
		}, nil, "Chrome", 142, "Linux", "bot"},
		{"no header, batch UA", nil,
			&beacon.Client{UserAgent: "Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"},
			"Firefox", 133, "Linux", "desktop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.headers {
				h.Set(k, v)
			}
			got := e.Lookup(h, "127.0.0.1:1234", tt.client)
			if got.Browser != tt.browser || got.BrowserMajor != tt.major || got.OS != tt.os || got.Device != tt.dev {
				t.Fatalf("Lookup = %s %d %s %s, want %s %d %s %s", got.Browser, got.BrowserMajor, got.OS, got.Device,
					tt.browser, tt.major, tt.os, tt.dev)
			}
		})
	}
}

// writeMMDB builds a tiny GeoIP2-City-layout database in a temp dir.
func writeMMDB(tb testing.TB) string {
	tb.Helper()
	tree, err := mmdbwriter.New(mmdbwriter.Options{DatabaseType: "GeoIP2-City", RecordSize: 24})
	if err != nil {
		tb.Fatal(err)
	}
	insert := func(cidr string, v mmdbtype.Map) {
		_, n, err := net.ParseCIDR(cidr)
		if err != nil {
			tb.Fatal(err)
		}
		if err := tree.Insert(n, v); err != nil {
			tb.Fatal(err)
		}
	}
	insert("81.2.69.0/24", mmdbtype.Map{
		"country":      mmdbtype.Map{"iso_code": mmdbtype.String("GB")},
		"continent":    mmdbtype.Map{"code": mmdbtype.String("EU")},
		"subdivisions": mmdbtype.Slice{mmdbtype.Map{"iso_code": mmdbtype.String("ENG")}},
	})
	insert("89.160.20.0/24", mmdbtype.Map{
		"country":   mmdbtype.Map{"iso_code": mmdbtype.String("SE")},
		"continent": mmdbtype.Map{"code": mmdbtype.String("EU")},
	})
	insert("2a02:cf40::/32", mmdbtype.Map{
		"country": mmdbtype.Map{"iso_code": mmdbtype.String("NO")},
	})
	path := filepath.Join(tb.TempDir(), "geo.mmdb")
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := tree.WriteTo(f); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return path
}

func TestLocation(t *testing.T) {
	mmdb := writeMMDB(t)
	tests := []struct {
		name            string
		opts            Options
		remote          string
		headers         map[string]string
		country, region string
	}{
		{"nothing configured", Options{}, "81.2.69.160:5000", nil, "unknown", "unknown"},
		{"edge header untrusted", Options{}, "81.2.69.160:5000", map[string]string{"CF-IPCountry": "DE"}, "unknown", "unknown"},
		{"edge header untrusted, mmdb by peer", Options{GeoIPPath: mmdb}, "81.2.69.160:5000", map[string]string{"CF-IPCountry": "DE", "X-Forwarded-For": "89.160.20.1"}, "GB", "GB-ENG"},
		{"cloudflare", Options{TrustProxy: true}, "10.0.0.1:5000", map[string]string{"CF-IPCountry": "de"}, "DE", "unknown"},
		{"cloudflare region", Options{TrustProxy: true}, "10.0.0.1:5000", map[string]string{"CF-IPCountry": "DE", "CF-Region-Code": "BE"}, "DE", "DE-BE"},
		{"cloudflare XX", Options{TrustProxy: true}, "10.0.0.1:5000", map[string]string{"CF-IPCountry": "XX"}, "unknown", "unknown"},
		{"cloudfront", Options{TrustProxy: true}, "10.0.0.1:5000", map[string]string{"CloudFront-Viewer-Country": "US", "CloudFront-Viewer-Country-Region": "WA"}, "US", "US-WA"},
		{"vercel", Options{TrustProxy: true}, "10.0.0.1:5000", map[string]string{"X-Vercel-IP-Country": "JP", "X-Vercel-IP-Country-Region": "13"}, "JP", "JP-13"},
		{"fastly", Options{TrustProxy: true}, "10.0.0.1:5000", map[string]string{"X-Country-Code": "FR"}, "FR", "unknown"},
		{"bad header value", Options{TrustProxy: true}, "10.0.0.1:5000", map[string]string{"CF-IPCountry": "<script>"}, "unknown", "unknown"},
		{"mmdb city", Options{GeoIPPath: mmdb}, "81.2.69.160:5000", nil, "GB", "GB-ENG"},
		{"mmdb continent", Options{GeoIPPath: mmdb}, "89.160.20.7:5000", nil, "SE", "EU"},
		{"mmdb v6", Options{GeoIPPath: mmdb}, "[2a02:cf40::1]:5000", nil, "NO", "unknown"},
		{"mmdb miss", Options{GeoIPPath: mmdb}, "127.0.0.1:5000", nil, "unknown", "unknown"},
		{"mmdb via trusted XFF", Options{GeoIPPath: mmdb, TrustProxy: true}, "10.0.0.1:5000", map[string]string{"X-Forwarded-For": "89.160.20.9, 10.0.0.1"}, "SE", "EU"},
		{"edge header beats mmdb", Options{GeoIPPath: mmdb, TrustProxy: true}, "81.2.69.160:5000", map[string]string{"CF-IPCountry": "CH"}, "CH", "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := mustNew(t, tt.opts)
			h := http.Header{}
			for k, v := range tt.headers {
				h.Set(k, v)
			}
			got := e.Lookup(h, tt.remote, nil)
			if got.Country != tt.country || got.Region != tt.region {
				t.Fatalf("location = %s %s, want %s %s", got.Country, got.Region, tt.country, tt.region)
			}
			// RequestHeaders names every header Lookup reads.
			kept := http.Header{}
			for _, k := range RequestHeaders {
				if v := h.Values(k); v != nil {
					kept[http.CanonicalHeaderKey(k)] = v
				}
			}
			if again := e.Lookup(kept, tt.remote, nil); again != got {
				t.Fatalf("with RequestHeaders only: %+v, want %+v", again, got)
			}
		})
	}
}

func TestNewBadGeoIP(t *testing.T) {
	p := filepath.Join(t.TempDir(), "not.mmdb")
	if err := os.WriteFile(p, []byte("not a database"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{GeoIPPath: p}); err == nil {
		t.Fatal("New with a corrupt mmdb: no error")
	}
	if _, err := New(Options{GeoIPPath: filepath.Join(t.TempDir(), "missing.mmdb")}); err == nil {
		t.Fatal("New with a missing mmdb: no error")
	}
}

func BenchmarkLookup(b *testing.B) {
	e := mustNew(b, Options{GeoIPPath: writeMMDB(b)})
	h := http.Header{}
	h.Set("User-Agent", "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.2903.86")
	h.Set("Sec-CH-UA", `"Chromium";v="131", "Microsoft Edge";v="131", "Not_A Brand";v="24"`)
	b.ReportAllocs()
	for b.Loop() {
		e.Lookup(h, "81.2.69.160:5000", nil)
	}
}

// TestLookupMemo: a connection's lookups through its Memo give what Lookup
// gives for every batch's client facts, as they change and change back
// (no client facts, a page-reported user agent, brands, platform, mobile).
func TestLookupMemo(t *testing.T) {
	e := mustNew(t, Options{TrustProxy: true})
	for _, h := range []http.Header{
		{}, // the page's own user agent and hints decide
		{"User-Agent": {"Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"}, "Cf-Ipcountry": {"DE"}},
	} {
		var m Memo
		android := "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.6778.104 Mobile Safari/537.36"
		desktop := "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/142.0.0.0 Safari/537.36"
		clients := []*beacon.Client{
			nil,
			{UserAgent: android},
			{UserAgent: android},
			{UserAgent: android, UABrands: "Microsoft Edge;131,Chromium;131"},
			{UserAgent: android, UABrands: "Google Chrome;131,Chromium;131", UAMobile: true},
			{UserAgent: android, UABrands: "Google Chrome;131,Chromium;131", UAMobile: true, UAPlatform: "Android"},
			{UserAgent: android, UABrands: "HeadlessChrome;131", UAPlatform: "Linux"},
			{UserAgent: desktop, UABrands: "Google Chrome;142"},
			{UserAgent: desktop, UABrands: "Google Chrome;142", UAMobile: true},
			{},
			nil,
			{UserAgent: android},
		}
		seen := map[Info]bool{}
		for i, c := range clients {
			got, want := e.LookupMemo(&m, h, "81.2.69.160:5000", c), e.Lookup(h, "81.2.69.160:5000", c)
			if got != want {
				t.Fatalf("headers %v, batch %d (%+v): LookupMemo %+v, Lookup %+v", h, i, c, got, want)
			}
			seen[want] = true
		}
		if len(h) == 0 && len(seen) < 6 {
			t.Fatalf("the client facts made only %d different enrichments: the test would miss a stale memo", len(seen))
		}
	}
}
