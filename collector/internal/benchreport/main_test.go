package benchreport

import (
	"os"
	"testing"

	"github.com/itlmon/itlmon/collector/internal/itlmontest"
)

func TestMain(m *testing.M) {
	maybeRunClients()
	os.Exit(itlmontest.Main(m))
}
