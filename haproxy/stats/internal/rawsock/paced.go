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

// The heartbeat's `show stat` (a paced command) runs on a non-blocking
// socket through raw system calls, and waits between looks in a raw
// nanosleep of at most 3 ms (see wait).
//
// Why: a system call made the ordinary way (syscall.Syscall, file and
// network I/O) enters the scheduler's syscall state, which wakes Go's
// sysmon thread from its deep sleep; a call that blocks keeps its P in
// that state, and sysmon then polls every 20 µs until it returns. On this
// kind of VM each of those wake-ups is a context switch that costs more
// than reading a piece of the answer, and the heartbeat reads 1 MB every
// second. A raw call bypasses the scheduler, which is only legitimate for
// calls that cannot block: on a non-blocking UNIX socket, socket, connect
// (EAGAIN when the listen queue is full), send, shutdown, recv and close
// all return at once. The one exception, the sleep between looks, is
// bounded and explained at wait.
//
// Pacing: HAProxy writes a long answer in pieces of its buffer size as
// fast as the reader takes them. The reader looks first after firstPoll,
// then every pace takes whatever has gathered (up to a socket buffer,
// about 200 KB), so a 1 MB answer costs a handful of wake-ups instead of
// one per 16 KB piece. HAProxy writes `show stat` at about 60 KB/ms on
// the bench VM: a 3 ms pace about fills the buffer each round; a faster
// HAProxy only waits a little for room. The master CLI's answers and
// `show servers state` during a reload are not paced: they are read as
// they come (dial).
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
		n, _, errno := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(s.fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)),
			0, 0, 0)
		switch {
		case errno == unix.EAGAIN:
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
		s.started = true
		return int(n), nil
	}
}

// wait sleeps for d, or less to stop at the deadline: errTimeout when the
// deadline has passed, errAborted when the command's context has ended
// (looked at between sleeps, so at most d late).
//
// The sleep is a raw nanosleep, not a Go timer: the goroutine keeps its P
// for up to d (pace or firstPoll), which no other goroutine can use
// meanwhile (the other Ps can, and HAProxy has the CPU). A timer would
// free the P but cost three thread wake-ups per round: the thread parked
// in the network poller, a second one started to look for work, and
// sysmon, which sleeps only until the next timer; the running agent
// spends more CPU in those than in reading the answer. A signal (Go's
// preemption, the profiler) ends the nanosleep early; it goes on with
// what is left.
//
// After each sleep the goroutine yields its P (Gosched): goroutines that
// became runnable meanwhile (an API request, on GOMAXPROCS=1) run between
// rounds instead of after the whole answer, and the P is seen to switch
// goroutines. Without that, sysmon takes a read of 10 ms or more for a
// goroutine that never yields: it sends preemption signals, which cannot
// land in a raw system call and are sent again, and when its check finds
// the goroutine in an ordinary system call it hands the P to another
// thread and polls every 20 µs for the next millisecond.
func (s *sock) wait(d time.Duration) error {
	select {
	case <-s.done:
		return errAborted
	default:
	}
	left := time.Until(s.deadline)
	if left <= 0 {
		return errTimeout
	}
	ts := unix.NsecToTimespec(min(d, left).Nanoseconds())
	for {
		_, _, errno := unix.RawSyscall(unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), uintptr(unsafe.Pointer(&ts)), 0)
		if errno != unix.EINTR {
			break
		}
	}
	runtime.Gosched()
	select {
	case <-s.done:
		return errAborted
	default:
		return nil
	}
}
