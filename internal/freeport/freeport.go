// Package freeport hands tests a loopback TCP port for a server they start
// as a separate process (the collector, nginx, a WebDriver), which has to be
// told its port before it binds it.
//
// The usual trick, listening on port 0 and closing the listener, returns a
// port from the kernel's ephemeral range: the range every outgoing
// connection (a browser, an HTTP client) takes its source port from. On a
// busy test machine one of those connections can take the port in the
// moment between the close and the server's bind, and the server fails with
// "address already in use". Pick returns a port below that range instead,
// checked free by binding it, so only another such pick can collide with it;
// ports already handed out by this process are not handed out again.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// lowest is the lowest port Pick hands out: above the well-known and most
// registered service ports a developer machine may run.
const lowest = 20000

var (
	mu     sync.Mutex
	issued = map[int]bool{}
)

// Pick returns a loopback TCP port that nothing listened on when it was
// checked and that lies outside the kernel's ephemeral port range.
func Pick() (int, error) {
	hi := ephemeralLow() - 1
	if hi <= lowest {
		return pickEphemeral()
	}
	mu.Lock()
	defer mu.Unlock()
	for range 200 {
		port := lowest + rand.IntN(hi-lowest+1)
		if issued[port] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		ln.Close()
		issued[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("freeport: no free loopback port in [%d, %d] after 200 tries", lowest, hi)
}

// Addr is Pick as "127.0.0.1:PORT".
func Addr() (string, error) {
	port, err := Pick()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// net.ipv4.ip_local_port_range; 32768, Linux's default, where it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return lo
}

// pickEphemeral is the fallback where the ephemeral range leaves no room
// below it: a port the kernel picks.
func pickEphemeral() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("freeport: %w", err)
	}
	defer ln.Close()
	tcp, ok := ln.Addr().(*net.TCPAddr)
	if !ok {
		return 0, errors.New("freeport: not a TCP address")
	}
	return tcp.Port, nil
}
