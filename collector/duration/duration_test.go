package duration

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"10m", 10 * time.Minute, true},
		{"90d", 90 * 24 * time.Hour, true},
		{"1h30m", 90 * time.Minute, true},
		{"0d", 0, true},
		{"", 0, false},
		{"d", 0, false},
		{"-5m", 0, false},
		{"-1d", 0, false},
		{"1.5d", 0, false},
		{"ten minutes", 0, false},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("Parse(%q) = %v, %v; want %v, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}
