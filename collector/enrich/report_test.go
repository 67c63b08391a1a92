package enrich

import (
	"bufio"
	"cmp"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// vmRSS is this process's resident set size in KiB (Linux).
func vmRSS(tb testing.TB) int {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		tb.Skip("no /proc/self/status")
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

// TestReportGeoIP (ITLMON_BENCH_REPORT=1, make bench): what the installed
// database costs (open time, resident memory after opening and after random
// lookups, time per lookup) and how much of the IPv4 space it gives an ISO
// 3166-2 region.
func TestReportGeoIP(t *testing.T) {
	if os.Getenv("ITLMON_BENCH_REPORT") != "1" {
		t.Skip("report: ITLMON_BENCH_REPORT=1")
	}
	path := realGeoIP(t)
	rss0 := vmRSS(t)
	began := time.Now()
	g, err := openGeoDB(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	opened := time.Since(began)
	rss1 := vmRSS(t)
	began = time.Now()
	g2, err := openGeoDB(path) // the name index is built: the files' mapping alone
	if err != nil {
		t.Fatal(err)
	}
	reopened := time.Since(began)
	g2.Close()
	var size int64
	for _, db := range g.dbs {
		if st, err := os.Stat(db.Path); err == nil {
			size += st.Size()
		}
		t.Logf("geoip report: %s (%s, IPv%d, built %s)", db.Path, db.Type, db.IPVersion, db.Built.Format(time.DateOnly))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 200_000
	began = time.Now()
	for range n {
		var a [4]byte
		for i := range a {
			a[i] = byte(rng.UintN(256))
		}
		g.lookup(netip.AddrFrom4(a))
	}
	perLookup := time.Since(began) / n
	rss2 := vmRSS(t)
	t.Logf("geoip report: %.0f MB on disk; first open %v (mmap + CLDR name index), again %v (mmap); RSS +%d MB after open, +%d MB after %d random IPv4 lookups; %v per lookup",
		float64(size)/1e6, opened.Round(time.Millisecond), reopened.Round(time.Microsecond), (rss1-rss0)/1024, (rss2-rss0)/1024, n, perLookup)

	// Region coverage over the IPv4 file: address space weighted.
	var total, withName, mapped float64
	var names, namesMapped int
	seen := map[string]bool{}
	missed := map[string]float64{}
	for i, r := range g.readers {
		if g.dbs[i].IPVersion != 4 {
			continue
		}
		for res := range r.Networks() {
			var rec geoRecord
			if err := res.Decode(&rec); err != nil {
				t.Fatal(err)
			}
			w := float64(uint64(1) << (32 - res.Prefix().Bits()))
			total += w
			c, ok := countryCode(rec.CountryCode + rec.Country.ISOCode)
			if !ok || rec.State1 == "" {
				continue
			}
			withName += w
			_, hit := regionFromName(c, rec.State1)
			if hit {
				mapped += w
			} else {
				missed[c+" "+rec.State1] += w
			}
			if k := c + "/" + rec.State1; !seen[k] {
				seen[k] = true
				names++
				if hit {
					namesMapped++
				}
			}
		}
	}
	if total > 0 && withName > 0 {
		t.Logf("geoip report: IPv4 space with a subdivision name %.1f %%; of it mapped to ISO 3166-2 %.1f %% (%d of %d distinct names)",
			100*withName/total, 100*mapped/withName, namesMapped, names)
		top := slices.SortedFunc(maps.Keys(missed), func(a, b string) int { return cmp.Compare(missed[b], missed[a]) })
		for _, k := range top[:min(12, len(top))] {
			t.Logf("geoip report: unmapped %q: %.2f %% of the named IPv4 space", k, 100*missed[k]/withName)
		}
	}
}
