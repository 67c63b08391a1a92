package main

import (
	"os"
	"testing"

	"github.com/itlmon/itlmon/collector/internal/itlmontest"
)

// Tests that run the program on engines of their own and time nothing call
// t.Parallel(): most of their time is processes starting and stopping.
// Serial: those that set the environment (t.Setenv), and the fleet of three
// collectors on one fresh database, which asserts no collector logs a
// warning (on a loaded machine a slow schema lock would be one).
func TestMain(m *testing.M) {
	if os.Getenv(signalChildEnv) == "1" {
		runSignalChild()
	}
	os.Exit(itlmontest.Main(m))
}
