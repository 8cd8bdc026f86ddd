package stats

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The paced (non-blocking) exchange keeps the blocking one's guarantees:
// the deadline and cancellation end a wait for an answer that does not
// come, a close without an answer is an empty answer, a refused or
// impossible connection is an error and no time-out.
func TestPacedCommand(t *testing.T) {
	f := newFakeSocket(t, func(cmd string) (string, bool) {
		switch cmd {
		case "hang":
			return "", true
		case "nothing":
			return "", false
		}
		return "# pxname,svname,status\nfe,FRONTEND,OPEN\n", false
	})
	var buf bytes.Buffer
	run := func(ctx context.Context, cmd string) (string, error, time.Duration) {
		start := time.Now()
		out, err := commandInto(ctx, f.path, cmd, &buf, true)
		return string(out), err, time.Since(start)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	out, err, took := run(ctx, "hang")
	cancel()
	if !Timeout(err) || out != "" {
		t.Errorf("no answer: %q, %v; want a time-out", out, err)
	}
	if took < 200*time.Millisecond || took > 2*time.Second {
		t.Errorf("no answer: ended after %v, want at the 200 ms deadline", took)
	}

	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	out, err, took = run(ctx, "hang")
	if !errors.Is(err, context.Canceled) || out != "" || took > 2*time.Second {
		t.Errorf("cancelled: %q, %v after %v; want context.Canceled at once", out, err, took)
	}

	if out, err, _ = run(context.Background(), "nothing"); err != nil || out != "" {
		t.Errorf("closed without answering: %q, %v; want an empty answer", out, err)
	}
	rows, err := ShowStatAppend(context.Background(), f.path, All, All, All, &buf, nil)
	if err != nil || len(rows) != 1 || rows[0].SvName() != Frontend {
		t.Errorf("show stat: %d rows, %v", len(rows), err)
	}

	dir := filepath.Dir(f.path)
	for _, path := range []string{filepath.Join(dir, "missing.sock"), "", "/" + strings.Repeat("x", 200)} {
		_, err := commandInto(context.Background(), path, "show stat", &buf, true)
		var se *os.SyscallError
		if !errors.As(err, &se) || se.Syscall != "connect" || Timeout(err) {
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
	var buf bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	start := time.Now()
	_, err = commandInto(ctx, path, "show stat", &buf, true)
	cancel()
	if took := time.Since(start); !Timeout(err) || took < 200*time.Millisecond {
		t.Fatalf("full listen queue until the deadline: %v after %v, want a time-out at 200 ms", err, took)
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
	out, err := commandInto(context.Background(), path, "show stat", &buf, true)
	if err != nil || string(out) != "answer\n" {
		t.Fatalf("after room was made: %q, %v", out, err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

// Each wait of a paced read hands the P over to goroutines waiting for
// it: on one P, a long answer must not hold the rest of the agent up
// until sysmon preempts the reader (10 ms and more).
func TestPacedWaitYields(t *testing.T) {
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	var runs atomic.Int64
	var stop atomic.Bool
	defer stop.Store(true)
	started := make(chan struct{})
	go func() {
		close(started)
		for !stop.Load() {
			runs.Add(1)
			runtime.Gosched()
		}
	}()
	<-started
	s := &sock{fd: -1, deadline: time.Now().Add(time.Minute), nonblock: true, done: make(chan struct{})}
	const waits = 20
	before := runs.Load()
	for range waits {
		if err := s.wait(time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	// The other goroutine runs at about each yield; without yielding, only
	// at sysmon's preemptions (10 ms apart: about 2 in these 20 ms). Half
	// the waits tells the two apart and leaves room for the runtime's own
	// goroutines (GC workers, timers, -race), which take some turns on a
	// loaded machine (18 of 20 was seen).
	if got := runs.Load() - before; got < waits/2 {
		t.Errorf("another runnable goroutine ran %d times during %d waits, want at least %d", got, waits, waits/2)
	}
}
