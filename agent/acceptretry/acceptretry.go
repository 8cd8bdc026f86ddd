// Package acceptretry keeps an accept loop alive through failed accepts.
//
// accept(2) fails for reasons that pass: the process or the system is out
// of file descriptors (EMFILE, ENFILE), or of memory for a socket. A server
// that returns on the first such error stops serving for good although the
// next accept a moment later would succeed. The listener here waits and
// tries again instead, 5 ms after the first failure, doubling up to 1 s
// (net/http's Server.Serve waits the same), and gives up only when it is
// closed.
package acceptretry

import (
	"errors"
	"net"
	"sync"
	"time"
)

// The waits between failed accepts: the first, and the longest.
const (
	FirstWait = 5 * time.Millisecond
	MaxWait   = time.Second
)

// Listener is a net.Listener whose Accept fails only once the listener is
// closed.
type Listener struct {
	net.Listener
	retrying func(err error, wait time.Duration)
	done     chan struct{}
	once     sync.Once
}

// Wrap returns ln retrying its failed accepts. retrying, when not nil, is
// told of each failure and how long the listener waits before the next
// try (to log it: at most one call per MaxWait once failures persist).
func Wrap(ln net.Listener, retrying func(err error, wait time.Duration)) *Listener {
	return &Listener{Listener: ln, retrying: retrying, done: make(chan struct{})}
}

// Accept waits for the next connection. Its error is net.ErrClosed, or
// whatever the wrapped listener returns once closed.
func (l *Listener) Accept() (net.Conn, error) {
	var wait time.Duration
	for {
		conn, err := l.Listener.Accept()
		if err == nil {
			return conn, nil
		}
		select {
		case <-l.done:
			return nil, err
		default:
		}
		if errors.Is(err, net.ErrClosed) {
			return nil, err
		}
		wait = min(max(2*wait, FirstWait), MaxWait)
		if l.retrying != nil {
			l.retrying(err, wait)
		}
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-l.done:
			timer.Stop()
			return nil, net.ErrClosed
		}
	}
}

// Close closes the wrapped listener and ends a wait between tries.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}
