package promoter_test

import (
	"os"
	"testing"

	"github.com/itlmon/itlmon/collector/internal/itlmontest"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/chtest"
)

// Tests with a database of their own whose assertions time nothing call
// t.Parallel(): most of their time is the promoter waiting out a window, its
// hold and grace. Those that time what they assert stay serial: the leases
// and takeovers (TestOnePromoterLeads, TestOldAndNewPromoter,
// TestHeartbeatFailsPromotionGoesOn, TestLeaderKeepsLeadInsideWindow) and
// the joins whose second record comes 300 ms after the first, inside a join
// hold of 2 s (TestClientWaitsForOrigin, TestEdgeStallAfterEdge,
// TestEdgeFirstOriginLast).
func TestMain(m *testing.M) {
	os.Exit(itlmontest.Main(m)) // the engine child, and the itlmon binary removed
}

// newDB opens a fresh, migrated database on the real engine (chtest).
func newDB(tb testing.TB) *store.DB {
	tb.Helper()
	return chtest.NewDB(tb, store.Options{})
}
