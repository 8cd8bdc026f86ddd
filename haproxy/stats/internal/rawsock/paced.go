package rawsock

import (
	"context"
	"errors"
	"io"
	"os"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A paced exchange runs on a non-blocking socket through raw system calls,
// which do not wake Go's sysmon thread; that is sound only because none of
// them can block. It looks for the answer after firstPoll, then every pace,
// taking what gathered in the socket buffer, so a long answer costs a few
// wake-ups instead of one per HAProxy buffer (the package comment says
// why; figures in docs/results.md).
const (
	firstPoll = time.Millisecond
	pace      = 3 * time.Millisecond
)

// errAborted is a wait ended by the command's context; classify reports
// it as the context's error.
var errAborted = errors.New("aborted")

// dialPaced connects a non-blocking socket to path, retrying while the
// listen queue is full, until deadline or until ctx ends.
func dialPaced(ctx context.Context, path string, deadline time.Time) (*sock, error) {
	var sa unix.RawSockaddrUnix
	// The same rules as unix.SockaddrUnix: '@' names an abstract socket.
	n := len(path)
	if n == 0 || n >= len(sa.Path) {
		return nil, &os.SyscallError{Syscall: "connect", Err: unix.EINVAL}
	}
	sa.Family = unix.AF_UNIX
	for i := range n {
		sa.Path[i] = int8(path[i])
	}
	size := unsafe.Offsetof(sa.Path) + uintptr(n) + 1 // with the NUL
	if path[0] == '@' {
		sa.Path[0] = 0
		size-- // an abstract name is not NUL-terminated
	}
	fd, _, errno := unix.RawSyscall(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if errno != 0 {
		return nil, os.NewSyscallError("socket", errno)
	}
	s := &sock{fd: int(fd), deadline: deadline, nonblock: true, done: ctx.Done()}
	for {
		_, _, errno = unix.RawSyscall(unix.SYS_CONNECT, fd, uintptr(unsafe.Pointer(&sa)), size)
		switch errno {
		case 0:
			return s, nil
		case unix.EAGAIN: // the listen queue is full: HAProxy is busy
			if err := s.wait(firstPoll); err != nil {
				s.close()
				return nil, err
			}
			continue
		}
		s.close()
		return nil, &os.SyscallError{Syscall: "connect", Err: errno}
	}
}

// sendPaced is send on a non-blocking socket.
func (s *sock) sendPaced(b []byte) error {
	for len(b) > 0 {
		// MSG_NOSIGNAL: a peer that closed is an EPIPE, not a SIGPIPE.
		n, _, errno := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(s.fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)),
			unix.MSG_NOSIGNAL, 0, 0)
		switch errno {
		case 0:
			b = b[n:]
		case unix.EAGAIN:
			if err := s.wait(firstPoll); err != nil {
				return err
			}
		default:
			return &os.SyscallError{Syscall: "write", Err: errno}
		}
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SHUTDOWN, uintptr(s.fd), unix.SHUT_WR, 0); errno != 0 {
		return os.NewSyscallError("shutdown", errno)
	}
	return nil
}

// readPaced is Read on a non-blocking socket: whatever has arrived, else
// a wait of firstPoll (before the answer begins) or pace and a new look,
// until the deadline.
func (s *sock) readPaced(p []byte) (int, error) {
	for {
		// Looked at before each read too, not only in wait: a reader that
		// finds data every time it looks (slower than the sender) would
		// otherwise read on past the deadline as long as the answer lasts.
		if err := s.ended(); err != nil {
			return 0, err
		}
		n, _, errno := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(s.fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)),
			0, 0, 0)
		switch {
		case errno == unix.EAGAIN:
			if s.replaced() {
				return 0, errReplaced
			}
			d := pace
			if !s.started {
				d = firstPoll
			}
			if err := s.wait(d); err != nil {
				return 0, err
			}
			continue
		case errno != 0:
			return 0, &os.SyscallError{Syscall: "recvfrom", Err: errno}
		case n == 0:
			return 0, io.EOF
		}
		s.arrived(int(n))
		return int(n), nil
	}
}

// wait sleeps for d, or less to stop at the deadline: errTimeout when the
// deadline has passed, errAborted when the command's context has ended
// (looked at between sleeps, so at most d late). The sleep is a raw
// nanosleep that keeps the P, cheaper than a timer's thread wake-ups; the
// Gosched after it lets goroutines waiting for the P run between rounds
// and spares the reader sysmon's preemption.
func (s *sock) wait(d time.Duration) error {
	if err := s.ended(); err != nil {
		return err
	}
	ts := unix.NsecToTimespec(max(min(d, time.Until(s.deadline)), 0).Nanoseconds())
	// A signal ends the sleep early, and it is not resumed: the runtime
	// signals this thread when it needs the goroutine stopped (a
	// stop-the-world, a collection scanning its stack), which cannot
	// happen inside a raw call, and keeps signalling, every few
	// microseconds, until it does. Resumed after each signal, the sleep
	// lost as much time to the signals as it slept, and both sides waited
	// on each other for seconds to minutes (the agent's other goroutines
	// with them). Returning lets the next function entry stop it.
	unix.RawSyscall(unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
	runtime.Gosched()
	select {
	case <-s.done:
		return errAborted
	default:
		return nil
	}
}

// ended is errAborted once the command's context has ended, errTimeout
// once the deadline has passed, else nil.
func (s *sock) ended() error {
	select {
	case <-s.done:
		return errAborted
	default:
	}
	if time.Until(s.deadline) <= 0 {
		return errTimeout
	}
	return nil
}
