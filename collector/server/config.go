package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/enrich"
	"github.com/itlmon/itlmon/collector/ingest"
	"github.com/itlmon/itlmon/collector/otlp"
	"github.com/itlmon/itlmon/collector/promoter"
	"github.com/itlmon/itlmon/collector/secret"
	"github.com/itlmon/itlmon/collector/store"
)

// Config is the configuration of serve (and, in part, migrate). The command
// line fills it: defaults, then ITLMON_* environment variables, then flags.
type Config struct {
	Addr            string
	Data            string        // data root: clickhouse/ (embedded engine), spool/
	ClickHouse      SecretDSN     // "" starts the embedded engine
	ChdbLib         string        // libchdb.so for the embedded engine
	Sites           []ingest.Site // from --site and --sites-file
	SitesFile       string
	OriginKeys      map[string]secret.Token // site -> shared key of its origin reporter (--origin-key)
	TrustProxy      bool
	GeoIP           string // .mmdb files or directories, comma-separated; "" or "none": no GeoIP lookups (see GeoIPPath)
	TTL             time.Duration
	Demo            bool
	LogFormat       string // auto, json, console
	LogLevel        string
	ConnRate        float64 // records/s per connection, 0 = unlimited
	SiteRate        float64 // records/s per site, 0 = unlimited
	ShutdownTimeout time.Duration
	ReadToken       secret.Token  // credential of the read side (/api/, /metrics, /dashboard/) on any listener
	ReadAddr        string        // the read side's own loopback listener; "" = 127.0.0.1:<port+1> without a token (see Main.guardReadSide)
	JoinHold        time.Duration // how long after a client record its origin timeline still refines it
	PromotePageRows int           // inbox rows a promoter reads at once (memory against promotion rate); 0: the promoter's default
	PromoteGather   time.Duration // at light traffic, how long sealed windows gather before one run promotes them (promoter.Config.Gather); 0: each at once
	Cluster         string        // the cluster of a cluster layout (itlmon migrate --cluster); needs ClickHouse
	SpoolMax        int64         // bytes the spool may hold on disk; the oldest records go beyond (-1: unbounded)
	InboxInserts    int           // inserts into itl_inbox that may run at once (store.WriterOptions.Inserts)
	IngestMemory    int64         // bytes ingest may hold (frames arriving, batches not yet acked); 0: ingest's default
	OTLPEndpoint    string        // OTLP/HTTP metrics endpoint; "" exports nothing
	OTLPInterval    time.Duration // how often closed rollup minutes are exported
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Addr:            "127.0.0.1:8080",
		Data:            "./data",
		ChdbLib:         os.Getenv("CHDB_LIB_PATH"),
		GeoIP:           enrich.DefaultGeoIPPath(),
		TTL:             90 * 24 * time.Hour,
		LogFormat:       "auto",
		LogLevel:        "info",
		ConnRate:        ingest.DefaultConnRate,
		SiteRate:        ingest.DefaultSiteRate,
		ShutdownTimeout: 30 * time.Second,
		JoinHold:        promoter.DefaultHold,
		PromotePageRows: promoter.DefaultPageRows,
		SpoolMax:        store.DefaultMaxSpoolBytes,
		InboxInserts:    store.DefaultInserts,
		OTLPInterval:    otlp.DefaultInterval,
	}
}

// GeoIPPath is the GeoIP database setting with "none" (the way to turn the
// default off) read as "".
func (c *Config) GeoIPPath() string {
	if strings.TrimSpace(c.GeoIP) == "none" {
		return ""
	}
	return c.GeoIP
}

// Configuration errors, wrapped with the offending value.
var (
	ErrNoSites    = errors.New("no sites configured: pass --site KEY=ORIGIN[,ORIGIN...], --sites-file FILE or --demo")
	ErrNoChdbLib  = errors.New("no ClickHouse engine library: run `make deps-chdb` (it sets CHDB_LIB_PATH), pass --chdb-lib PATH, or --clickhouse DSN for a ClickHouse server")
	ErrLogFormat  = errors.New("log format must be auto, json or console")
	ErrLogLevel   = errors.New("log level must be debug, info, warn or error")
	ErrTTL        = errors.New("ttl must be at least 1d")
	ErrReadAddr   = errors.New("the read side's own listener must be on a loopback address (127.0.0.1, ::1, localhost): elsewhere set --read-token")
	ErrClusterDSN = errors.New("--cluster needs --clickhouse: the DSN of a node of the cluster, its database the main database (the embedded engine is one server)")
	ErrDSN        = errors.New("clickhouse DSN must look like clickhouse://user:pass@host:9000/db")
)

// Validate checks the configuration and loads the sites file.
func (c *Config) Validate() error {
	if err := c.ValidateStorage(); err != nil {
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
	for _, p := range strings.Split(c.GeoIPPath(), ",") {
		if p = strings.TrimSpace(p); p != "" {
			if _, err := os.Stat(p); err != nil {
				return fmt.Errorf("geoip: %w", err)
			}
		}
	}
	if c.ConnRate < 0 || c.SiteRate < 0 {
		return errors.New("rates must be >= 0 (0 is unlimited)")
	}
	if c.ShutdownTimeout <= 0 {
		return errors.New("shutdown timeout must be > 0")
	}
	if !c.ReadToken.IsZero() && c.ReadToken.Len() < 16 {
		return errors.New("read token must be at least 16 bytes")
	}
	if c.SpoolMax == 0 || c.SpoolMax > 0 && c.SpoolMax < 1<<20 {
		return errors.New("spool max must be at least 1MiB (or -1: unbounded)")
	}
	if c.InboxInserts < 1 || c.InboxInserts > 16 {
		return errors.New("inbox inserts must be between 1 and 16")
	}
	if c.IngestMemory < 0 || c.IngestMemory > 0 && c.IngestMemory < 4<<20 {
		return errors.New("ingest memory must be at least 4MiB (0: the default)")
	}
	if c.JoinHold <= 0 {
		return errors.New("join hold must be > 0")
	}
	if c.PromoteGather < 0 || c.PromoteGather > promoter.MaxGather {
		return fmt.Errorf("promote gather %v: want 0 to %v", c.PromoteGather, promoter.MaxGather)
	}
	if c.PromotePageRows != 0 && (c.PromotePageRows < 100 || c.PromotePageRows > 100_000) {
		return fmt.Errorf("promote page rows %d: want 100 to 100,000 (0: the default)", c.PromotePageRows)
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

// ValidateStorage checks the part of the configuration that storage (and
// `itlmon migrate`) uses: logging, TTL, data root, DSN or engine library.
func (c *Config) ValidateStorage() error {
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
	if c.Cluster != "" && c.ClickHouse.IsZero() {
		return ErrClusterDSN
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
