//go:build !unix

package cpubench

import "time"

// Now is 0: no process CPU time on this platform.
func Now() time.Duration { return 0 }
