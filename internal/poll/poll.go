// Package poll waits in tests for what only another process knows: the
// real ClickHouse engine's tables and clock, a collector's metrics, a
// process the test killed and restarted. Nothing tells the test when that
// changes, so it looks again every `every`, the latency that adds.
//
// Time inside the test's own process is no business of this package: it
// passes on testing/synctest's fake clock, and what the test's own code
// records is waited for on a channel it closes or sends on.
package poll

import "time"

// Until calls cond at once and then every `every` until it returns true
// (Until returns true) or within has passed (false, after one last call).
func Until(within, every time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for !cond() {
		if !time.Now().Before(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}
