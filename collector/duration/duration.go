// Package duration parses the durations itlmon's flags and query parameters
// take: a Go duration ("1h30m") or a whole number of days ("90d").
package duration

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrSyntax is returned for a malformed duration.
var ErrSyntax = errors.New(`want a duration like 90s, 10m, 2h or 90d`)

// Parse parses a Go duration ("1h30m") or a whole number of days
// ("90d"). Negative durations are rejected.
func Parse(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.ParseUint(n, 10, 32)
		if err != nil || days > 100*365 {
			return 0, fmt.Errorf("%q: %w", s, ErrSyntax)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q: %w", s, ErrSyntax)
	}
	return d, nil
}
