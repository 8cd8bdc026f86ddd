// Package acceptretrytest makes a listener whose first accepts fail, as
// they do when a process runs out of file descriptors.
package acceptretrytest

import (
	"net"
	"os"
	"sync/atomic"
	"syscall"
)

// EMFILE is the error accept returns when the process has no file
// descriptor left, wrapped as net.Listener.Accept wraps it.
var EMFILE = &net.OpError{Op: "accept", Net: "unix", Err: os.NewSyscallError("accept4", syscall.EMFILE)}

// Failing is a listener whose first accepts fail.
type Failing struct {
	net.Listener
	left   atomic.Int64
	failed atomic.Int64
}

// FailFirst returns ln whose first n accepts fail with EMFILE without
// taking a connection.
func FailFirst(ln net.Listener, n int) *Failing {
	f := &Failing{Listener: ln}
	f.left.Store(int64(n))
	return f
}

// Accept fails while failures are left, then accepts from the listener.
func (f *Failing) Accept() (net.Conn, error) {
	if f.left.Add(-1) >= 0 {
		f.failed.Add(1)
		return nil, EMFILE
	}
	return f.Listener.Accept()
}

// Failed is how many accepts failed so far.
func (f *Failing) Failed() int { return int(f.failed.Load()) }
