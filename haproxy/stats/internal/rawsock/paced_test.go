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

// A paced wait ends when its thread is signalled, as the runtime signals
// a thread whose goroutine it needs stopped and keeps signalling until it
// stops: resumed after each signal, the sleep made no headway against a
// stream of them, and a garbage collection waited on a paced read for
// minutes in the unit tier beside busy loops.
func TestPacedWaitEndsOnSignals(t *testing.T) {
	s := &sock{fd: -1, deadline: time.Now().Add(time.Minute), nonblock: true, done: make(chan struct{})}
	tid := make(chan int)
	took := make(chan time.Duration)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tid <- unix.Gettid()
		start := time.Now()
		s.wait(200 * time.Millisecond)
		took <- time.Since(start)
	}()
	thread := <-tid
	// SIGURG is the runtime's own preemption signal: harmless to send.
	var stop atomic.Bool
	storm := make(chan struct{})
	go func() {
		defer close(storm)
		for !stop.Load() {
			unix.Tgkill(unix.Getpid(), thread, unix.SIGURG)
		}
	}()
	var d time.Duration
	select {
	case d = <-took:
	case <-time.After(10 * time.Second):
		stop.Store(true)
		<-storm
		d = <-took
		t.Fatalf("a 200 ms wait under a stream of signals ended after %v only once they stopped", d)
	}
	stop.Store(true)
	<-storm
	if d >= 200*time.Millisecond {
		t.Errorf("a 200 ms wait under a stream of signals took %v: the signals did not end it", d)
	}
}
