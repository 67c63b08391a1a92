package chtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/chdb"
	"github.com/itlmon/itlmon/internal/freeport"
)

// zooKeeperJar is Debian's ZooKeeper 3.8 (apt package zookeeper); its
// manifest's Class-Path names the jars it needs.
const zooKeeperJar = "/usr/share/java/zookeeper.jar"

// ZooKeeper starts a standalone ZooKeeper server (Debian's, a Java process)
// on a free loopback port with its data in a temporary directory, waits until
// it serves, and stops it when tb ends. It returns its address. Without the
// package it skips tb (fails it with ITLMON_REQUIRE_REAL=1).
func ZooKeeper(tb testing.TB) string {
	tb.Helper()
	if testing.Short() {
		tb.Skip("ZooKeeper test: not with -short")
	}
	java, err := exec.LookPath("java")
	if _, serr := os.Stat(zooKeeperJar); err != nil || serr != nil {
		if os.Getenv("ITLMON_REQUIRE_REAL") == "1" {
			tb.Fatalf("ZooKeeper (apt-get install zookeeper) required: java %v, %s: %v", err, zooKeeperJar, serr)
		}
		tb.Skip("ZooKeeper not installed (apt-get install zookeeper)")
	}
	dir := tb.TempDir()
	port, err := freeport.Pick()
	if err != nil {
		tb.Fatal(err)
	}
	conf := filepath.Join(dir, "zoo.cfg")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("tickTime=2000\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=ruok\n",
		filepath.Join(dir, "data"), port)), 0o644); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(java, "-Xmx128m", "-cp", zooKeeperJar, "org.apache.zookeeper.server.ZooKeeperServerMain", conf)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start ZooKeeper: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	tb.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// A JVM's start: nothing signals it but the port answering "imok".
	deadline := time.Now().Add(60 * time.Second)
	for !ruok(addr) {
		select {
		case <-exited:
			tb.Fatalf("ZooKeeper exited during start-up:\n%s", out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			tb.Fatalf("ZooKeeper not serving on %s within 60 s:\n%s", addr, out.String())
		}
	}
	return addr
}

// ruok asks ZooKeeper's four-letter "ruok": true when it answers "imok".
func ruok(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("ruok")); err != nil {
		return false
	}
	b := make([]byte, 4)
	n, _ := c.Read(b)
	return string(b[:n]) == "imok"
}

// KeeperEngine starts one embedded engine configured as the only server of
// cluster name (one shard, one replica), with ZooKeeper at keeper and the
// macros {shard} = 01 and {replica} = r1, so it creates Replicated tables.
// The engine's local mode opens only its TCP and HTTP listeners, so its
// Replicated tables stay read-only (no interserver port): the engine's real
// answers for a replicated layout it cannot run. Closed when tb ends.
func KeeperEngine(tb testing.TB, name, keeper string) *chdb.Engine {
	tb.Helper()
	lib := libPath(tb)
	native, err := freeport.Pick()
	if err != nil {
		tb.Fatal(err)
	}
	httpPort, err := freeport.Pick()
	if err != nil {
		tb.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(keeper)
	dir := tb.TempDir()
	conf := filepath.Join(dir, "config.xml")
	var b strings.Builder
	b.WriteString("<clickhouse>\n")
	fmt.Fprintf(&b, "  <remote_servers><%s><shard><replica><host>127.0.0.1</host><port>%d</port></replica></shard></%s></remote_servers>\n", name, native, name)
	b.WriteString("  <macros><shard>01</shard><replica>r1</replica></macros>\n")
	fmt.Fprintf(&b, "  <zookeeper><node><host>%s</host><port>%s</port></node></zookeeper>\n", host, port)
	b.WriteString("</clickhouse>\n")
	if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
		tb.Fatal(err)
	}
	e, err := chdb.Start(context.Background(), chdb.Options{LibPath: lib, Dir: filepath.Join(dir, "data"),
		NativePort: native, HTTPPort: httpPort, ConfigFile: conf, FixedPorts: true,
		Logger: zerolog.New(zerolog.NewTestWriter(tb)).Level(zerolog.ErrorLevel)})
	if err != nil {
		tb.Fatalf("start engine with ZooKeeper: %v", err)
	}
	tb.Cleanup(func() { e.Close(context.Background()) })
	return e
}
