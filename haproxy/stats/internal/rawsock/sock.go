package rawsock

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sock is one UNIX stream connection to a HAProxy socket, blocking (see
// dial) or non-blocking for paced reads (see dialPaced). It is not a
// net.Conn because a reader parked in Go's poller wakes for every piece of
// a long answer, which costs more CPU than reading it; a blocking recv
// keeps exact time-outs through SO_SNDTIMEO and SO_RCVTIMEO, and
// cancellation shuts the socket down.
type sock struct {
	fd       int
	deadline time.Time

	mu     sync.Mutex // abort against close
	closed bool

	started bool // the answer has begun

	// What has come so far, for the error of an answer that did not end
	// in time: a stalled HAProxy and a slow trickle differ.
	opened time.Time
	got    int64
	lastAt time.Time

	// The socket file connected to, looked at until the answer begins
	// (see watch); path is empty when it is not.
	path     string
	file     fileID
	nextLook time.Time

	// The non-blocking (paced) sock's state.
	nonblock bool
	done     <-chan struct{} // the command's ctx.Done
}

// dial connects to path, blocking at most until deadline.
func dial(path string, deadline time.Time) (*sock, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	s := &sock{fd: fd, deadline: deadline}
	if err := s.timeout(unix.SO_SNDTIMEO); err != nil {
		s.close()
		return nil, err
	}
	sa := &unix.SockaddrUnix{Name: path}
	for {
		err = unix.Connect(fd, sa)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		s.close()
		if err == unix.EAGAIN { // the listen queue stayed full until the deadline
			return nil, errTimeout
		}
		return nil, &os.SyscallError{Syscall: "connect", Err: err}
	}
	return s, nil
}

// timeout sets opt (SO_SNDTIMEO or SO_RCVTIMEO) to what is left until the
// deadline; errTimeout when nothing is.
func (s *sock) timeout(opt int) error {
	left := time.Until(s.deadline)
	if left <= 0 {
		return errTimeout
	}
	return s.setTimeout(opt, left)
}

// setTimeout sets opt (SO_SNDTIMEO or SO_RCVTIMEO) to d, at least 1 µs.
func (s *sock) setTimeout(opt int, d time.Duration) error {
	// Zero would mean no time-out at all.
	tv := unix.NsecToTimeval(max(d.Nanoseconds(), int64(time.Microsecond)))
	if err := unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, opt, &tv); err != nil {
		return os.NewSyscallError("setsockopt", err)
	}
	return nil
}

// send writes all of b, then shuts the sending side down: the master CLI
// waits for more commands unless the client does.
func (s *sock) send(b []byte) error {
	if s.nonblock {
		return s.sendPaced(b)
	}
	if err := s.timeout(unix.SO_SNDTIMEO); err != nil {
		return err
	}
	for len(b) > 0 {
		n, err := unix.Write(s.fd, b)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return errTimeout
		case err != nil:
			return &os.SyscallError{Syscall: "write", Err: err}
		}
		b = b[n:]
	}
	if err := unix.Shutdown(s.fd, unix.SHUT_WR); err != nil {
		return os.NewSyscallError("shutdown", err)
	}
	return nil
}

// Read returns what HAProxy sent next (io.EOF once it closed), blocking
// until something came (a non-blocking sock: see readPaced).
func (s *sock) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if s.nonblock {
		return s.readPaced(p)
	}
	for {
		left := time.Until(s.deadline)
		if left <= 0 {
			return 0, errTimeout
		}
		watching := s.path != "" && !s.started
		if watching {
			// Wake up in time to look at the path again.
			left = min(left, time.Until(s.nextLook))
		}
		if err := s.setTimeout(unix.SO_RCVTIMEO, left); err != nil {
			return 0, err
		}
		n, err := s.recv(p)
		if watching && err == errTimeout && time.Now().Before(s.deadline) {
			if s.replaced() {
				return 0, errReplaced
			}
			continue
		}
		if n > 0 {
			s.arrived(n)
		}
		return n, err
	}
}

// arrived counts n bytes of the answer read now.
func (s *sock) arrived(n int) {
	s.started = true
	s.got += int64(n)
	s.lastAt = time.Now()
}

// cutShort adds to a time-out or a cancellation what had come of the
// answer by then.
func (s *sock) cutShort(err error) error {
	if s.got == 0 {
		return fmt.Errorf("%w: no answer in %v", err, time.Since(s.opened).Round(time.Millisecond))
	}
	return fmt.Errorf("%w: %d bytes of the answer in %v, the last %v ago", err, s.got,
		time.Since(s.opened).Round(time.Millisecond), time.Since(s.lastAt).Round(time.Millisecond))
}

// recv is one blocking recvfrom: io.EOF when HAProxy closed, errTimeout
// when SO_RCVTIMEO ran out with nothing read.
func (s *sock) recv(p []byte) (int, error) {
	for {
		n, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(s.fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)),
			0, 0, 0)
		switch {
		case errno == unix.EINTR: // a socket with a time-out is not restarted
			continue
		case errno == unix.EAGAIN:
			return 0, errTimeout
		case errno != 0:
			return 0, &os.SyscallError{Syscall: "recvfrom", Err: errno}
		case n == 0:
			return 0, io.EOF
		}
		return int(n), nil
	}
}

// abortOn shuts the socket down when ctx ends, which wakes a blocked
// recv; the caller tells that from HAProxy closing by ctx.Err(). The
// returned stop must be called before close.
func (s *sock) abortOn(ctx context.Context) (stop func() bool) {
	return context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.closed {
			unix.Shutdown(s.fd, unix.SHUT_RDWR)
		}
	})
}

func (s *sock) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	if s.nonblock {
		// Closing a socket without SO_LINGER does not block.
		unix.RawSyscall(unix.SYS_CLOSE, uintptr(s.fd), 0, 0)
		return
	}
	unix.Close(s.fd)
}
