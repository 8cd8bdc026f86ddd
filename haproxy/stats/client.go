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
	"os"
	"strings"
	"time"

	"github.com/amphora-agent/amphora-agent/haproxy/stats/internal/rawsock"
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
		errors.Is(err, os.ErrDeadlineExceeded)
}

// Command sends one command to the UNIX socket at socketPath and returns
// HAProxy's whole answer, unmodified. The connection is closed when ctx ends
// or its deadline (DefaultTimeout when ctx has none) passes. cmd must be a
// single line; HAProxy's own `;` separator is allowed.
func Command(ctx context.Context, socketPath, cmd string) ([]byte, error) {
	return command(ctx, socketPath, cmd, new(bytes.Buffer), false)
}

// command is Command reading the answer into buf (reset first); paced
// reads it in rounds (see rawsock.Exchange).
func command(ctx context.Context, socketPath, cmd string, buf *bytes.Buffer, paced bool) ([]byte, error) {
	buf.Reset()
	fail := func(err error) ([]byte, error) { return nil, &Error{Socket: socketPath, Command: cmd, Err: err} }
	if strings.ContainsAny(cmd, "\r\n") {
		return fail(errors.New("command contains a line break"))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	// The stats socket closes after answering one command; the master CLI
	// waits for more input unless the client shuts its side down, which
	// Exchange does.
	if err := rawsock.Exchange(ctx, socketPath, []byte(cmd+"\n"), buf, MaxAnswer+1, paced); err != nil {
		return fail(err)
	}
	if buf.Len() > MaxAnswer {
		return fail(ErrTooLarge)
	}
	return buf.Bytes(), nil
}
