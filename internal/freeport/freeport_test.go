package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestPickOutsideEphemeralRange(t *testing.T) {
	lo := ephemeralLow()
	seen := map[int]bool{}
	for range 50 {
		port, err := Pick()
		if err != nil {
			t.Fatal(err)
		}
		if lo-1 > lowest && (port < lowest || port >= lo) {
			t.Fatalf("port %d outside [%d, %d)", port, lowest, lo)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Fatalf("picked port %d cannot be bound: %v", port, err)
		}
		ln.Close()
	}
}
