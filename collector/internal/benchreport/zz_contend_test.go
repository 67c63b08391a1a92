package benchreport

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/itlmon/itlmon/collector/internal/itlmontest"
	"github.com/itlmon/itlmon/collector/store"
)

func TestZZContend(t *testing.T) {
	benchReport(t)
	m := itlmontest.StartMain(t, nil)
	conn := m.DB.Conn()
	if err := conn.Exec(t.Context(), "CREATE TABLE itl_inbox_direct AS itl_inbox"); err != nil {
		t.Fatal(err)
	}
	pid := m.Engine.PID()
	release := m.Promoter.Hold()
	defer release()
	synth := inboxRows(t, roundStreams(5, 50, 200, 20))
	var q atomic.Int64
	ctx := clickhouse.Context(context.Background(), clickhouse.WithProfileEvents(func(evs []clickhouse.ProfileEvent) {
		for _, e := range evs {
			if e.Type == "increment" && (e.Name == "UserTimeMicroseconds" || e.Name == "SystemTimeMicroseconds") {
				q.Add(e.Value)
			}
		}
	}))
	run := func() (float64, float64, float64) {
		quiesce(t, conn)
		q.Store(0)
		th0 := threadCPU(pid)
		defer func() {
			th1 := threadCPU(pid)
			for k, v := range th1 {
				if d := v - th0[k]; d > 0.05 {
					fmt.Printf("   %-24s %.2f s\n", k, d)
				}
			}
		}()
		c0 := cpuNow(t, pid)
		const batch = 10_000
		for k := 0; k < len(synth); k += batch {
			if err := store.InsertRows(ctx, conn, "itl_inbox_direct", nil, synth[k:min(k+batch, len(synth))]); err != nil {
				t.Fatal(err)
			}
		}
		c := phaseCPU(t, conn, pid, c0)
		n := float64(len(synth))
		return float64(c.engine.Microseconds()) / n, float64(c.after.Microseconds()) / n, float64(q.Load()) / n
	}
	for r := 0; r < 6; r++ {
		a, am, aq := run()
		fmt.Printf("round %d: engine %.2f (after %.2f), in the inserts %.2f\n", r, a, am, aq)
	}
}

func threadCPU(pid int) map[string]float64 {
	out := map[string]float64{}
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		name := s[strings.IndexByte(s, '(')+1 : strings.LastIndexByte(s, ')')]
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		out[name] += (ut + st) / 100
	}
	return out
}
