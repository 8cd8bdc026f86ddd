// Package rawsock is the socket engine under package stats: one request
// and its answer on a UNIX stream connection, made with raw system calls
// instead of net.Conn so that reading a long answer costs few thread
// wake-ups (see sock and paced.go).
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
	if errors.Is(err, errTimeout) {
		err = conn.timedOut(err)
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
