package e2e

import (
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/itlmon/itlmon/internal/freeport"
	"github.com/itlmon/itlmon/origin"
	"github.com/itlmon/itlmon/wasm/beacon"
	"github.com/itlmon/itlmon/wasm/meter"
)

// docsWranglerTOML is the wrangler.toml docs/edge.md gives, as written.
func docsWranglerTOML(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "edge.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```toml\n(.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatal("docs/edge.md has no ```toml block")
	}
	return string(m[1])
}

// TestEdgeWrangler: the wrangler.toml of docs/edge.md, as written, with the
// real wrangler (WRANGLER_BIN, make deps-wrangler): `wrangler deploy
// --dry-run` builds and validates it, and `wrangler dev --local` serves the
// Worker, through which a measured stream passes byte-exact and posts its
// timeline. The vars that name the origin and the collector are given on
// the command line (--var), as a deployment gives its own.
func TestEdgeWrangler(t *testing.T) {
	t.Parallel() // it times nothing
	bin := os.Getenv("WRANGLER_BIN")
	if _, err := os.Stat(bin); bin == "" || err != nil {
		requireReal(t, "wrangler (WRANGLER_BIN, make deps-wrangler)", err)
	}
	edge, err := filepath.Abs(edgeDir(t))
	if err != nil {
		t.Fatal(err)
	}
	// The repository's layout, as the docs deploy from its root: bin/edge.
	dir := t.TempDir()
	for _, sub := range []string{"bin", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(edge, filepath.Join(dir, "bin", "edge")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "wrangler.toml"), []byte(docsWranglerTOML(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	wrangler := func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		// Its own home: no account, no metrics, no update check; and its
		// own temporary directory (wrangler dev leaves a miniflare-*
		// directory in it), removed with the test's.
		cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+filepath.Join(dir, ".config"),
			"TMPDIR="+filepath.Join(dir, "tmp"), "WRANGLER_SEND_METRICS=false", "CI=true", "NO_UPDATE_NOTIFIER=1")
		return cmd
	}

	t.Run("deploy --dry-run", func(t *testing.T) {
		out, err := wrangler("deploy", "--dry-run", "--outdir", filepath.Join(dir, "out")).CombinedOutput()
		if err != nil {
			t.Fatalf("wrangler deploy --dry-run: %v\n%s", err, out)
		}
		for _, want := range []string{"--dry-run: exiting now", "env.ITLMON_ORIGIN", "env.ITLMON_COLLECTOR"} {
			if !strings.Contains(string(out), want) {
				t.Fatalf("wrangler deploy --dry-run output lacks %q:\n%s", want, out)
			}
		}
		files, _ := filepath.Glob(filepath.Join(dir, "out", "*app.wasm"))
		if len(files) != 1 {
			t.Fatalf("the bundle holds %d app.wasm modules, want 1", len(files))
		}
		t.Logf("wrangler deploy --dry-run: %s", regexp.MustCompile(`Total Upload: [^\n]*`).Find(out))
	})

	t.Run("dev --local", func(t *testing.T) {
		sink := startEdgeSink(t)
		g := startGatedOrigin(t)
		close(g.release)
		g.first.Add(1)
		addr, err := freeport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		inspector, err := freeport.Addr()
		if err != nil {
			t.Fatal(err)
		}
		host, port, _ := net.SplitHostPort(addr)
		_, iport, _ := net.SplitHostPort(inspector)
		cmd := wrangler("dev", "--local", "--ip", host, "--port", port, "--inspector-port", iport,
			"--show-interactive-dev-session=false",
			"--var", "ITLMON_ORIGIN:"+g.URL, "--var", "ITLMON_COLLECTOR:"+sink.URL,
			"--var", "ITLMON_SITE:"+edgeSite, "--var", "ITLMON_KEY:"+edgeKey)
		log := &syncBuf{}
		cmd.Stdout, cmd.Stderr = log, log
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own group, with the workerd it starts
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		t.Cleanup(func() {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // wrangler and the workerd it started
			<-exited
			if t.Failed() {
				t.Logf("wrangler dev log:\n%s", log.String())
			}
		})
		if !Eventually(60*time.Second, 100*time.Millisecond, func() bool {
			select {
			case err := <-exited:
				exited <- err
				return true
			default:
			}
			return strings.Contains(log.String(), "Ready on")
		}) || !strings.Contains(log.String(), "Ready on") {
			t.Fatalf("wrangler dev not ready within 60 s:\n%s", log.String())
		}
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(`{"stream":true}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != gatedBody {
			t.Fatalf("through wrangler dev: %v, %q", err, b)
		}
		id := resp.Header.Get(origin.HeaderStream)
		if !origin.ValidID(id) {
			t.Fatalf("through wrangler dev: stream id %q", id)
		}
		var rec beacon.Origin
		if !sink.changed.Wait(15*time.Second, func() bool {
			sink.mu.Lock()
			defer sink.mu.Unlock()
			i := slices.IndexFunc(sink.recs, func(r beacon.Origin) bool { return r.ID == id })
			if i >= 0 {
				rec = sink.recs[i]
			}
			return i >= 0
		}) {
			t.Fatalf("no timeline for %s from wrangler dev", id)
		}
		if rec.Vantage != beacon.VantageEdge || rec.Status != uint8(meter.StatusComplete) || rec.ContentEvents != gatedTokens {
			t.Fatalf("timeline from wrangler dev: %v %v, %d content events", rec.Vantage, meter.Status(rec.Status), rec.ContentEvents)
		}
		t.Logf("wrangler dev --local: stream %s passed byte-exact, timeline posted (colo %q)", id, rec.Edge.Colo)
	})
}
