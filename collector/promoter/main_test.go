package promoter_test

import (
	"os"
	"testing"

	"github.com/itlmon/itlmon/collector/internal/itlmontest"
	"github.com/itlmon/itlmon/collector/store"
	"github.com/itlmon/itlmon/internal/chtest"
)

func TestMain(m *testing.M) {
	os.Exit(itlmontest.Main(m)) // the engine child, and the itlmon binary removed
}

// newDB opens a fresh, migrated database on the real engine (chtest).
func newDB(tb testing.TB) *store.DB {
	tb.Helper()
	return chtest.NewDB(tb, store.Options{})
}
