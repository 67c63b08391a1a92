// Package enrich derives what the collector adds to a browser record from the
// request that carried it: browser family and major version, OS and device
// class from the User-Agent (refined by UA client hints), and country/region
// from trusted edge headers or a MaxMind-format database.
//
// The client IP is used only for the database lookup inside Lookup; it is
// never returned, stored or logged.
package enrich

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/itlmon/itlmon/collector"
	"github.com/itlmon/itlmon/wasm/beacon"
)

// Unknown is the value of a field that could not be determined.
const Unknown = "unknown"

// Info is the enrichment of one request.
type Info struct {
	Country      string // ISO 3166-1 alpha-2 or "unknown"
	Region       string // ISO 3166-2 ("DE-BE"), continent code, or "unknown"
	Browser      string // "Chrome", "Firefox", "Safari", "Edge", ... or "unknown"
	BrowserMajor uint16
	OS           string // "Windows", "macOS", "Linux", "Android", "iOS", "ChromeOS", ... or "unknown"
	Device       string // "desktop", "mobile", "tablet", "tv", "bot" or "unknown"
}

// Apply copies the enrichment onto s.
func (i Info) Apply(s *collector.Stream) {
	s.Country, s.Region = i.Country, i.Region
	s.Browser, s.BrowserMajor = i.Browser, i.BrowserMajor
	s.OS, s.Device = i.OS, i.Device
}

// Options configures an Enricher.
type Options struct {
	// TrustProxy: the collector runs behind a CDN or proxy that sets
	// CF-IPCountry, CloudFront-Viewer-Country, X-Vercel-IP-Country or
	// X-Country-Code and X-Forwarded-For. Without it those headers are
	// ignored: any client could forge them.
	TrustProxy bool
	// GeoIPPath is a comma-separated list of MaxMind-format (.mmdb) country
	// or city database files or directories of them, asked in order (see
	// geoDB for the layouts read); "" for none.
	GeoIPPath string
}

// Enricher computes Info for requests. It is safe for concurrent use.
type Enricher struct {
	trustProxy bool
	geo        *geoDB
	ua         *uaParser
}

// New returns an Enricher; it opens the GeoIP database when one is configured.
func New(o Options) (*Enricher, error) {
	e := &Enricher{trustProxy: o.TrustProxy, ua: newUAParser()}
	if o.GeoIPPath != "" {
		g, err := openGeoDB(o.GeoIPPath)
		if err != nil {
			return nil, fmt.Errorf("open geoip %s: %w", o.GeoIPPath, err)
		}
		e.geo = g
	}
	return e, nil
}

// GeoIP describes the opened database files, in lookup order (none without one).
func (e *Enricher) GeoIP() []GeoIPDB {
	if e.geo == nil {
		return nil
	}
	return slices.Clone(e.geo.dbs)
}

// Close releases the GeoIP database.
func (e *Enricher) Close() error {
	if e.geo != nil {
		return e.geo.Close()
	}
	return nil
}

// RequestHeaders names every request header Lookup reads: a caller that
// keeps a request's headers for later lookups (a WebSocket connection for its
// life) keeps only these.
var RequestHeaders = []string{
	"User-Agent", "Sec-CH-UA", "Sec-CH-UA-Platform", "Sec-CH-UA-Mobile", "X-Forwarded-For",
	"CF-IPCountry", "CF-Region-Code", "CloudFront-Viewer-Country", "CloudFront-Viewer-Country-Region",
	"X-Vercel-IP-Country", "X-Vercel-IP-Country-Region", "X-Country-Code",
}

// Lookup enriches one request: h and remoteAddr are the request's headers and
// http.Request.RemoteAddr; c is the batch's client facts (nil before the first
// batch). Fields c provides win over headers only where they are more
// specific: the page's own client hints over a header the browser did not send.
func (e *Enricher) Lookup(h http.Header, remoteAddr string, c *beacon.Client) Info {
	var info Info
	e.userAgent(&info, h, c)
	info.Country, info.Region = e.location(h, remoteAddr)
	return info
}

// Memo is the last lookup of a caller whose request headers and address
// stay the same from one lookup to the next (a WebSocket connection's, for
// its life): LookupMemo looks up again only when the client facts Lookup
// reads from a batch change. The zero Memo is empty. It is not safe for
// concurrent use.
type Memo struct {
	ok   bool
	key  memoKey
	info Info
}

// memoKey is what Lookup reads of a batch's client facts (userAgent).
type memoKey struct {
	client                      bool // c != nil
	userAgent, brands, platform string
	mobile                      bool
}

// LookupMemo is Lookup(h, remoteAddr, c), remembered in m: every call with
// the same m must pass the same h and remoteAddr. The enrichment depends
// on nothing else (the GeoIP database does not change while it is open).
func (e *Enricher) LookupMemo(m *Memo, h http.Header, remoteAddr string, c *beacon.Client) Info {
	var k memoKey
	if c != nil {
		k = memoKey{client: true, userAgent: c.UserAgent, brands: c.UABrands, platform: c.UAPlatform, mobile: c.UAMobile}
	}
	if !m.ok || m.key != k {
		m.info, m.key, m.ok = e.Lookup(h, remoteAddr, c), k, true
	}
	return m.info
}

// location returns country and region from trusted edge headers, else from
// the GeoIP database, else unknown.
func (e *Enricher) location(h http.Header, remoteAddr string) (country, region string) {
	if e.trustProxy {
		if c, r, ok := edgeLocation(h); ok {
			return c, r
		}
	}
	if e.geo != nil {
		if ip, ok := e.clientIP(h, remoteAddr); ok {
			if c, r, ok := e.geo.lookup(ip); ok {
				return c, r
			}
		}
	}
	return Unknown, Unknown
}

// edgeHeaders are the country headers CDNs set, each with its region header
// ("" when the CDN sends none). Region values are ISO 3166-2 subdivision codes
// without the country prefix.
var edgeHeaders = []struct{ country, region string }{
	{"CF-IPCountry", "CF-Region-Code"}, // region: Cloudflare's "visitor location headers" managed transform
	{"CloudFront-Viewer-Country", "CloudFront-Viewer-Country-Region"},
	{"X-Vercel-IP-Country", "X-Vercel-IP-Country-Region"},
	{"X-Country-Code", ""}, // Fastly (VCL), many custom proxies
}

func edgeLocation(h http.Header) (country, region string, ok bool) {
	for _, eh := range edgeHeaders {
		c, ok := countryCode(h.Get(eh.country))
		if !ok {
			continue
		}
		region := Unknown
		if eh.region != "" {
			if r, ok := subdivision(c, h.Get(eh.region)); ok {
				region = r
			}
		}
		return c, region, true
	}
	return "", "", false
}

// countryCode validates an ISO 3166-1 alpha-2 code. "XX" (Cloudflare: no
// data) and "T1" (Tor) are not countries.
func countryCode(v string) (string, bool) {
	v = strings.ToUpper(strings.TrimSpace(v))
	if len(v) != 2 || v == "XX" || v == "T1" || !isUpperAlpha(v) {
		return "", false
	}
	return v, true
}

// subdivision returns "CC-SUB" from a subdivision code of 1 to 3 letters or
// digits, with or without the country prefix.
func subdivision(country, v string) (string, bool) {
	v = strings.ToUpper(strings.TrimSpace(v))
	v = strings.TrimPrefix(v, country+"-")
	if len(v) < 1 || len(v) > 3 {
		return "", false
	}
	for i := 0; i < len(v); i++ {
		if b := v[i]; !(b >= 'A' && b <= 'Z' || b >= '0' && b <= '9') {
			return "", false
		}
	}
	return country + "-" + v, true
}

func isUpperAlpha(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

// clientIP is the first X-Forwarded-For hop when the proxy is trusted, else
// the TCP peer.
func (e *Enricher) clientIP(h http.Header, remoteAddr string) (netip.Addr, bool) {
	if e.trustProxy {
		if xff := h.Get("X-Forwarded-For"); xff != "" {
			first, _, _ := strings.Cut(xff, ",")
			if ip, err := netip.ParseAddr(strings.TrimSpace(first)); err == nil {
				return ip.Unmap(), true
			}
		}
	}
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return ip.Unmap(), true
}
