package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/itlmon/itlmon/collector/duration"
	"github.com/itlmon/itlmon/collector/ingest"
	"github.com/itlmon/itlmon/collector/join"
	"github.com/itlmon/itlmon/collector/secret"
	"github.com/itlmon/itlmon/collector/server"
)

// siteFlags collects repeatable --site values.
type siteFlags struct{ sites *[]ingest.Site }

func (s siteFlags) String() string {
	if s.sites == nil {
		return ""
	}
	var parts []string
	for _, x := range *s.sites {
		parts = append(parts, x.Key+"="+strings.Join(x.Origins, ","))
	}
	return strings.Join(parts, " ")
}

func (s siteFlags) Set(v string) error {
	site, err := ingest.ParseSite(v)
	if err != nil {
		return err
	}
	*s.sites = append(*s.sites, site)
	return nil
}

// originKeyFlags collects repeatable --origin-key SITE=KEY values. An
// invalid value is kept in *err, not returned: the flag package would quote
// the value, the key with it, in its error.
type originKeyFlags struct {
	keys *map[string]secret.Token
	err  *error
}

func (f originKeyFlags) String() string {
	if f.keys == nil {
		return ""
	}
	var sites []string
	for s := range *f.keys {
		sites = append(sites, s+"=***")
	}
	return strings.Join(sites, " ")
}

func (f originKeyFlags) Set(v string) error {
	site, key, err := join.ParseOriginKey(v)
	if err != nil {
		if *f.err == nil {
			*f.err = err
		}
		return nil
	}
	if *f.keys == nil {
		*f.keys = map[string]secret.Token{}
	}
	(*f.keys)[site] = key
	return nil
}

// durationFlag accepts Go durations and whole days ("90d").
type durationFlag struct{ d *time.Duration }

func (f durationFlag) String() string {
	if f.d == nil {
		return ""
	}
	if *f.d%(24*time.Hour) == 0 && *f.d > 0 {
		return strconv.Itoa(int(*f.d/(24*time.Hour))) + "d"
	}
	return f.d.String()
}

func (f durationFlag) Set(v string) error {
	d, err := duration.Parse(v)
	if err != nil {
		return err
	}
	*f.d = d
	return nil
}

// bytesFlag is a size: plain bytes, or with KiB, MiB, GiB, TiB (or KB, MB,
// GB, TB: powers of 1000); -1 for unbounded.
type bytesFlag struct{ n *int64 }

func (f bytesFlag) String() string {
	if f.n == nil || *f.n == 0 {
		return "" // 0: the flag's own default (--ingest-memory), not zero bytes
	}
	for _, u := range []struct {
		s string
		n int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if *f.n > 0 && *f.n%u.n == 0 {
			return strconv.FormatInt(*f.n/u.n, 10) + u.s
		}
	}
	return strconv.FormatInt(*f.n, 10)
}

func (f bytesFlag) Set(v string) error {
	v = strings.TrimSpace(v)
	if v == "-1" {
		*f.n = -1
		return nil
	}
	mult := int64(1)
	for _, u := range []struct {
		s string
		n int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}} {
		if num, ok := strings.CutSuffix(v, u.s); ok {
			v, mult = strings.TrimSpace(num), u.n
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return fmt.Errorf("size %q: want bytes, e.g. 2GiB, 500MB or 1048576 (-1: unbounded)", v)
	}
	*f.n = n * mult
	return nil
}

// storageFlags registers the flags serve and migrate share.
func storageFlags(fs *flag.FlagSet, c *server.Config) {
	fs.StringVar(&c.Data, "data", c.Data, "data root `dir`: the embedded ClickHouse's files (DATA/clickhouse) and the spool (DATA/spool)")
	fs.Var(&c.ClickHouse, "clickhouse", "ClickHouse server `dsn` (clickhouse://user:pass@host:9000/db); empty: the embedded engine")
	fs.StringVar(&c.ChdbLib, "chdb-lib", c.ChdbLib, "`path` of libchdb.so, the embedded engine (default $CHDB_LIB_PATH; make deps-chdb installs it)")
	fs.Var(durationFlag{&c.TTL}, "ttl", "how long raw stream rows are kept: a `duration` like 90d or 720h")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log `format`: auto (console on a terminal, else JSON), json or console")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log `level`: debug, info, warn or error")
	fs.StringVar(&c.Cluster, "cluster", c.Cluster, "`name` of the cluster (in remote_servers) of a cluster layout: migrate creates the layout (per-shard tables in DB_local, Distributed tables in DB, the DSN's database); serve inserts through it, promotes every shard and runs no DDL")
}

// serveFlags registers the flags of serve. After parsing, check reports a
// value that was refused without being quoted (an invalid origin key).
func serveFlags(fs *flag.FlagSet, c *server.Config) (check func() error) {
	var keyErr error
	fs.StringVar(&c.Addr, "addr", c.Addr, "listen `address` (host:port)")
	storageFlags(fs, c)
	fs.Var(siteFlags{&c.Sites}, "site", "a site key and the page origins allowed to send for it, `KEY=ORIGIN[,ORIGIN...]` (repeatable; env ITLMON_SITES separates sites with ';')")
	fs.StringVar(&c.SitesFile, "sites-file", c.SitesFile, "`file` with one KEY=ORIGIN[,ORIGIN...] per line")
	fs.Var(originKeyFlags{&c.OriginKeys, &keyErr}, "origin-key", "`SITE=KEY`: accept origin timelines for SITE on POST /v1/origin with this shared key (repeatable, at least 16 bytes; env ITLMON_ORIGIN_KEYS separates them with ';')")
	fs.BoolVar(&c.TrustProxy, "trust-proxy", c.TrustProxy, "trust CDN country headers (CF-IPCountry, CloudFront-Viewer-Country, X-Vercel-IP-Country) and X-Forwarded-For")
	fs.StringVar(&c.GeoIP, "geoip", c.GeoIP, "country and region database: MaxMind-format .mmdb `files` or directories of them, comma-separated (MaxMind GeoIP2/GeoLite2, ip-location-db); default ~/.cache/itlmon/geoip when make deps-geoip installed it; none: off")
	fs.BoolVar(&c.Demo, "demo", c.Demo, "serve the demo chat at /demo/ and accept site \"demo\" from the collector's own origin")
	fs.Float64Var(&c.ConnRate, "conn-rate", c.ConnRate, "`records/s` allowed per WebSocket connection (0: unlimited)")
	fs.Float64Var(&c.SiteRate, "site-rate", c.SiteRate, "`records/s` allowed per site, all connections together (0: unlimited)")
	fs.Var(&c.ReadToken, "read-token", "`token` of the read side (/api/*, /metrics, /dashboard/): Bearer token, or the password of basic auth (at least 16 bytes; prefer env ITLMON_READ_TOKEN). With it the read side is served on --addr to requests carrying it; without it, only on the loopback --read-addr")
	fs.StringVar(&c.ReadAddr, "read-addr", c.ReadAddr, "loopback `address` of the read side's own listener, which serves local clients without the token; default 127.0.0.1:<port of --addr + 1> (a system-picked port when that is 0) when no --read-token is set (--demo on a loopback --addr serves the read side on --addr instead, unless --read-addr is given)")
	fs.Var(bytesFlag{&c.IngestMemory}, "ingest-memory", "`bytes` ingest may hold at once (frames still arriving, batches not yet stored); beyond, clients are shed (WebSocket close 1013, HTTP 503, both with a retry delay the module honours). Default: a quarter of GOMEMLIMIT, else 256MiB")
	fs.Var(bytesFlag{&c.SpoolMax}, "spool-max", "`bytes` the local spool may hold on disk while ClickHouse is away (e.g. 10GiB); beyond, the oldest spooled records are deleted, counted (itlmon_store_spool_dropped_rows_total) and logged; -1: unbounded")
	fs.IntVar(&c.InboxInserts, "inbox-inserts", c.InboxInserts, "`inserts` into itl_inbox a collector may run at once while ClickHouse answers, each of up to 10,000 records (one at a time after a failure): the next is built and sent while one waits for its fsync. 1 costs a ClickHouse whose cores are all busy less CPU per record; a collector acks at most 10,000 records per insert time and insert in flight (itlmon_store_insert_seconds_total over itlmon_store_inserts_total is the mean insert time)")
	fs.DurationVar(&c.JoinHold, "join-hold", c.JoinHold, "an origin timeline reaching the inbox up to this long after its client record refines the record's stall causes; records become readable about this much later (the same on every collector of a deployment)")
	fs.DurationVar(&c.PromoteGather, "promote-gather", c.PromoteGather, "while a shard's traffic is light (its last promotion took under a tenth of a page a window), let its sealed one-second windows gather this long and promote them in one run: each run costs ClickHouse about the same whatever its size (a part per view of itl_streams), so a shard with a record or two a second pays it once per gather instead of every second, and its records become readable up to this much later (at most 30s; 0: each window as soon as it is sealed)")
	fs.IntVar(&c.PromotePageRows, "promote-page-rows", c.PromotePageRows, "inbox `rows` the promoter reads and inserts at once: a promoter holds three such pages during a catch-up (about 16 KiB a row at most, twice that in RSS), and larger pages promote faster. Collectors of a deployment may differ: a window is finished in the page size it was started in")
	fs.StringVar(&c.OTLPEndpoint, "otlp-endpoint", c.OTLPEndpoint, "export the rollup's closed minutes as OTLP metrics over HTTP/protobuf to this `URL` (http(s)://host:4318; /v1/metrics is added to a bare host); every collector may: each minute is sent by the one that claims it")
	fs.DurationVar(&c.OTLPInterval, "otlp-interval", c.OTLPInterval, "how often the OTLP exporter sends the minutes closed since its last export")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "how long a graceful shutdown may take to drain connections, queue and spool writes")
	return func() error {
		if keyErr != nil {
			return fmt.Errorf("--origin-key: %w", keyErr)
		}
		return nil
	}
}

// envName is the environment variable of a flag: --log-level is ITLMON_LOG_LEVEL.
func envName(flagName string) string {
	switch flagName {
	case "site":
		return "ITLMON_SITES"
	case "origin-key":
		return "ITLMON_ORIGIN_KEYS"
	}
	return "ITLMON_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseWithEnv applies ITLMON_* variables, then parses args over them.
func parseWithEnv(fs *flag.FlagSet, args []string, getenv func(string) string) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		v := getenv(envName(f.Name))
		if v == "" || err != nil {
			return
		}
		vals := []string{v}
		if f.Name == "site" || f.Name == "origin-key" {
			vals = strings.Split(v, ";")
		}
		for _, x := range vals {
			if x = strings.TrimSpace(x); x == "" {
				continue
			}
			if e := fs.Set(f.Name, x); e != nil {
				err = fmt.Errorf("%s: %w", envName(f.Name), e)
				return
			}
		}
	})
	if err != nil {
		return err
	}
	return fs.Parse(args)
}
