package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ErrDialerClosed is returned by a Dialer after Close.
var ErrDialerClosed = errors.New("namespace dialer closed")

// Dialer connects from inside one network namespace without moving a
// thread per connection. A connect on a thread moved into the namespace
// for it (Do, or the tests' netnstest.Dial) pins that thread for the whole
// connect, and Go keeps every thread it ever made: a flood of connections grows the
// process for good. A Dialer moves one OS thread into the namespace when
// it is made; that thread only makes sockets (socket(2) never blocks, and
// a socket stays in the namespace it was made in), and the connect and
// all I/O then run on any thread through Go's poller.
type Dialer struct {
	requests chan socketRequest
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

type socketRequest struct {
	family int
	reply  chan socketReply
}

type socketReply struct {
	fd  int
	err error
}

// NewDialer starts a Dialer in the named namespace. It stays in that
// namespace even if the name later comes to mean another one (ID tells);
// Close ends its thread.
func NewDialer(namespace string) (*Dialer, error) {
	target, err := vnetns.GetFromName(namespace)
	if err != nil {
		return nil, fmt.Errorf("network namespace %s: %w", namespace, err)
	}
	defer target.Close()
	d := &Dialer{requests: make(chan socketRequest), stop: make(chan struct{}), done: make(chan struct{})}
	started := make(chan error, 1)
	go d.serve(target, started, nil)
	if err := <-started; err != nil {
		return nil, fmt.Errorf("enter network namespace %s: %w", namespace, err)
	}
	return d, nil
}

// serve makes sockets on a thread it moves into target for good. The
// thread ends with the goroutine (a goroutine that exits locked takes its
// thread with it), but the main thread is never ended and its namespace
// is the process's, so serve does not stay on it: it hands over to a
// goroutine started while it holds the main thread, which therefore runs
// elsewhere. locked, when set, is closed once this goroutine has its
// thread.
func (d *Dialer) serve(target vnetns.NsHandle, started chan<- error, locked chan<- struct{}) {
	runtime.LockOSThread()
	if locked != nil {
		close(locked)
	}
	if unix.Gettid() == unix.Getpid() {
		moved := make(chan struct{})
		go d.serve(target, started, moved)
		<-moved
		runtime.UnlockOSThread()
		return
	}
	if err := unix.Setns(int(target), unix.CLONE_NEWNET); err != nil {
		// Still in the agent's namespace: the thread may be reused.
		runtime.UnlockOSThread()
		started <- err
		return
	}
	started <- nil
	defer close(d.done)
	for {
		select {
		case <-d.stop:
			return
		case r := <-d.requests:
			fd, err := unix.Socket(r.family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
			r.reply <- socketReply{fd, err}
		}
	}
}

// Close ends the Dialer's thread; connections it made stay open.
func (d *Dialer) Close() {
	d.stopOnce.Do(func() { close(d.stop) })
	<-d.done
}

// socket makes a TCP socket inside the namespace.
func (d *Dialer) socket(ctx context.Context, family int) (int, error) {
	r := socketRequest{family: family, reply: make(chan socketReply, 1)}
	select {
	case d.requests <- r:
	case <-d.stop:
		return -1, ErrDialerClosed
	case <-ctx.Done():
		return -1, ctx.Err()
	}
	got := <-r.reply
	return got.fd, got.err
}

// DialTCP connects to addr from inside the namespace, within ctx.
func (d *Dialer) DialTCP(ctx context.Context, addr netip.AddrPort) (net.Conn, error) {
	opErr := func(err error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(addr), Err: err}
	}
	family, sa := unix.AF_INET, unix.Sockaddr(nil)
	if ip := addr.Addr(); ip.Is4() || ip.Is4In6() {
		sa = &unix.SockaddrInet4{Port: int(addr.Port()), Addr: ip.Unmap().As4()}
	} else {
		family = unix.AF_INET6
		sa = &unix.SockaddrInet6{Port: int(addr.Port()), Addr: ip.As16()}
	}
	fd, err := d.socket(ctx, family)
	if err != nil {
		return nil, opErr(err)
	}
	// Non-blocking: the connect starts here and is waited for through
	// the poller, on no thread of its own.
	err = unix.Connect(fd, sa)
	if err != nil && err != unix.EINPROGRESS {
		unix.Close(fd)
		return nil, opErr(os.NewSyscallError("connect", err))
	}
	f := os.NewFile(uintptr(fd), "tcp")
	defer f.Close()
	if err == unix.EINPROGRESS {
		if err := awaitConnect(ctx, f); err != nil {
			return nil, opErr(err)
		}
	}
	// FileConn takes its own copy of the descriptor.
	c, err := net.FileConn(f)
	if err != nil {
		return nil, opErr(err)
	}
	return c, nil
}

// awaitConnect waits until the socket of f, connecting, is connected or
// has failed, or ctx ends.
func awaitConnect(ctx context.Context, f *os.File) error {
	// Only ctx ends the wait, so that a timeout reads as ctx's error.
	stop := context.AfterFunc(ctx, func() { f.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var connErr error
	err = rc.Write(func(fd uintptr) bool {
		n, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			connErr = os.NewSyscallError("getsockopt", err)
			return true
		}
		switch e := syscall.Errno(n); e {
		case 0:
			// The poller may wake early: only a peer means connected.
			_, err := unix.Getpeername(int(fd))
			return err == nil
		case unix.EINPROGRESS, unix.EALREADY, unix.EINTR:
			return false
		default:
			connErr = os.NewSyscallError("connect", e)
			return true
		}
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	return connErr
}
