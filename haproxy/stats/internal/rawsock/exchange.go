// Package rawsock is the socket engine under package stats: one request
// and its answer on a UNIX stream connection, made with raw system calls
// instead of net.Conn so that reading a long answer costs few thread
// wake-ups (see sock and paced.go).
//
// Why. HAProxy writes a long answer in pieces of its buffer size (16 KB)
// as fast as the reader takes them; a reader parked in Go's network poller
// wakes for every piece, and each wake-up costs more CPU than reading the
// piece. So the heartbeat's socket is non-blocking and every call on it is
// a raw system call: an ordinary one enters the scheduler's syscall state,
// which wakes Go's sysmon thread, and one that blocks keeps sysmon polling
// every 20 µs until it returns. The answer is looked at after 1 ms, then in
// rounds 3 ms apart, each taking what gathered in the socket buffer (about
// 200 KB: a 3 ms round about fills it), so a 1 MB answer costs a handful
// of wake-ups. Between rounds the reader sleeps in a raw nanosleep that
// keeps its P for 3 ms at most (a Go timer would free the P but wake three
// threads a round: the poller's, one looking for work, and sysmon), then
// yields it, so that other goroutines run between rounds and sysmon does
// not take the reader for one that never yields (it would send preemption
// signals every 10 ms, which cannot land in a raw call, and poll every
// 20 µs). Deadline and cancellation are checked between rounds.
//
// Other commands (the master CLI's during a reload, the status command's)
// use a blocking socket whose SO_SNDTIMEO and SO_RCVTIMEO carry what is
// left of the deadline, and read the answer as it comes.
package rawsock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// errTimeout is a socket time-out, reported as net reports one.
var errTimeout = os.ErrDeadlineExceeded

// Exchange connects to the UNIX socket at path, sends req, shuts its
// sending side down and appends what the peer sends to answer until it
// closes, at most limit bytes. ctx must have a deadline, which bounds the
// whole exchange; ctx ending interrupts it and the error wraps ctx's.
// paced reads the answer in rounds a few milliseconds apart (see
// dialPaced), for a periodic reader that values CPU over those
// milliseconds; otherwise the answer is read as it comes.
func Exchange(ctx context.Context, path string, req []byte, answer *bytes.Buffer, limit int64, paced bool) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		return errors.New("rawsock: the context has no deadline")
	}
	for {
		err := exchangeOnce(ctx, path, deadline, req, answer, limit, paced)
		if err != errReplaced {
			return err
		}
		// Nothing was read: the same request goes to the socket that the
		// path names now.
	}
}

// exchangeOnce is one connection of Exchange; errReplaced when the path
// came to name another socket while no answer had come.
func exchangeOnce(ctx context.Context, path string, deadline time.Time, req []byte, answer *bytes.Buffer, limit int64, paced bool) error {
	if err := ctx.Err(); err != nil {
		return classify(ctx, err)
	}
	// Taken before connecting: a socket bound over the path in between
	// costs one needless reconnection, never a missed one.
	file, known := fileOf(path)
	var conn *sock
	var err error
	if paced {
		conn, err = dialPaced(ctx, path, deadline)
	} else {
		conn, err = dial(path, deadline)
	}
	if err != nil {
		return classify(ctx, err)
	}
	defer conn.close()
	conn.opened = time.Now()
	if known {
		conn.watch(path, file)
	}
	if !paced {
		// Cancellation (not only the deadline) interrupts blocked I/O; a
		// paced sock never blocks and watches ctx itself.
		stop := conn.abortOn(ctx)
		defer stop()
	}
	if err := conn.send(req); err != nil {
		return classify(ctx, err)
	}
	_, err = answer.ReadFrom(io.LimitReader(conn, limit))
	if err == errReplaced {
		return err
	}
	if errors.Is(err, errTimeout) || errors.Is(err, errAborted) {
		err = conn.cutShort(err)
	}
	if err == nil {
		// A cancelled read ends as if the peer had closed.
		err = ctx.Err()
	}
	if err != nil {
		return classify(ctx, err)
	}
	return nil
}

// classify reports deadline and cancellation as such, so that callers can
// tell a hung socket from a refused one.
func classify(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	if errors.Is(err, errTimeout) {
		return err
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w (%v)", errTimeout, err)
	}
	return err
}
