package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/config"
	"github.com/itlmon/itlmon/collector/ingest"
	"github.com/itlmon/itlmon/collector/join"
	"github.com/itlmon/itlmon/collector/otlp"
)

// Config is the configuration of serve (and, in part, migrate): defaults,
// then ITLMON_* environment variables, then flags.
type Config struct {
	Addr            string
	Data            string        // data root: clickhouse/ (embedded engine), spool/
	ClickHouse      secretDSN     // "" starts the embedded engine
	ChdbLib         string        // libchdb.so for the embedded engine
	Sites           []ingest.Site // from --site and --sites-file
	SitesFile       string
	OriginKeys      map[string]string // site -> shared key of its origin reporter (--origin-key)
	TrustProxy      bool
	GeoIP           string
	TTL             time.Duration
	Demo            bool
	LogFormat       string // auto, json, console
	LogLevel        string
	ConnRate        float64 // records/s per connection, 0 = unlimited
	SiteRate        float64 // records/s per site, 0 = unlimited
	ShutdownTimeout time.Duration
	ReadToken       string        // credential of the read side (/api/, /metrics, /dashboard/); "" = loopback only
	ReadAddr        string        // loopback listener of the read side; "" = 127.0.0.1:<port+1> when needed
	JoinHold        time.Duration // how long after a client record its origin timeline still refines it
	OTLPEndpoint    string        // OTLP/HTTP metrics endpoint; "" exports nothing
	OTLPInterval    time.Duration // how often closed rollup minutes are exported
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Addr:            "127.0.0.1:8080",
		Data:            "./data",
		ChdbLib:         os.Getenv("CHDB_LIB_PATH"),
		TTL:             90 * 24 * time.Hour,
		LogFormat:       "auto",
		LogLevel:        "info",
		ConnRate:        ingest.DefaultConnRate,
		SiteRate:        ingest.DefaultSiteRate,
		ShutdownTimeout: 30 * time.Second,
		JoinHold:        join.DefaultHold,
		OTLPInterval:    otlp.DefaultInterval,
	}
}

// Configuration errors, wrapped with the offending value.
var (
	ErrNoSites   = errors.New("no sites configured: pass --site KEY=ORIGIN[,ORIGIN...], --sites-file FILE or --demo")
	ErrNoChdbLib = errors.New("no ClickHouse engine library: run `make deps-chdb` (it sets CHDB_LIB_PATH), pass --chdb-lib PATH, or --clickhouse DSN for a ClickHouse server")
	ErrLogFormat = errors.New("log format must be auto, json or console")
	ErrLogLevel  = errors.New("log level must be debug, info, warn or error")
	ErrTTL       = errors.New("ttl must be at least 1d")
	ErrReadAddr  = errors.New("the read side's own listener must be on a loopback address (127.0.0.1, ::1, localhost): elsewhere set --read-token")
	ErrDSN       = errors.New("clickhouse DSN must look like clickhouse://user:pass@host:9000/db")
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

// originKeyFlags collects repeatable --origin-key SITE=KEY values.
type originKeyFlags struct{ keys *map[string]string }

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
		return err
	}
	if *f.keys == nil {
		*f.keys = map[string]string{}
	}
	(*f.keys)[site] = key
	return nil
}

// secretFlag is a string flag whose value never shows in usage text.
type secretFlag struct{ s *string }

func (f secretFlag) String() string {
	if f.s == nil || *f.s == "" {
		return ""
	}
	return "***"
}

func (f secretFlag) Set(v string) error { *f.s = v; return nil }

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
	d, err := config.ParseDuration(v)
	if err != nil {
		return err
	}
	*f.d = d
	return nil
}

// storageFlags registers the flags serve and migrate share.
func (c *Config) storageFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Data, "data", c.Data, "data root: the embedded ClickHouse's files (DATA/clickhouse) and the spool (DATA/spool)")
	fs.Var(&c.ClickHouse, "clickhouse", "ClickHouse DSN (clickhouse://user:pass@host:9000/db); empty starts the embedded engine")
	fs.StringVar(&c.ChdbLib, "chdb-lib", c.ChdbLib, "libchdb.so of the embedded engine (default $CHDB_LIB_PATH; `make deps-chdb` installs it)")
	fs.Var(durationFlag{&c.TTL}, "ttl", "how long raw stream rows are kept (e.g. 90d)")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "auto (console on a terminal, else JSON), json or console")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
}

func (c *Config) serveFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "addr", c.Addr, "listen address")
	c.storageFlags(fs)
	fs.Var(siteFlags{&c.Sites}, "site", "site key and allowed page origins, KEY=ORIGIN[,ORIGIN...] (repeatable; env ITLMON_SITES separates sites with ';')")
	fs.StringVar(&c.SitesFile, "sites-file", c.SitesFile, "file with one KEY=ORIGIN[,ORIGIN...] per line")
	fs.Var(originKeyFlags{&c.OriginKeys}, "origin-key", "SITE=KEY: accept origin timelines for SITE on POST /v1/origin with this shared key (repeatable, at least 16 bytes; env ITLMON_ORIGIN_KEYS separates them with ';')")
	fs.BoolVar(&c.TrustProxy, "trust-proxy", c.TrustProxy, "trust CDN country headers (CF-IPCountry, CloudFront-Viewer-Country, X-Vercel-IP-Country) and X-Forwarded-For")
	fs.StringVar(&c.GeoIP, "geoip", c.GeoIP, "MaxMind-format country/city database (.mmdb) for country and region")
	fs.BoolVar(&c.Demo, "demo", c.Demo, "serve the demo chat at /demo/ and accept site \"demo\" from the collector's own origin")
	fs.Float64Var(&c.ConnRate, "conn-rate", c.ConnRate, "records/s allowed per WebSocket connection (0: unlimited)")
	fs.Float64Var(&c.SiteRate, "site-rate", c.SiteRate, "records/s allowed per site, all connections together (0: unlimited)")
	fs.Var(secretFlag{&c.ReadToken}, "read-token", "token of the read side (/api/*, /metrics, /dashboard/): Bearer token, or the password of basic auth (at least 16 bytes; prefer env ITLMON_READ_TOKEN). Without it the read side is served to loopback clients only")
	fs.StringVar(&c.ReadAddr, "read-addr", c.ReadAddr, "loopback address of a separate listener for the read side; default 127.0.0.1:<port+1> when --addr is not loopback and no --read-token is set")
	fs.DurationVar(&c.JoinHold, "join-hold", c.JoinHold, "an origin timeline reaching the inbox up to this long after its client record refines the record's stall causes; records become readable about this much later (the same on every collector of a deployment)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "how long a graceful shutdown may take to drain connections, queue and spool writes")
	fs.StringVar(&c.OTLPEndpoint, "otlp-endpoint", c.OTLPEndpoint, "export the rollup's closed minutes as OTLP metrics over HTTP/protobuf to this URL (http(s)://host:4318; /v1/metrics is added to a bare host); every collector may: each minute is sent by the one that claims it")
	fs.DurationVar(&c.OTLPInterval, "otlp-interval", c.OTLPInterval, "how often the OTLP exporter sends the minutes closed since its last export")
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

// Validate checks the configuration and loads the sites file.
func (c *Config) Validate() error {
	if err := c.validateStorage(); err != nil {
		return err
	}
	if c.SitesFile != "" {
		sites, err := ingest.LoadSitesFile(c.SitesFile)
		if err != nil {
			return fmt.Errorf("sites file: %w", err)
		}
		c.Sites = append(c.Sites, sites...)
		c.SitesFile = "" // loaded
	}
	seen := map[string]bool{}
	for _, s := range c.Sites {
		if seen[s.Key] {
			return fmt.Errorf("site %s configured twice", s.Key)
		}
		seen[s.Key] = true
	}
	if len(c.Sites) == 0 && !c.Demo {
		return ErrNoSites
	}
	for site := range c.OriginKeys {
		if !seen[site] && !(c.Demo && site == "demo") {
			return fmt.Errorf("origin key for site %s: no such site (configure it with --site)", site)
		}
	}
	if c.GeoIP != "" {
		if _, err := os.Stat(c.GeoIP); err != nil {
			return fmt.Errorf("geoip: %w", err)
		}
	}
	if c.ConnRate < 0 || c.SiteRate < 0 {
		return errors.New("rates must be >= 0 (0 is unlimited)")
	}
	if c.ShutdownTimeout <= 0 {
		return errors.New("shutdown timeout must be > 0")
	}
	if c.ReadToken != "" && len(c.ReadToken) < 16 {
		return errors.New("read token must be at least 16 bytes")
	}
	if c.OTLPEndpoint != "" {
		if err := otlp.ValidateEndpoint(c.OTLPEndpoint); err != nil {
			return err
		}
		if c.OTLPInterval < time.Second {
			return fmt.Errorf("otlp interval %v: want at least 1s", c.OTLPInterval)
		}
	}
	if c.ReadAddr != "" && !isLoopbackAddr(c.ReadAddr) {
		return fmt.Errorf("read addr %s: %w", c.ReadAddr, ErrReadAddr)
	}
	return nil
}

func (c *Config) validateStorage() error {
	switch c.LogFormat {
	case "auto", "json", "console":
	default:
		return fmt.Errorf("%q: %w", c.LogFormat, ErrLogFormat)
	}
	if _, err := zerolog.ParseLevel(c.LogLevel); err != nil || c.LogLevel == "" {
		return fmt.Errorf("%q: %w", c.LogLevel, ErrLogLevel)
	}
	if c.TTL < 24*time.Hour {
		return fmt.Errorf("%v: %w", c.TTL, ErrTTL)
	}
	if c.Data == "" {
		return errors.New("data directory must not be empty")
	}
	if !c.ClickHouse.IsZero() {
		if !c.ClickHouse.hasScheme("clickhouse", "tcp") {
			return fmt.Errorf("%s: %w", c.ClickHouse, ErrDSN)
		}
		return nil
	}
	if c.ChdbLib == "" {
		return ErrNoChdbLib
	}
	if _, err := os.Stat(c.ChdbLib); err != nil {
		return fmt.Errorf("%s: %w", c.ChdbLib, ErrNoChdbLib)
	}
	return nil
}

func (c *Config) chdbDir() string  { return filepath.Join(c.Data, "clickhouse") }
func (c *Config) spoolDir() string { return filepath.Join(c.Data, "spool") }

// isLoopbackAddr reports whether host:port names a loopback host.
func isLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
