//go:build unix

package ingest

import (
	"net"
	"syscall"
)

// rawConnOf returns the socket under c for read-ahead, or nil.
func rawConnOf(c net.Conn) syscall.RawConn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// sysRead reads the socket fd (non-blocking) into b, again on EINTR; wait:
// nothing to read now (EAGAIN).
func sysRead(fd uintptr, b []byte) (n int, wait bool, err error) {
	for {
		n, err = syscall.Read(int(fd), b)
		if err != syscall.EINTR {
			return n, err == syscall.EAGAIN, err
		}
	}
}
