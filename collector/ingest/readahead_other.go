//go:build !unix

package ingest

import (
	"net"
	"syscall"
)

// rawConnOf: no read-ahead on this platform.
func rawConnOf(net.Conn) syscall.RawConn { return nil }

func sysRead(uintptr, []byte) (int, bool, error) { return 0, false, syscall.EINVAL }
