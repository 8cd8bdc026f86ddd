package rawsock

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

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

// A paced read looks at the deadline and the context before each read,
// not only when it has to wait: a reader that finds data every time it
// looks (a slow reader behind a faster HAProxy) would otherwise read past
// both for as long as the answer lasts.
func TestPacedReadEndsWithDataWaiting(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
	if _, err := unix.Write(fds[1], []byte("more of the answer")); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	s := &sock{fd: fds[0], deadline: time.Now().Add(-time.Millisecond), nonblock: true, done: done}
	defer s.close()
	p := make([]byte, 64)
	if n, err := s.Read(p); err != errTimeout {
		t.Errorf("past the deadline: %d bytes, %v; want a time-out", n, err)
	}
	s.deadline = time.Now().Add(time.Minute)
	close(done)
	if _, err := unix.Write(fds[1], []byte("and more")); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Read(p); err != errAborted {
		t.Errorf("context ended: %d bytes, %v; want the read aborted", n, err)
	}
}
