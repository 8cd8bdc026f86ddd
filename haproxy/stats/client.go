// Package stats talks to HAProxy's UNIX command sockets: the per-LB stats
// socket (`stats socket ... level user`) and the master CLI (`-S`). Each
// command uses its own connection: write the command and a newline, shut
// down the sending side, read until HAProxy closes. Every connection is bounded by the context and by a
// deadline, so a wedged HAProxy cannot stall the caller.
package stats

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// DefaultTimeout bounds a command whose context has no deadline (upstream's
// VRRP check helper uses the same 5 s).
const DefaultTimeout = 5 * time.Second

// MaxAnswer caps the bytes read for one command. A `show stat` of an LB with
// 50 listeners and 10 000 members is about 4 MB.
const MaxAnswer = 64 << 20

var (
	// ErrNotCSV means a `show stat` answer was not HAProxy's CSV (for
	// example `Unknown command`, `Permission denied`, or nothing at all).
	ErrNotCSV = errors.New("answer is not HAProxy CSV")
	// ErrTooLarge means the answer exceeded MaxAnswer.
	ErrTooLarge = errors.New("answer too large")
	// ErrEmpty means HAProxy closed the connection without answering.
	ErrEmpty = errors.New("empty answer")
)

// Error is a failed command, naming the socket and the command.
type Error struct {
	Socket  string
	Command string
	Err     error
}

func (e *Error) Error() string {
	return fmt.Sprintf("haproxy socket %s: %q: %v", e.Socket, e.Command, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Timeout reports whether err is a deadline or cancellation rather than a
// refused or malformed answer.
func Timeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, errTimeout)
}

var errTimeout = errors.New("i/o timeout")

// Command sends one command to the UNIX socket at socketPath and returns
// HAProxy's whole answer, unmodified. The connection is closed when ctx ends
// or its deadline (DefaultTimeout when ctx has none) passes. cmd must be a
// single line; HAProxy's own `;` separator is allowed.
func Command(ctx context.Context, socketPath, cmd string) ([]byte, error) {
	return CommandInto(ctx, socketPath, cmd, new(bytes.Buffer))
}

// CommandInto is Command reading the answer into buf (reset first), so
// that a caller asking every few seconds reuses one buffer instead of
// growing a new one each time. The answer is buf's bytes.
func CommandInto(ctx context.Context, socketPath, cmd string, buf *bytes.Buffer) ([]byte, error) {
	return commandInto(ctx, socketPath, cmd, buf, false)
}

// commandInto is CommandInto; paced reads the answer in rounds on a
// non-blocking socket (see dialPaced), for readers that value CPU over
// the last milliseconds.
func commandInto(ctx context.Context, socketPath, cmd string, buf *bytes.Buffer, paced bool) ([]byte, error) {
	buf.Reset()
	out, err := command(ctx, socketPath, cmd, buf, paced)
	if err != nil {
		return nil, &Error{Socket: socketPath, Command: cmd, Err: err}
	}
	return out, nil
}

func command(ctx context.Context, socketPath, cmd string, buf *bytes.Buffer, paced bool) ([]byte, error) {
	if strings.ContainsAny(cmd, "\r\n") {
		return nil, errors.New("command contains a line break")
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	if err := ctx.Err(); err != nil {
		return nil, classify(ctx, err)
	}
	deadline, _ := ctx.Deadline()
	var conn *sock
	var err error
	if paced {
		conn, err = dialPaced(ctx, socketPath, deadline)
	} else {
		conn, err = dial(socketPath, deadline)
	}
	if err != nil {
		return nil, classify(ctx, err)
	}
	defer conn.close()
	if !paced {
		// Cancellation (not only the deadline) interrupts blocked I/O; a
		// paced sock never blocks and watches ctx itself.
		stop := conn.abortOn(ctx)
		defer stop()
	}

	// The stats socket closes after answering one command; the master CLI
	// waits for more input unless the client shuts its side down (send
	// does).
	if err := conn.send([]byte(cmd + "\n")); err != nil {
		return nil, classify(ctx, err)
	}
	n, err := buf.ReadFrom(io.LimitReader(conn, MaxAnswer+1))
	if err == nil {
		// A cancelled read ends as if HAProxy had closed.
		err = ctx.Err()
	}
	if err != nil {
		return nil, classify(ctx, err)
	}
	if n > MaxAnswer {
		return nil, ErrTooLarge
	}
	return buf.Bytes(), nil
}

// classify reports deadline and cancellation as such, so that callers can
// tell a hung socket from a refused one.
func classify(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w (%v)", errTimeout, err)
	}
	return err
}
