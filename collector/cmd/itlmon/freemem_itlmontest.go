//go:build itlmontest

package main

import (
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

// In the binary the tests build (the itlmontest tag), SIGUSR1 collects
// garbage and returns it to the OS, so the memory reports measure live
// memory; a line on stderr says when it is done.
func init() {
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			debug.FreeOSMemory()
			os.Stderr.WriteString(`{"level":"debug","message":"itlmontest: memory freed"}` + "\n")
		}
	}()
}
