package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/rs/zerolog"

	"github.com/itlmon/itlmon/collector/chdb"
	"github.com/itlmon/itlmon/collector/ingest"
	"github.com/itlmon/itlmon/collector/internal/itlmontest"
	"github.com/itlmon/itlmon/collector/server"
	"github.com/itlmon/itlmon/schema"
)

// syncBuf is a log buffer safe for concurrent writes.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeFleetOnFreshDatabase: three `itlmon serve` started at once on one
// fresh database (a DSN), in several rounds. Each comes up with the full
// schema, applied once (one schema_migrations row per version), and its
// promoter runs (a heartbeat from each) without any collector logging a
// warning or an error: those waiting for the schema lock say whom they
// wait for, and the promoters start once the tables are there.
func TestServeFleetOnFreshDatabase(t *testing.T) {
	eng := itlmontest.StartEngine(t, chdb.Options{})
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{eng.NativeAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	migs, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	const collectors, rounds = 3, 3
	for round := range rounds {
		db := fmt.Sprintf("fleet%d", round)
		if err := conn.Exec(t.Context(), "CREATE DATABASE "+db); err != nil {
			t.Fatal(err)
		}
		dsn := "clickhouse://" + eng.NativeAddr() + "/" + db
		mains := make([]*server.Main, collectors)
		logs := make([]*syncBuf, collectors)
		errs := make([]error, collectors)
		var wg sync.WaitGroup
		for i := range mains {
			m := server.NewMain()
			m.Config.Addr = "127.0.0.1:0"
			m.Config.Data = t.TempDir()
			m.Config.ClickHouse = server.NewSecretDSN(dsn)
			m.Config.ChdbLib = ""
			m.Config.Sites = []ingest.Site{{Key: "test", Origins: []string{itlmontest.PageOrigin}}}
			m.Config.ShutdownTimeout = 30 * time.Second
			logs[i] = &syncBuf{}
			log := zerolog.New(io.MultiWriter(logs[i], zerolog.NewTestWriter(t))).Level(zerolog.InfoLevel).
				With().Int("collector", i).Logger()
			m.Log = &log
			mains[i] = m
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				errs[i] = m.Run(ctx)
			}()
		}
		wg.Wait()
		for i, m := range mains {
			if errs[i] != nil {
				m.Close()
				t.Fatalf("round %d: collector %d: Run: %v", round, i, errs[i])
			}
		}
		for _, m := range mains {
			itlmontest.WaitSchema(t, m)
		}
		var beating uint64
		itlmontest.Settle(t, 90*time.Second, func() bool {
			err := conn.QueryRow(t.Context(), "SELECT uniqExact(collector) FROM "+db+".itl_promoters").Scan(&beating)
			return err == nil && beating == collectors
		})
		if beating != collectors {
			t.Errorf("round %d: %d promoters beat, want %d", round, beating, collectors)
		}
		for i, m := range mains {
			if err := m.Close(); err != nil {
				t.Errorf("round %d: collector %d: Close: %v", round, i, err)
			}
		}
		applied := 0
		for i, l := range logs {
			for _, line := range strings.Split(l.String(), "\n") {
				if strings.Contains(line, `"level":"warn"`) || strings.Contains(line, `"level":"error"`) {
					t.Errorf("round %d: collector %d logged: %s", round, i, line)
				}
				if strings.Contains(line, "schema migration applied") {
					applied++
				}
			}
		}
		if applied != len(migs) {
			t.Errorf("round %d: %d migrations applied across the collectors, want %d (each once)", round, applied, len(migs))
		}
		var rows, versions uint64
		if err := conn.QueryRow(t.Context(), "SELECT count(), uniqExact(version) FROM "+db+".schema_migrations").Scan(&rows, &versions); err != nil {
			t.Fatal(err)
		}
		if rows != uint64(len(migs)) || versions != uint64(len(migs)) {
			t.Errorf("round %d: %d schema_migrations rows of %d versions, want %d of %d", round, rows, versions, len(migs), len(migs))
		}
	}
}
