// Package config holds the collector's command-line configuration helpers
// shared by the command and the HTTP API.
package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrDuration is returned for a malformed duration.
var ErrDuration = errors.New(`want a duration like 90s, 10m, 2h or 90d`)

// ParseDuration parses a Go duration ("1h30m") or a whole number of days
// ("90d"). Negative durations are rejected.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.ParseUint(n, 10, 32)
		if err != nil || days > 100*365 {
			return 0, fmt.Errorf("%q: %w", s, ErrDuration)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q: %w", s, ErrDuration)
	}
	return d, nil
}
