package main

import (
	"os"
	"testing"

	"github.com/itlmon/itlmon/collector/internal/itlmontest"
)

func TestMain(m *testing.M) {
	if os.Getenv(signalChildEnv) == "1" {
		runSignalChild()
	}
	os.Exit(itlmontest.Main(m))
}
