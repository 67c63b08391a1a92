package enrich

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/oschwald/maxminddb-golang/v2"
)

// GeoIPDB describes one opened database file.
type GeoIPDB struct {
	Path      string
	Type      string    // the file's database_type ("GeoIP2-City", "city ipv4")
	IPVersion uint      // 4: IPv4 addresses only; 6: both (or IPv6 only, as the files of ip-location-db)
	Built     time.Time // the file's build_epoch
}

// geoDB is one or more MaxMind-format (.mmdb) files, memory-mapped, asked in
// order until one knows the address. Two record layouts are read:
//   - MaxMind's GeoIP2/GeoLite2 Country and City (also DB-IP's and IPinfo's
//     files in that layout): country.iso_code, subdivisions[].iso_code,
//     continent.code;
//   - ip-location-db's (npm @ip-location-db/*-mmdb): country_code, and in
//     its city files state1, the English name of the first-level
//     subdivision, which regionFromName maps to its ISO 3166-2 code.
type geoDB struct {
	readers []*maxminddb.Reader
	dbs     []GeoIPDB
}

// geoPaths expands a --geoip value: a comma-separated list of .mmdb files
// and directories (a directory stands for the .mmdb files in it, in name
// order; ip-location-db ships its IPv4 and IPv6 halves as two files).
func geoPaths(spec string) ([]string, error) {
	var paths []string
	for _, p := range strings.Split(spec, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			paths = append(paths, p)
			continue
		}
		files, err := filepath.Glob(filepath.Join(p, "*.mmdb"))
		if err != nil {
			return nil, err
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("%s: no .mmdb file", p)
		}
		slices.Sort(files)
		paths = append(paths, files...)
	}
	if len(paths) == 0 {
		return nil, errors.New("no database file")
	}
	return paths, nil
}

func openGeoDB(spec string) (*geoDB, error) {
	paths, err := geoPaths(spec)
	if err != nil {
		return nil, err
	}
	g := &geoDB{}
	for _, p := range paths {
		r, err := maxminddb.Open(p)
		if err != nil {
			g.Close()
			return nil, err
		}
		g.readers = append(g.readers, r)
		m := r.Metadata
		g.dbs = append(g.dbs, GeoIPDB{Path: p, Type: m.DatabaseType, IPVersion: m.IPVersion,
			Built: time.Unix(int64(m.BuildEpoch), 0).UTC()})
	}
	loadSubdivisions()
	return g, nil
}

func (g *geoDB) Close() error {
	var errs []error
	for _, r := range g.readers {
		errs = append(errs, r.Close())
	}
	return errors.Join(errs...)
}

// geoRecord is the subset of both layouts itlmon reads; a file fills one.
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

	CountryCode string `maxminddb:"country_code"` // ip-location-db
	State1      string `maxminddb:"state1"`       // ip-location-db city: subdivision name
}

// lookup returns country and region: ISO 3166-2 when the database has the
// subdivision (as a code, or as a name the CLDR table knows), else the
// continent code when it has one, else unknown.
func (g *geoDB) lookup(ip netip.Addr) (country, region string, ok bool) {
	for i, r := range g.readers {
		if ip.Is6() && g.dbs[i].IPVersion == 4 {
			continue
		}
		res := r.Lookup(ip)
		if !res.Found() {
			continue
		}
		var rec geoRecord
		if err := res.Decode(&rec); err != nil {
			continue
		}
		cc := rec.Country.ISOCode
		if cc == "" {
			cc = rec.CountryCode
		}
		c, ok := countryCode(cc)
		if !ok {
			continue
		}
		return c, rec.region(c), true
	}
	return "", "", false
}

func (rec *geoRecord) region(country string) string {
	if len(rec.Subdivisions) > 0 {
		if r, ok := subdivision(country, rec.Subdivisions[0].ISOCode); ok {
			return r
		}
		return Unknown
	}
	if rec.State1 != "" {
		if r, ok := regionFromName(country, rec.State1); ok {
			return r
		}
		return Unknown
	}
	if cont := rec.Continent.Code; len(cont) == 2 && isUpperAlpha(cont) {
		return cont
	}
	return Unknown
}

// DefaultGeoIPPath is where `make deps-geoip` installs the default database
// (a link to the pinned package's directory under the user's cache,
// ~/.cache/itlmon/geoip), or "" when nothing is there.
func DefaultGeoIPPath() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	p := filepath.Join(dir, "itlmon", "geoip")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}
