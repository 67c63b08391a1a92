package enrich

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"
)

// writeLocationDB writes an ip-location-db city file: IPv4 and IPv6 halves as
// two files (the v4 one an IPv4-only tree), records with country_code and
// state1 (a subdivision name), as npm @ip-location-db/*-city-mmdb ships them.
func writeLocationDB(tb testing.TB, dir, name string, ipv6 bool, nets map[string][2]string) {
	tb.Helper()
	o := mmdbwriter.Options{DatabaseType: "city", RecordSize: 24}
	if !ipv6 {
		o.IPVersion = 4
	}
	tree, err := mmdbwriter.New(o)
	if err != nil {
		tb.Fatal(err)
	}
	for cidr, v := range nets {
		_, n, err := net.ParseCIDR(cidr)
		if err != nil {
			tb.Fatal(err)
		}
		rec := mmdbtype.Map{"country_code": mmdbtype.String(v[0]), "state1": mmdbtype.String(v[1]),
			"state2": mmdbtype.String(""), "city": mmdbtype.String("x"), "latitude": mmdbtype.Float32(1)}
		if err := tree.Insert(n, rec); err != nil {
			tb.Fatal(err)
		}
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := tree.WriteTo(f); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
}

func TestLocationDBLayout(t *testing.T) {
	dir := t.TempDir()
	writeLocationDB(t, dir, "x-city-ipv4.mmdb", false, map[string][2]string{
		"8.8.8.0/24":     {"US", "California"},
		"193.0.0.0/21":   {"NL", "North Holland"},
		"200.160.0.0/20": {"BR", "Sao Paulo"},
		"5.3.0.0/16":     {"RU", "Moscow Oblast"}, // ambiguous name
		"80.0.0.0/16":    {"DE", "Atlantis"},      // unknown name
		"90.0.0.0/16":    {"SG", ""},              // no subdivision
		"91.0.0.0/16":    {"", ""},                // no country
	})
	writeLocationDB(t, dir, "x-city-ipv6.mmdb", true, map[string][2]string{
		"2a00:1450:4001::/48": {"DE", "Hesse"},
	})
	tests := []struct {
		spec, remote    string
		country, region string
	}{
		{dir, "8.8.8.8:1", "US", "US-CA"},
		{dir, "193.0.6.139:1", "NL", "NL-NH"},
		{dir, "200.160.2.3:1", "BR", "BR-SP"},
		{dir, "[2a00:1450:4001::1]:1", "DE", "DE-HE"},
		{dir, "[::ffff:8.8.8.8]:1", "US", "US-CA"}, // v4-mapped: the IPv4 file
		{dir, "5.3.1.1:1", "RU", "unknown"},
		{dir, "80.0.1.1:1", "DE", "unknown"},
		{dir, "90.0.1.1:1", "SG", "unknown"},
		{dir, "91.0.1.1:1", "unknown", "unknown"},
		{dir, "127.0.0.1:1", "unknown", "unknown"},
		{filepath.Join(dir, "x-city-ipv4.mmdb"), "[2a00:1450:4001::1]:1", "unknown", "unknown"}, // no v6 half
		{filepath.Join(dir, "x-city-ipv4.mmdb") + "," + filepath.Join(dir, "x-city-ipv6.mmdb"), "[2a00:1450:4001::1]:1", "DE", "DE-HE"},
	}
	for _, tt := range tests {
		e := mustNew(t, Options{GeoIPPath: tt.spec})
		got := e.Lookup(http.Header{}, tt.remote, nil)
		if got.Country != tt.country || got.Region != tt.region {
			t.Errorf("%s via %s: %s %s, want %s %s", tt.remote, filepath.Base(tt.spec), got.Country, got.Region, tt.country, tt.region)
		}
	}
	dbs := mustNew(t, Options{GeoIPPath: dir}).GeoIP()
	if len(dbs) != 2 || !strings.HasSuffix(dbs[0].Path, "ipv4.mmdb") || dbs[0].IPVersion != 4 || dbs[1].IPVersion != 6 ||
		dbs[0].Type != "city" || dbs[0].Built.IsZero() {
		t.Fatalf("GeoIP() = %+v", dbs)
	}
	if _, err := New(Options{GeoIPPath: t.TempDir()}); err == nil {
		t.Fatal("New with a directory without .mmdb files: no error")
	}
}

// realGeoIP is the installed default database (make deps-geoip), or the one
// ITLMON_GEOIP names; the test skips without one unless ITLMON_REQUIRE_REAL=1.
func realGeoIP(tb testing.TB) string {
	tb.Helper()
	p := os.Getenv("ITLMON_GEOIP")
	if p == "" || p == "none" {
		p = DefaultGeoIPPath()
	}
	if p == "" {
		if os.Getenv("ITLMON_REQUIRE_REAL") == "1" {
			tb.Fatal("no GeoIP database: run `make deps-geoip` (ITLMON_REQUIRE_REAL=1)")
		}
		tb.Skip("no GeoIP database: run `make deps-geoip`")
	}
	return p
}

// TestRealGeoIP looks up well-known public addresses whose country and
// first-level subdivision have not moved in years, in the installed database.
// The regions asserted are those the default database (DB-IP City Lite, make
// deps-geoip) gives; GeoLite2, for one, has no subdivision for RIPE NCC.
func TestRealGeoIP(t *testing.T) {
	e := mustNew(t, Options{GeoIPPath: realGeoIP(t), TrustProxy: true})
	tests := []struct{ ip, country, region string }{
		{"8.8.8.8", "US", ""},                // Google Public DNS (anycast: the region varies by database)
		{"193.0.6.139", "NL", "NL-NH"},       // RIPE NCC, Amsterdam
		{"200.160.2.3", "BR", "BR-SP"},       // NIC.br, São Paulo
		{"2a00:1450:4001::1", "DE", "DE-HE"}, // Google, Frankfurt am Main
		{"212.58.244.20", "GB", ""},          // BBC, London
		{"2001:4860:4860::8888", "", ""},     // Google Public DNS v6: some country
	}
	for _, tt := range tests {
		got := e.Lookup(http.Header{"X-Forwarded-For": {tt.ip}}, "10.0.0.1:1", nil)
		if got.Country == Unknown || tt.country != "" && got.Country != tt.country {
			t.Errorf("%s: country %s, want %s", tt.ip, got.Country, tt.country)
		}
		if tt.region != "" && got.Region != tt.region {
			t.Errorf("%s: region %s, want %s", tt.ip, got.Region, tt.region)
		}
		if got.Region != Unknown && !strings.HasPrefix(got.Region, got.Country+"-") && len(got.Region) != 2 {
			t.Errorf("%s: region %s is neither ISO 3166-2 in %s nor a continent", tt.ip, got.Region, got.Country)
		}
		t.Logf("%s: %s %s", tt.ip, got.Country, got.Region)
	}
}
