package enrich

import (
	"net/netip"

	"github.com/oschwald/maxminddb-golang/v2"
)

// geoDB is a MaxMind-format country or city database (GeoLite2/GeoIP2
// Country or City, DB-IP, IPinfo's mmdb in the same layout).
type geoDB struct{ r *maxminddb.Reader }

func openGeoDB(path string) (*geoDB, error) {
	r, err := maxminddb.Open(path)
	if err != nil {
		return nil, err
	}
	return &geoDB{r: r}, nil
}

func (g *geoDB) Close() error { return g.r.Close() }

// geoRecord is the subset of the GeoIP2 Country/City record itlmon reads.
type geoRecord struct {
	Country struct {
		ISOCode string `maxminddb:"iso_code"`
	} `maxminddb:"country"`
	Continent struct {
		Code string `maxminddb:"code"`
	} `maxminddb:"continent"`
	Subdivisions []struct {
		ISOCode string `maxminddb:"iso_code"`
	} `maxminddb:"subdivisions"`
}

// lookup returns country and region (ISO 3166-2 when the database has
// subdivisions, else the continent code, else unknown).
func (g *geoDB) lookup(ip netip.Addr) (country, region string, ok bool) {
	var rec geoRecord
	res := g.r.Lookup(ip)
	if !res.Found() {
		return "", "", false
	}
	if err := res.Decode(&rec); err != nil {
		return "", "", false
	}
	c, ok := countryCode(rec.Country.ISOCode)
	if !ok {
		return "", "", false
	}
	region = Unknown
	if len(rec.Subdivisions) > 0 {
		if r, ok := subdivision(c, rec.Subdivisions[0].ISOCode); ok {
			region = r
		}
	} else if cont := rec.Continent.Code; len(cont) == 2 && isUpperAlpha(cont) {
		region = cont
	}
	return c, region, true
}
