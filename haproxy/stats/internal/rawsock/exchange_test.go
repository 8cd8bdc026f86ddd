package rawsock_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amphora-agent/amphora-agent/haproxy/stats/haproxytest"
	"github.com/amphora-agent/amphora-agent/haproxy/stats/internal/rawsock"
)

// exchange sends cmd and a newline to path, with a deadline of 5 s when
// ctx has none, and returns the answer.
func exchange(ctx context.Context, path, cmd string, paced bool) (string, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	var buf bytes.Buffer
	err := rawsock.Exchange(ctx, path, []byte(cmd+"\n"), &buf, 64<<20, paced)
	return buf.String(), err
}

// timedOut reports a deadline reached, by the context or by the socket.
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
}

// An answer written in HAProxy-sized pieces arrives whole; one that keeps
// trickling past the deadline ends with a time-out at the deadline, not
// when the sender stops (the blocking read keeps the deadline).
func TestExchangeReadsPiecesUntilClose(t *testing.T) {
	piece := []byte(strings.Repeat("x", 16<<10))
	f := haproxytest.ServeFakeConn(t, fakePath(t), func(cmd string, conn net.Conn, release <-chan struct{}) {
		pieces := 40
		if cmd == "trickle" {
			pieces = 1 << 30
		}
		for range pieces {
			if _, err := conn.Write(piece); err != nil {
				return
			}
			select {
			case <-release:
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	for _, paced := range []bool{false, true} {
		out, err := exchange(context.Background(), f.Path, "show stat", paced)
		if err != nil || len(out) != 40*len(piece) {
			t.Fatalf("paced %v: %d bytes, %v; want %d", paced, len(out), err, 40*len(piece))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		start := time.Now()
		_, err = exchange(ctx, f.Path, "trickle", paced)
		cancel()
		// The answer never ends: any bound tells a read that keeps its
		// deadline from one that does not, and a generous one holds on
		// a machine that stalls the test for seconds.
		if took := time.Since(start); !timedOut(err) || took > 30*time.Second {
			t.Fatalf("paced %v: trickling answer: %v after %v, want a time-out at 300 ms", paced, err, took)
		}
	}
}

// The limit caps what is read.
func TestExchangeReadsAtMostLimit(t *testing.T) {
	f := haproxytest.ServeFake(t, fakePath(t), func(string) (string, bool) { return strings.Repeat("x", 1000), false })
	for _, paced := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var buf bytes.Buffer
		err := rawsock.Exchange(ctx, f.Path, []byte("show stat\n"), &buf, 100, paced)
		cancel()
		if err != nil || buf.Len() != 100 {
			t.Errorf("paced %v: %d bytes, %v; want the first 100", paced, buf.Len(), err)
		}
	}
}

// The paced (non-blocking) exchange keeps the blocking one's guarantees:
// the deadline and cancellation end a wait for an answer that does not
// come, a close without an answer is an empty answer, a refused or
// impossible connection is an error and no time-out.
func TestPacedExchange(t *testing.T) {
	f := haproxytest.ServeFake(t, fakePath(t), func(cmd string) (string, bool) {
		switch cmd {
		case "hang":
			return "", true
		case "nothing":
			return "", false
		}
		return "# pxname,svname,status\nfe,FRONTEND,OPEN\n", false
	})
	run := func(ctx context.Context, cmd string) (string, time.Duration, error) {
		start := time.Now()
		out, err := exchange(ctx, f.Path, cmd, true)
		return out, time.Since(start), err
	}

	// The end is compared with the deadline itself: a stopwatch started
	// after the context was made measures less than the time it allows.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	deadline, _ := ctx.Deadline()
	out, took, err := run(ctx, "hang")
	ended := time.Now()
	cancel()
	if !timedOut(err) || out != "" {
		t.Errorf("no answer: %q, %v; want a time-out", out, err)
	}
	if ended.Before(deadline) || took > 2*time.Second {
		t.Errorf("no answer: ended %v before the deadline, after %v; want at the 200 ms deadline", deadline.Sub(ended), took)
	}

	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	out, took, err = run(ctx, "hang")
	if !errors.Is(err, context.Canceled) || out != "" || took > 2*time.Second {
		t.Errorf("cancelled: %q, %v after %v; want context.Canceled at once", out, err, took)
	}

	if out, _, err = run(context.Background(), "nothing"); err != nil || out != "" {
		t.Errorf("closed without answering: %q, %v; want an empty answer", out, err)
	}
	if out, _, err = run(context.Background(), "show stat"); err != nil || out != "# pxname,svname,status\nfe,FRONTEND,OPEN\n" {
		t.Errorf("show stat: %q, %v", out, err)
	}

	dir := filepath.Dir(f.Path)
	for _, path := range []string{filepath.Join(dir, "missing.sock"), "", "/" + strings.Repeat("x", 200)} {
		_, err := exchange(context.Background(), path, "show stat", true)
		var se *os.SyscallError
		if !errors.As(err, &se) || se.Syscall != "connect" || timedOut(err) {
			t.Errorf("socket %q: %v, want a connect error", path, err)
		}
	}
}

// A listen queue that is full (HAProxy busy accepting) makes a
// non-blocking connect fail with EAGAIN: the paced dial tries again until
// the deadline instead of failing at once.
func TestPacedConnectWaitsForFullBacklog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	lfd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(lfd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(lfd)
		t.Fatal(err)
	}
	// Backlog 0: the kernel queues one connection, the next finds it full.
	if err := unix.Listen(lfd, 0); err != nil {
		unix.Close(lfd)
		t.Fatal(err)
	}
	lf := os.NewFile(uintptr(lfd), path)
	ln, err := net.FileListener(lf) // a dup: the backlog stays 0
	lf.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	first, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { first.Close() })
	// The queue is full now: a paced dial must wait for room.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	deadline, _ := ctx.Deadline()
	_, err = exchange(ctx, path, "show stat", true)
	cancel()
	if early := time.Until(deadline); !timedOut(err) || early > 0 {
		t.Fatalf("full listen queue until the deadline: %v, %v before the deadline; want a time-out at 200 ms", err, early)
	}

	// Accepting the queued connection while the dial waits makes room:
	// the dial gets through and its command is answered.
	served := make(chan error, 1)
	time.AfterFunc(50*time.Millisecond, func() {
		c, err := ln.Accept() // the queued one
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		c, err = ln.Accept() // the paced one
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		line := make([]byte, 64)
		n, _ := c.Read(line)
		if string(line[:n]) != "show stat\n" {
			served <- errors.New("command " + string(line[:n]))
			return
		}
		_, err = c.Write([]byte("answer\n"))
		served <- err
	})
	out, err := exchange(context.Background(), path, "show stat", true)
	if err != nil || out != "answer\n" {
		t.Fatalf("after room was made: %q, %v", out, err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

// A reloading HAProxy master that cannot take the stats socket over from
// its worker binds a new socket and renames it over the path. A read
// already connected to the old socket, which no answer comes from, goes
// to the new one instead of waiting for its deadline; both engines.
func TestExchangeFollowsReplacedSocket(t *testing.T) {
	path := fakePath(t)
	accepted := make(chan struct{}, 2)
	haproxytest.ServeFakeConn(t, path, func(_ string, _ net.Conn, release <-chan struct{}) {
		accepted <- struct{}{}
		<-release // a worker that took the connection and stalls
	})
	type result struct {
		paced bool
		out   string
		err   error
	}
	results := make(chan result, 2)
	for _, paced := range []bool{false, true} {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			out, err := exchange(ctx, path, "show stat", paced)
			results <- result{paced, out, err}
		}()
	}
	for range 2 {
		select {
		case <-accepted:
		case r := <-results:
			t.Fatalf("paced %v: %q, %v before the socket was replaced", r.paced, r.out, r.err)
		}
	}
	tmp := path + ".new"
	haproxytest.ServeFake(t, tmp, func(cmd string) (string, bool) { return "answer to " + cmd + "\n", false })
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if r := <-results; r.err != nil || r.out != "answer to show stat\n" {
			t.Errorf("paced %v: %q, %v; want the new socket's answer", r.paced, r.out, r.err)
		}
	}
}

// fakePath is where a test's fake stats socket listens.
func fakePath(t *testing.T) string { return filepath.Join(haproxytest.ShortDir(t), "s.sock") }
