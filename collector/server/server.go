// Package server is the collector program, `itlmon serve`: storage (the
// embedded engine or a DSN), the writer and spool, the origin join, ingest and
// the HTTP API, wired together by Main. The command line (cmd/itlmon) parses
// flags into a Config and runs a Main; tests run one or more Mains in-process
// on port 0 and learn their addresses from URL, Addr and Engine.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/chdb"
	"github.com/itlmon/itlmon/collector/demo"
	"github.com/itlmon/itlmon/collector/enrich"
	"github.com/itlmon/itlmon/collector/httpapi"
	"github.com/itlmon/itlmon/collector/ingest"
	"github.com/itlmon/itlmon/collector/join"
	"github.com/itlmon/itlmon/collector/promoter"
	"github.com/itlmon/itlmon/collector/secret"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/origin"
	"github.com/itlmon/itlmon/web"
)

// Main is the serve program: Run (returns once serving), Close (graceful).
// Tests run it in-process with Addr "127.0.0.1:0" and a temporary Data
// directory, then read the bound address from Addr or URL.
type Main struct {
	Config Config
	Log    *zerolog.Logger // optional; default: built from Config.LogFormat/LogLevel on Stderr
	Stderr io.Writer
	Logger zerolog.Logger // the logger in use, set by Run

	// Set by Run.
	Engine   *chdb.Engine // nil with a DSN
	DB       *store.DB
	Writer   *store.Writer
	Intake   *join.Intake // origin timelines; nil without --origin-key
	Promoter *promoter.Promoter
	Ingest   *ingest.Handler
	Registry *prometheus.Registry

	enricher    *enrich.Enricher
	demoOrigin  *origin.Reporter // the demo endpoints' origin middleware (--demo)
	demoProxyLn net.Listener     // the demo's buffering proxy (--demo)
	demoProxy   *http.Server
	stopMigrate func() // ends DB.MigrateInBackground (DSN only)
	stopPromote func() // ends Promoter.Run
	stopOTLP    func() // ends the OTLP exporter (--otlp-endpoint)
	ln          net.Listener
	server      *http.Server
	readLn      net.Listener // the read side's own loopback listener, or nil
	readHandler http.Handler // what readLn serves
	readServer  *http.Server
	serveErr    chan error
	closeMu     sync.Mutex
	closed      bool
}

// NewMain returns a Main with the default configuration.
func NewMain() *Main {
	return &Main{Config: DefaultConfig(), Logger: zerolog.Nop(), Stderr: os.Stderr}
}

// URL is the collector's base URL, valid after Run.
func (m *Main) URL() string { return "http://" + m.ln.Addr().String() }

// ReadURL is the base URL to read from (the dashboard, /api/, /metrics):
// the read side's own loopback listener when there is one, else the main
// listener (which then wants the read token, or serves local clients in
// the demo); valid after Run.
func (m *Main) ReadURL() string {
	if m.readLn == nil {
		return m.URL()
	}
	return "http://" + m.readLn.Addr().String()
}

// Addr is the listening address, valid after Run.
func (m *Main) Addr() string { return m.ln.Addr().String() }

// Err receives the error of an HTTP server (main or read side) that stopped
// serving on its own, not by Close; valid after Run.
func (m *Main) Err() <-chan error { return m.serveErr }

// Run starts storage, the ingest pipeline and the HTTP server, and returns
// once it serves. On error, call Close to release what was started.
func (m *Main) Run(ctx context.Context) (err error) {
	c := &m.Config
	if err := c.Validate(); err != nil {
		return err
	}
	if m.Log != nil {
		m.Logger = *m.Log
	} else {
		m.Logger = NewLogger(c.LogFormat, c.LogLevel, m.Stderr)
	}
	log := m.Logger

	// With a DSN, start while ClickHouse is down: the schema is applied in
	// the background once it answers, and the writer spools until then. The
	// embedded engine is ours: it is up once openStorage returns.
	lazy := !c.ClickHouse.IsZero()
	if m.DB, m.Engine, err = OpenStorage(ctx, c, lazy, log); err != nil {
		return err
	}
	if lazy {
		mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := m.DB.MigrateInBackground(mctx)
		m.stopMigrate = func() { cancel(); <-done }
	} else if err := m.DB.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if m.Writer, err = store.NewWriter(m.DB, store.WriterOptions{SpoolDir: c.spoolDir(), MaxSpoolBytes: c.SpoolMax, Inserts: c.InboxInserts, Logger: log}); err != nil {
		return fmt.Errorf("writer: %w", err)
	}
	if m.enricher, err = enrich.New(enrich.Options{TrustProxy: c.TrustProxy, GeoIPPath: c.GeoIPPath()}); err != nil {
		return err
	}
	logGeoIP(log, c.GeoIP, m.enricher.GeoIP())

	// Listen before building the sites: the demo site allows our own origin.
	if m.ln, err = net.Listen("tcp", c.Addr); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	sites := append([]ingest.Site(nil), c.Sites...)
	if c.Demo {
		// Site "demo" accepts the collector's own origins, plus any given
		// with --site demo=... (another hostname for this server).
		own := ownOrigins(m.ln.Addr().(*net.TCPAddr))
		i := slices.IndexFunc(sites, func(s ingest.Site) bool { return s.Key == "demo" })
		if i < 0 {
			sites = append(sites, ingest.Site{Key: "demo"})
			i = len(sites) - 1
		}
		sites[i].Origins = append(slices.Clip(sites[i].Origins), own...)
	}

	m.Registry = prometheus.NewRegistry()
	m.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerStoreMetrics(m.Registry, m.Writer, m.DB)
	// Records land in the inbox (the writer); the promoter turns the inbox
	// into the tables, joined and exactly once, whichever collector took them.
	host, _ := os.Hostname()
	pcfg := promoter.Config{Hold: c.JoinHold, PageRows: c.PromotePageRows, Gather: c.PromoteGather, Collector: host, Logger: log}
	if c.Cluster == "" {
		m.Promoter, err = promoter.New([]promoter.Shard{{Conn: m.DB.Conn()}}, pcfg)
	} else {
		// Every shard's local database, wherever the records of a stream landed.
		m.Promoter, err = promoter.NewCluster(func(ctx context.Context) ([]promoter.Shard, error) {
			scs, err := m.DB.ShardConns(ctx)
			if err != nil {
				return nil, err
			}
			shards := make([]promoter.Shard, len(scs))
			for i, sc := range scs {
				shards[i] = promoter.Shard{Name: strconv.Itoa(int(sc.Shard)), Conn: sc.Conn}
				if sc.Replicated {
					shards[i].Replicas = c.Cluster
				}
			}
			return shards, nil
		}, pcfg)
	}
	if err != nil {
		return err
	}
	if err := m.Promoter.RegisterMetrics(m.Registry); err != nil {
		return fmt.Errorf("promoter metrics: %w", err)
	}
	pctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	promoted := make(chan struct{})
	go func() {
		defer close(promoted)
		// With a DSN the schema may still be on its way (MigrateInBackground,
		// or another collector holding the schema lock): the promoter reads
		// and writes the tables itself, so it starts once they are there.
		if m.DB.WaitSchema(pctx) != nil {
			return
		}
		m.Promoter.Run(pctx)
	}()
	m.stopPromote = func() { stop(); <-promoted }
	originKeys := c.OriginKeys
	var demoKey secret.Token
	if c.Demo {
		// The demo endpoints report their origin timelines as a user's origin
		// does: to POST /v1/origin with site demo's key (--origin-key demo=...,
		// else one made up for this run).
		if demoKey = c.OriginKeys["demo"]; demoKey.IsZero() {
			demoKey = secret.New(origin.NewID())
		}
		originKeys = maps.Clone(c.OriginKeys)
		if originKeys == nil {
			originKeys = map[string]secret.Token{}
		}
		originKeys["demo"] = demoKey
	}
	if len(originKeys) > 0 {
		m.Intake = join.NewIntake(m.Writer, log)
		if err := m.Intake.RegisterMetrics(m.Registry); err != nil {
			return fmt.Errorf("join metrics: %w", err)
		}
	}
	m.Ingest, err = ingest.New(ingest.Config{
		Sites:      sites,
		Sink:       m.Writer,
		Enricher:   m.enricher,
		ConnRate:   c.ConnRate,
		ConnBurst:  max(ingest.DefaultConnBurst, int(c.ConnRate*10)),
		SiteRate:   c.SiteRate,
		SiteBurst:  max(ingest.DefaultSiteBurst, int(c.SiteRate*5)),
		Memory:     c.IngestMemory,
		Logger:     log.With().Str("component", "ingest").Logger(),
		Registerer: m.Registry,
	})
	if err != nil {
		return err
	}
	var demoHandler http.Handler
	if c.Demo {
		if demoHandler, err = m.startDemo(sites, demoKey.Reveal()); err != nil {
			return err
		}
	}
	mux, err := httpapi.New(httpapi.Config{
		Streams:   m.DB,
		Available: m.DB.SchemaReady,
		HasSite:   m.Ingest.HasSite,
		Ready:     m.ready,
		Gatherer:  m.Registry,
		Demo:      demoHandler,
		Static:    web.Static(),
		Dist:      web.Dist(),
		Logger:    log.With().Str("component", "http").Logger(),
	})
	if err != nil {
		return err
	}
	httpapi.RegisterDashboard(mux, httpapi.DashboardConfig{Conn: m.DB.Conn(), Available: m.DB.SchemaReady,
		HasSite: m.Ingest.HasSite, Logger: log.With().Str("component", "dashboard").Logger()})
	m.Ingest.Register(mux)
	if m.Intake != nil {
		m.Intake.Register(mux, join.StaticKeys(originKeys))
	}

	handler, err := m.guardReadSide(mux)
	if err != nil {
		return err
	}
	m.server = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		// Bounds a slow beacon body; gorilla clears the deadline of upgraded
		// connections. No WriteTimeout: the demo streams for minutes.
		ReadTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute,
		ErrorLog:    newStdLogger(log.With().Str("component", "http").Logger()),
	}
	// The listeners are bound: say so before serving, so that whoever sees
	// /readyz answer has the start-up lines already (tests read the
	// engine's addresses from them).
	ev := log.Info().Str("url", m.URL()).Str("read_url", m.ReadURL()).Int("sites", len(sites)).Bool("demo", c.Demo).Str("data", c.Data)
	if m.Engine != nil {
		ev = ev.Str("clickhouse_native", m.Engine.NativeAddr()).Str("clickhouse_http", m.Engine.HTTPAddr())
	} else {
		ev = ev.Stringer("clickhouse", c.ClickHouse)
	}
	ev.Msg("itlmon serving")
	if c.Demo {
		log.Info().Msgf("demo chat: %s/demo/  dashboard: %s/dashboard/  buffering proxy: http://%s", m.URL(), m.ReadURL(), m.demoProxyLn.Addr())
	}
	m.serveErr = make(chan error, 3)
	go func() { m.serveErr <- m.server.Serve(m.ln) }()
	if m.demoProxy != nil {
		go func() { m.serveErr <- m.demoProxy.Serve(m.demoProxyLn) }()
	}
	if m.readLn != nil {
		m.readServer = &http.Server{Handler: m.readHandler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
			IdleTimeout: 2 * time.Minute, ErrorLog: m.server.ErrorLog}
		go func() { m.serveErr <- m.readServer.Serve(m.readLn) }()
	}

	if c.OTLPEndpoint != "" {
		if m.stopOTLP, err = startOTLP(ctx, m.DB.Conn(), c, m.Registry, log); err != nil {
			return err
		}
	}
	return nil
}

// startDemo returns the demo's handler: its endpoints inside the origin
// middleware, whose reporter posts to this collector with site demo's origin
// key, and starts listening for the demo's buffering proxy (on the main
// listener's host, a port of its own, so its streams are an API origin of
// their own). sites are the configured sites, site demo among them.
func (m *Main) startDemo(sites []ingest.Site, key string) (http.Handler, error) {
	log := m.Logger.With().Str("component", "demo").Logger()
	self := loopbackURL(m.ln.Addr().(*net.TCPAddr))
	// Uploads every 100 ms rather than every second: the timelines reach
	// the inbox well within the join's hold of the page's records, even on a
	// busy machine, and the demo sends few.
	rep, err := origin.New(origin.Config{Collector: self, Site: "demo", Key: key, FlushInterval: 100 * time.Millisecond,
		Logf: func(format string, args ...any) { log.Warn().Msgf(format, args...) }})
	if err != nil {
		return nil, fmt.Errorf("demo origin middleware: %w", err)
	}
	m.demoOrigin = rep
	host, _, _ := net.SplitHostPort(m.Config.Addr)
	if m.demoProxyLn, err = net.Listen("tcp", net.JoinHostPort(host, "0")); err != nil {
		return nil, fmt.Errorf("listen for the demo proxy: %w", err)
	}
	var origins []string
	if i := slices.IndexFunc(sites, func(s ingest.Site) bool { return s.Key == "demo" }); i >= 0 {
		origins = sites[i].Origins
	}
	m.demoProxy = &http.Server{
		Handler:           demo.Proxy(demo.ProxyConfig{Upstream: self, Origins: origins}),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          newStdLogger(log),
	}
	return demo.Handler(demo.Options{Origin: rep.Handler, ProxyPort: m.demoProxyLn.Addr().(*net.TCPAddr).Port}), nil
}

// loopbackURL is the base URL this process reaches a listener on a at.
func loopbackURL(a *net.TCPAddr) string {
	ip := a.IP
	if ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return "http://" + net.JoinHostPort(ip.String(), strconv.Itoa(a.Port))
}

// OpenStorage connects to the DSN, or starts the embedded engine and
// connects to it. lazy (DSN only) does not wait for ClickHouse to answer.
func OpenStorage(ctx context.Context, c *Config, lazy bool, log zerolog.Logger) (*store.DB, *chdb.Engine, error) {
	if !c.ClickHouse.IsZero() {
		db, err := store.Open(ctx, store.Options{DSN: c.ClickHouse.Reveal(), StreamsTTL: c.TTL, Lazy: lazy, Cluster: c.Cluster, Logger: log})
		if err != nil {
			return nil, nil, fmt.Errorf("clickhouse %s: %w", c.ClickHouse, err)
		}
		return db, nil, nil
	}
	eng, err := chdb.Start(ctx, chdb.Options{LibPath: c.ChdbLib, Dir: c.chdbDir(), Logger: log})
	if err != nil {
		return nil, nil, fmt.Errorf("start embedded clickhouse: %w", err)
	}
	// The engine is supervised: one that died during the first statements
	// (they come a moment after its /ping answered) is restarted, and the
	// collector opens the store again on it rather than exit.
	var db *store.DB
	for attempt := 1; ; attempt++ {
		db, err = store.Open(ctx, store.Options{Addr: eng.NativeAddr(), Dial: eng.DialContext, Database: "itlmon",
			CreateDatabase: true, StreamsTTL: c.TTL, Logger: log})
		if err == nil || attempt == embeddedOpenAttempts || ctx.Err() != nil {
			break
		}
		log.Warn().Err(err).Int("attempt", attempt).Msg("embedded clickhouse refused the store's first statements; opening it again once it is up")
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		err = eng.Ready(rctx)
		cancel()
		if err != nil {
			break
		}
	}
	if err != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		eng.Close(cctx)
		return nil, nil, fmt.Errorf("embedded clickhouse: %w", err)
	}
	return db, eng, nil
}

// embeddedOpenAttempts bounds the store's opening on the embedded engine.
const embeddedOpenAttempts = 3

// guardReadSide decides who may use the read side (/api/*, /metrics,
// /dashboard/) and returns the main listener's handler; it starts the read
// side's own loopback listener when one is needed or asked for, and says
// where the read side is in one log line:
//   - the read listener (--read-addr; without a token by default
//     127.0.0.1:<port+1>) serves local requests (see httpapi.ReadPolicy),
//     and requests carrying the token when one is set;
//   - the main listener (ingest) serves the read side only to requests
//     carrying --read-token: being proxied from this host looks local
//     (nginx's default proxy_pass adds no header and sends the upstream's
//     own Host), so "the peer is loopback" proves nothing there;
//   - except the demo's convenience: --demo on a loopback --addr, without a
//     token or --read-addr, also serves local requests on the main
//     listener, with a warning, so `itlmon serve --demo` opens the
//     dashboard on its one port.
//
// Ingest, the module's assets, the landing and demo pages, /healthz and
// /readyz stay public.
func (m *Main) guardReadSide(mux http.Handler) (http.Handler, error) {
	c := &m.Config
	mainAddr := m.ln.Addr().(*net.TCPAddr)
	main := httpapi.ReadPolicy{Token: c.ReadToken}
	demoLocal := c.Demo && c.ReadToken.IsZero() && c.ReadAddr == "" && mainAddr.IP.IsLoopback()
	main.Local = demoLocal
	readAddr := c.ReadAddr
	if readAddr == "" && c.ReadToken.IsZero() && !demoLocal {
		// The port after the main one, unless the main port was chosen by
		// the system (--addr HOST:0, as tests and several collectors on one
		// host run): then the read side's is too, since the next port may
		// well be taken.
		port := 0
		if _, p, err := net.SplitHostPort(c.Addr); err == nil && p != "0" && p != "" && mainAddr.Port < 65535 {
			port = mainAddr.Port + 1
		}
		readAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	if readAddr != "" {
		ln, err := net.Listen("tcp", readAddr)
		if err != nil {
			return nil, fmt.Errorf("listen for the read side on %s (--read-addr): %w", readAddr, err)
		}
		m.readLn = ln
		m.readHandler = httpapi.ReadGuard(mux, httpapi.ReadPolicy{Token: c.ReadToken, Local: true})
	}
	ev := m.Logger.Info().Str("paths", "/api/*, /metrics, /dashboard/")
	if m.readLn != nil {
		ev = ev.Str("read_url", m.ReadURL())
	}
	switch {
	case demoLocal:
		m.Logger.Warn().Str("url", m.URL()).Msg("demo: the read side is served on the main listener to local clients, without a token; " +
			"a reverse proxy on this host would publish it: not for a deployment (set --read-token, or run without --demo)")
	case !c.ReadToken.IsZero():
		ev.Str("url", m.URL()).Msg("read side served to requests carrying the read token (Bearer, or basic auth password)")
	default:
		ev.Msg("read side served on its loopback listener only (no --read-token): not on the main listener")
	}
	return httpapi.ReadGuard(mux, main), nil
}

// ownOrigins are the origins a browser uses for pages this collector serves.
func ownOrigins(a *net.TCPAddr) []string {
	port := fmt.Sprint(a.Port)
	origins := []string{"http://127.0.0.1:" + port, "http://localhost:" + port}
	if !a.IP.IsUnspecified() && !a.IP.IsLoopback() {
		origins = append(origins, "http://"+a.String())
	}
	if a.IP.To4() == nil && a.IP.IsLoopback() {
		origins = append(origins, "http://[::1]:"+port)
	}
	return origins
}

// ready is /readyz: the schema is applied (with a DSN, in the background
// once ClickHouse answers) and ClickHouse answers.
func (m *Main) ready(ctx context.Context) error {
	if err := m.DB.SchemaReady(); err != nil {
		st := m.Writer.Stats()
		return fmt.Errorf("%w (%d spool segments waiting)", err, st.SpoolSegments)
	}
	if err := m.DB.Conn().Ping(ctx); err != nil {
		st := m.Writer.Stats()
		return fmt.Errorf("clickhouse unreachable (%d spool segments waiting): %w", st.SpoolSegments, err)
	}
	return nil
}

// Close shuts down gracefully within Config.ShutdownTimeout: stop accepting,
// let open WebSocket connections receive their pending acks, drain the write
// queue into ClickHouse or the spool, stop the engine. Safe to call after a
// failed Run and more than once.
func (m *Main) Close() error {
	m.closeMu.Lock()
	defer m.closeMu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), m.Config.ShutdownTimeout)
	defer cancel()
	began := time.Now()
	var errs []error
	// The demo's proxy cuts its streams off (they are a demo's); the demo
	// origin's last timelines go to this server's /v1/origin, so before it
	// stops (the timelines of demo streams still running are dropped).
	if m.demoProxy != nil {
		m.demoProxy.Close()
	}
	if m.demoProxyLn != nil { // not yet served when Run failed
		m.demoProxyLn.Close()
	}
	if m.demoOrigin != nil {
		errs = append(errs, wrapErr("demo origin timelines", m.demoOrigin.Shutdown(ctx)))
	}
	if m.server != nil {
		// Both stop accepting at once; WebSocket connections are hijacked,
		// so http.Server.Shutdown does not wait for them: ingest does.
		var ingestErr, httpErr, readErr error
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); ingestErr = m.Ingest.Shutdown(ctx) }()
		go func() { defer wg.Done(); httpErr = m.server.Shutdown(ctx) }()
		if m.readServer != nil {
			wg.Add(1)
			go func() { defer wg.Done(); readErr = m.readServer.Shutdown(ctx) }()
		}
		wg.Wait()
		errs = append(errs, wrapErr("ingest", ingestErr), wrapErr("http", httpErr), wrapErr("read http", readErr))
	} else {
		if m.ln != nil {
			m.ln.Close()
		}
		if m.readLn != nil {
			m.readLn.Close()
		}
	}
	if m.stopOTLP != nil {
		m.stopOTLP()
	}
	if m.stopMigrate != nil {
		m.stopMigrate()
	}
	if m.Writer != nil {
		errs = append(errs, wrapErr("writer", m.Writer.Shutdown(ctx)))
	}
	if m.stopPromote != nil { // a window cut short is promoted again by the next run
		m.stopPromote()
	}
	if m.DB != nil {
		errs = append(errs, wrapErr("db", m.DB.Close()))
	}
	if m.Engine != nil {
		errs = append(errs, wrapErr("engine", m.Engine.Close(ctx)))
	}
	if m.enricher != nil {
		m.enricher.Close()
	}
	err := errors.Join(errs...)
	m.Logger.Info().Dur("took", time.Since(began)).AnErr("err", err).Msg("itlmon stopped")
	return err
}

func wrapErr(what string, err error) error {
	if err == nil || errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

// logGeoIP says which GeoIP database files serve country and region, with
// their build dates, or warns that there is none.
func logGeoIP(log zerolog.Logger, setting string, dbs []enrich.GeoIPDB) {
	for _, db := range dbs {
		log.Info().Str("file", db.Path).Str("type", db.Type).Uint("ip_version", db.IPVersion).
			Str("built", db.Built.Format(time.DateOnly)).Msg("geoip database")
	}
	switch {
	case len(dbs) > 0:
	case strings.TrimSpace(setting) == "none":
		log.Info().Msg("geoip off (--geoip none): country and region come from trusted edge headers only")
	default:
		log.Warn().Msg("no geoip database: country and region are 'unknown' unless a trusted edge (--trust-proxy) sends them; " +
			"run `make deps-geoip` (installs DB-IP City Lite at ~/.cache/itlmon/geoip, the default) or pass --geoip FILE.mmdb")
	}
}
