package chtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/chdb"
	"github.com/itlmon/itlmon/internal/freeport"
)

// clusterStarts is how many times Cluster starts its engines on new ports
// when one of the picked ports was taken meanwhile.
const clusterStarts = 3

// Cluster starts n embedded engines, each its own shard of one cluster
// named name (remote_servers in a --config-file: every node lists every
// node by its native port, shard i+1 is nodes[i]), with the distributed
// sends' background pool enabled. The engines are closed when tb ends. It
// skips or fails tb as Engine does when the engine library is missing.
func Cluster(tb testing.TB, name string, n int) []*chdb.Engine {
	tb.Helper()
	lib := libPath(tb)
	var lastErr error
	for range clusterStarts {
		engines, err := startCluster(tb, lib, name, n)
		if err == nil {
			return engines
		}
		lastErr = err
		tb.Logf("start cluster: %v; again on new ports", err)
	}
	tb.Fatalf("start cluster %s: %v", name, lastErr)
	return nil
}

func startCluster(tb testing.TB, lib, name string, n int) ([]*chdb.Engine, error) {
	native := make([]int, n)
	httpPorts := make([]int, n)
	for i := range n {
		var err error
		if native[i], err = freeport.Pick(); err != nil {
			return nil, err
		}
		if httpPorts[i], err = freeport.Pick(); err != nil {
			return nil, err
		}
	}
	var engines []*chdb.Engine
	stopAll := func() {
		for _, e := range engines {
			e.Close(context.Background())
		}
	}
	for i := range n {
		dir := tb.TempDir()
		conf := filepath.Join(dir, "config.xml")
		if err := os.WriteFile(conf, []byte(clusterConfig(name, i, native)), 0o644); err != nil {
			stopAll()
			return nil, err
		}
		e, err := chdb.Start(context.Background(), chdb.Options{LibPath: lib, Dir: filepath.Join(dir, "data"),
			NativePort: native[i], HTTPPort: httpPorts[i], ConfigFile: conf, FixedPorts: true,
			Logger: zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.WarnLevel)})
		if err != nil {
			stopAll()
			return nil, fmt.Errorf("node %d: %w", i+1, err)
		}
		engines = append(engines, e)
	}
	tb.Cleanup(stopAll)
	return engines, nil
}

// clusterConfig is node self's configuration: the cluster, and the macros a
// replicated table's path would use.
func clusterConfig(name string, self int, native []int) string {
	var b strings.Builder
	b.WriteString("<clickhouse>\n")
	// Async distributed sends need the pool (its default is 0 in the engine).
	b.WriteString("  <background_distributed_schedule_pool_size>4</background_distributed_schedule_pool_size>\n")
	fmt.Fprintf(&b, "  <remote_servers>\n    <%s>\n", name)
	for _, p := range native {
		fmt.Fprintf(&b, "      <shard><replica><host>127.0.0.1</host><port>%d</port></replica></shard>\n", p)
	}
	fmt.Fprintf(&b, "    </%s>\n  </remote_servers>\n", name)
	fmt.Fprintf(&b, "  <macros><shard>%02d</shard><replica>r1</replica></macros>\n", self+1)
	b.WriteString("</clickhouse>\n")
	return b.String()
}
