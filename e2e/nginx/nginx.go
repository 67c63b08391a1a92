// Package nginx runs Debian's nginx as a reverse proxy in tests: a
// non-daemon, single-process child with a generated configuration and every
// file it writes (logs, temp paths, pid) inside t.TempDir(), listening on a
// free 127.0.0.1 port and proxying to a given upstream. It is stopped when
// the test ends.
//
// The options reproduce the deployment that ruins streaming: with
// `proxy_buffering on` plus `gzip on; gzip_types text/event-stream;` (or
// brotli) nginx delivers a whole SSE stream as one chunk at the end; an
// origin that sends `X-Accel-Buffering: no` undoes it. With a certificate (Options.TLS, see
// SelfSigned) the proxy serves HTTPS and offers HTTP/2 by ALPN, as the
// usual production front does; buffering and gzip apply the same way.
//
// With Options.Upstreams nginx is the load balancer in front of several
// collectors of a scaled-out deployment: round robin over them for the ingest
// WebSocket (/v1/ws, upgraded), the pagehide beacon (POST /v1/beacon), the
// origin reporter (POST /v1/origin) and everything else. Two options make it
// deliver one request to more than one collector, as load balancers do:
// RetryAfter (an ingest POST not answered in time is sent again to the next
// upstream, while the first may still process it) and Mirror (every ingest
// POST is also copied to every upstream).
package nginx

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/itlmon/itlmon/internal/freeport"
)

// Binary is where Debian installs nginx.
const Binary = "/usr/sbin/nginx"

// BrotliModule is where Debian's libnginx-mod-http-brotli-filter installs
// the brotli filter module.
const BrotliModule = "/usr/lib/nginx/modules/ngx_http_brotli_filter_module.so"

// Options configures the proxy.
type Options struct {
	Upstream  string // host:port (or http://host:port) of the origin; or Upstreams
	Buffering bool   // proxy_buffering on (nginx's default) instead of off
	Gzip      bool   // gzip on; gzip_types text/event-stream application/x-ndjson; gzip_proxied any
	// Brotli loads Debian's brotli filter module (libnginx-mod-http-brotli-filter,
	// BrotliModule) and sets brotli on; brotli_types text/event-stream
	// application/x-ndjson. A client that accepts br gets it instead of gzip.
	Brotli bool
	Extra  string // extra directives inside `location /`
	// Default makes `location /` a bare `proxy_pass` with nginx's defaults,
	// what a quick deployment writes: HTTP/1.0 to the upstream, Host the
	// upstream's own (127.0.0.1:PORT), Connection: close, and no
	// X-Forwarded-For, X-Real-IP or Forwarded: every request reaches the
	// upstream from loopback looking local. Buffering, Gzip, Brotli and
	// Extra are ignored; /v1/ws keeps its upgrading location (the WebSocket
	// needs it).
	Default bool
	// TLS, when set, makes the listener HTTPS with HTTP/2 (`listen ... ssl
	// http2`, the form nginx 1.22 accepts; `http2 on` came in 1.25.1),
	// HTTP/1.1 still offered by ALPN. The upstream stays plain HTTP/1.1.
	TLS *Cert

	// Upstreams (host:port or http://host:port), when set instead of
	// Upstream, are balanced round robin, one request or WebSocket
	// connection after the other. An upstream that refuses a connection is
	// skipped for a second (max_fails=1 fail_timeout=1s) and the request goes
	// to the next one, POSTs included (nothing was sent).
	Upstreams []string
	// RetryAfter, with Upstreams: an ingest POST (/v1/beacon, /v1/origin)
	// whose upstream has not answered within RetryAfter is sent to the next
	// upstream (proxy_read_timeout RetryAfter; proxy_next_upstream error
	// timeout non_idempotent), and its answer is the client's. The first
	// upstream still has the request and may process it: a load balancer
	// retry delivering it twice. Make an upstream slow to trigger it, e.g.
	// SIGSTOP a collector process (SIGCONT lets it process what it got).
	// Keep it above an upstream's normal answer time: a collector answers a
	// beacon once it is durable (a flush interval, plus the origin join's
	// hold for sites with an origin reporter), else every POST is retried.
	// Zero: nginx's defaults (60 s, no retry once a POST was sent).
	RetryAfter time.Duration
	// Mirror, with Upstreams: every ingest POST (and its CORS preflight) is
	// also sent to every upstream by nginx's mirror module, whose answers
	// are discarded: each upstream receives it at least once, the balanced
	// one twice.
	Mirror bool
}

// ingestPOSTs are the locations of the ingest POSTs RetryAfter and Mirror
// apply to: the pagehide beacon and the origin reporter.
const ingestPOSTs = "^/v1/(beacon|origin)$"

// Server is a running nginx.
type Server struct {
	Addr   string // 127.0.0.1:port
	Dir    string // prefix: configuration, logs, temp paths
	Config string // the generated nginx.conf
	TLS    bool   // HTTPS with HTTP/2

	// Upstreams are the balanced upstreams (host:port), in configuration order.
	Upstreams []string

	cmd      *exec.Cmd
	done     chan error
	stopOnce sync.Once
	stopErr  error
}

// URL is the proxy's base URL: https:// with TLS, else http://.
func (s *Server) URL() string {
	if s.TLS {
		return "https://" + s.Addr
	}
	return "http://" + s.Addr
}

// ErrorLog returns the contents of nginx's error log (for failure messages).
func (s *Server) ErrorLog() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "error.log"))
	return string(b)
}

// Available reports whether the nginx binary is installed.
func Available() bool {
	_, err := os.Stat(Binary)
	return err == nil
}

// RequireReal skips the test when nginx is missing, or fails it when
// ITLMON_REQUIRE_REAL=1 (set by `make test`). With -short (`make unit`, no
// external parts) it skips.
func RequireReal(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("nginx: external part, skipped with -short")
	}
	if Available() {
		return
	}
	if os.Getenv("ITLMON_REQUIRE_REAL") == "1" {
		tb.Fatalf("nginx: %s not found and ITLMON_REQUIRE_REAL=1 (apt-get install nginx, or `make deps`)", Binary)
	}
	tb.Skipf("nginx: %s not found (set ITLMON_REQUIRE_REAL=1 to fail instead)", Binary)
}

// Start starts nginx for the test and stops it in tb.Cleanup. It skips or
// fails the test per RequireReal when nginx, or with Options.Brotli its
// brotli module, is missing.
func Start(tb testing.TB, opts Options) *Server {
	tb.Helper()
	RequireReal(tb)
	if _, err := os.Stat(BrotliModule); opts.Brotli && err != nil {
		if os.Getenv("ITLMON_REQUIRE_REAL") == "1" {
			tb.Fatalf("nginx: brotli module %s not found and ITLMON_REQUIRE_REAL=1 (apt-get install libnginx-mod-http-brotli-filter, or `make deps`)", BrotliModule)
		}
		tb.Skipf("nginx: brotli module %s not found (set ITLMON_REQUIRE_REAL=1 to fail instead)", BrotliModule)
	}
	var lastErr error
	for range 3 { // the free port can be taken between probe and bind
		s, err := start(tb.TempDir(), opts)
		if err == nil {
			tb.Cleanup(func() {
				if err := s.Stop(); err != nil {
					tb.Errorf("nginx: stop: %v", err)
				}
			})
			return s
		}
		lastErr = err
	}
	tb.Fatalf("nginx: %v", lastErr)
	return nil
}

var confTmpl = template.Must(template.New("nginx.conf").Funcs(template.FuncMap{"ms": func(d time.Duration) int64 {
	return max(d.Milliseconds(), 1)
}}).Parse(`# generated by itlmon e2e/nginx
{{- if .Brotli}}
load_module {{.BrotliModule}};
{{- end}}
daemon off;
master_process off;
worker_processes 1;
pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/error.log info;
events { worker_connections 256; }
http {
	access_log {{.Dir}}/access.log;
	client_body_temp_path {{.Dir}}/client_body;
	proxy_temp_path {{.Dir}}/proxy_temp;
	fastcgi_temp_path {{.Dir}}/fastcgi_temp;
	uwsgi_temp_path {{.Dir}}/uwsgi_temp;
	scgi_temp_path {{.Dir}}/scgi_temp;
	default_type application/octet-stream;
	# Upgrade a WebSocket handshake; keep upstream keepalive otherwise.
	map $http_upgrade $connection_upgrade {
		default upgrade;
		''      '';
	}
{{- if .Balanced}}
	upstream itlmon_upstreams {
{{- range .Ups}}
		server {{.}} max_fails=1 fail_timeout=1s;
{{- end}}
		keepalive 16;
	}
{{- end}}
	server {
{{- if .TLS}}
		listen {{.Addr}} ssl http2;
		ssl_certificate {{.TLS.CertFile}};
		ssl_certificate_key {{.TLS.KeyFile}};
		ssl_protocols TLSv1.2 TLSv1.3;
{{- else}}
		listen {{.Addr}};
{{- end}}
{{- if .Default}}
		location / {
			proxy_pass http://{{.Pass}};
		}
{{- else}}
		# proxy_set_header is inherited only by a location that sets none:
		# each location sets Host itself.
		proxy_http_version 1.1;
		location / {
			proxy_pass http://{{.Pass}};
			proxy_set_header Host $http_host;
			proxy_set_header Connection "";
			proxy_buffering {{if .Buffering}}on{{else}}off{{end}};
{{- if .Gzip}}
			gzip on;
			gzip_proxied any;
			gzip_types text/event-stream application/x-ndjson;
{{- end}}
{{- if .Brotli}}
			brotli on;
			brotli_types text/event-stream application/x-ndjson;
{{- end}}
{{- if .Extra}}
			{{.Extra}}
{{- end}}
		}
{{- end}}
		# The ingest WebSocket: upgraded, idle for as long as a page is.
		location = /v1/ws {
			proxy_pass http://{{.Pass}};
			proxy_http_version 1.1;
			proxy_set_header Host $http_host;
			proxy_set_header Upgrade $http_upgrade;
			proxy_set_header Connection $connection_upgrade;
			proxy_buffering off;
			proxy_read_timeout 1h;
			proxy_send_timeout 1h;
		}
{{- if .Balanced}}
		location ~ {{.IngestPOSTs}} {
			proxy_pass http://{{.Pass}};
			proxy_set_header Host $http_host;
			proxy_set_header Connection "";
{{- if .RetryAfter}}
			proxy_read_timeout {{ms .RetryAfter}}ms;
			proxy_next_upstream error timeout non_idempotent;
			proxy_next_upstream_tries {{len .Ups}};
{{- end}}
{{- if .Mirror}}
{{- range $i, $u := .Ups}}
			mirror /_itlmon_mirror_{{$i}};
{{- end}}
{{- end}}
		}
{{- if .Mirror}}
{{- range $i, $u := .Ups}}
		location = /_itlmon_mirror_{{$i}} {
			internal;
			proxy_pass http://{{$u}}$request_uri;
			proxy_set_header Host $http_host;
			proxy_set_header Connection "";
		}
{{- end}}
{{- end}}
{{- end}}
	}
}
`))

// trimUpstream turns http://host:port/ into host:port.
func trimUpstream(u string) string {
	u = strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://")
	return strings.TrimSuffix(u, "/")
}

func start(dir string, opts Options) (*Server, error) {
	var ups []string
	for _, u := range opts.Upstreams {
		if u = trimUpstream(u); u == "" {
			return nil, errors.New("empty upstream")
		}
		ups = append(ups, u)
	}
	pass := trimUpstream(opts.Upstream)
	switch {
	case len(ups) > 0 && pass != "":
		return nil, errors.New("both Upstream and Upstreams set")
	case len(ups) > 0:
		pass = "itlmon_upstreams"
	case pass == "":
		return nil, errors.New("no upstream")
	case opts.RetryAfter != 0 || opts.Mirror:
		return nil, errors.New("RetryAfter and Mirror need Upstreams")
	}
	if opts.RetryAfter < 0 {
		return nil, errors.New("negative RetryAfter")
	}
	addr, err := freeport.Addr()
	if err != nil {
		return nil, err
	}
	var conf bytes.Buffer
	if err := confTmpl.Execute(&conf, struct {
		Options
		Dir, Addr, Pass, IngestPOSTs, BrotliModule string
		Ups                                        []string
		Balanced                                   bool
	}{opts, dir, addr, pass, ingestPOSTs, BrotliModule, ups, len(ups) > 0}); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, conf.Bytes(), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(Binary, "-p", dir, "-c", path, "-e", filepath.Join(dir, "error.log"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	s := &Server{Addr: addr, Dir: dir, Config: conf.String(), TLS: opts.TLS != nil, Upstreams: ups, cmd: cmd, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()

	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return s, nil
		}
		select {
		case err := <-s.done:
			return nil, fmt.Errorf("exited before listening (%v): %s%s", err, out.String(), s.ErrorLog())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("not listening on %s after 10s: %s", addr, s.ErrorLog())
		}
	}
}

// Stop asks nginx to quit (SIGQUIT finishes open requests), kills it after
// 5 s, and waits for it. It is safe to call twice.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		s.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			s.cmd.Process.Kill()
			<-s.done
			s.stopErr = errors.New("did not quit within 5s, killed")
		}
	})
	return s.stopErr
}
