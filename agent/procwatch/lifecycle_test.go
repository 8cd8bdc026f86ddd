package procwatch

import (
	"context"
	"errors"
	"io"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

func startChild(t *testing.T, args ...string) *Process {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := WatchChild(cmd)
	t.Cleanup(func() { Kill(p, time.Second) })
	return p
}

func TestStopEscalatesToKill(t *testing.T) {
	// A child that ignores SIGTERM (an ignored signal survives exec) is
	// killed after the grace period. It says when the trap is in place.
	cmd := exec.Command("sh", "-c", "trap '' TERM; echo ready; exec sleep 30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := WatchChild(cmd)
	t.Cleanup(func() { Kill(p, time.Second) })
	line := make([]byte, 6)
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "ready\n" {
		t.Fatalf("child not ready: %q %v", line, err)
	}
	start := time.Now()
	if !Stop(p, 300*time.Millisecond) {
		t.Fatal("Stop did not end a process that ignores SIGTERM")
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("SIGKILL came after %v, before the grace period", took)
	}
	// A well-behaved child ends on SIGTERM.
	q := startChild(t, "sleep", "30")
	if !Stop(q, 5*time.Second) || q.Status != "killed by signal terminated" {
		t.Fatalf("status %q", q.Status)
	}
}

func TestWaitReady(t *testing.T) {
	p := startChild(t, "sleep", "30")
	calls := 0
	err := WaitReady(context.Background(), p, "daemon", 5*time.Millisecond, 10*time.Millisecond, time.After,
		func() bool { calls++; return calls >= 3 }, func() error { return errors.New("timeout") })
	if err != nil || calls != 3 {
		t.Fatalf("ready after %d polls: %v", calls, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = WaitReady(ctx, p, "daemon", 5*time.Millisecond, 0, time.After, func() bool { return false }, func() error { return errors.New("not ready") })
	if err == nil || err.Error() != "not ready" {
		t.Fatalf("never ready: %v", err)
	}
	dead := startChild(t, "true")
	<-dead.Exited
	err = WaitReady(context.Background(), dead, "daemon", 5*time.Millisecond, 0, time.After, func() bool { return false }, nil)
	if err == nil || err.Error() != "daemon exit status 0" {
		t.Fatalf("exited process: %v", err)
	}
}

func TestRespawnerRestartsUntilAStartSucceeds(t *testing.T) {
	var mu sync.Mutex
	var starts atomic.Int32
	done := make(chan struct{})
	defer close(done)
	restarted := make(chan *Process, 1)
	r := testRespawner(&mu, done, func(context.Context) (*Process, error) {
		// The first two starts fail; the third works.
		if starts.Add(1) < 3 {
			return nil, errors.New("cannot start")
		}
		return startChild(t, "sleep", "30"), nil
	})
	r.Restarted = func(started, _ *Process, _ int) { restarted <- started }
	first := startChild(t, "true")
	go r.Watch(first)
	select {
	case p := <-restarted:
		if !p.Alive() || starts.Load() != 3 {
			t.Fatalf("restarted after %d starts, alive %v", starts.Load(), p.Alive())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("never restarted")
	}
}

// TestRespawnerBacksOffOnTheDefaultSeries: a daemon that keeps failing
// to start is started again at once twice, then after 2, 4, 8 and 16 s,
// then every 30 s; the waits are asked of the Respawner's clock, which
// lets them pass at once.
func TestRespawnerBacksOffOnTheDefaultSeries(t *testing.T) {
	var mu sync.Mutex
	done := make(chan struct{})
	defer close(done)
	var clock testkit.Delays
	var starts int
	r := testRespawner(&mu, done, func(context.Context) (*Process, error) {
		if starts++; starts < 9 {
			return nil, errors.New("cannot start")
		}
		return Failed("started"), nil
	})
	r.Backoff, r.After = DefaultBackoff, clock.After
	r.Watch(Failed("crashed"))
	s := time.Second
	want := []time.Duration{0, 0, 2 * s, 4 * s, 8 * s, 16 * s, 30 * s, 30 * s, 30 * s}
	if got := clock.Asked(); !slices.Equal(got, want) || starts != 9 {
		t.Fatalf("%d starts after the delays %v, want 9 after %v", starts, got, want)
	}
}

// TestRespawnerStartsNothingOnceDone: a death seen after supervision
// ended (Done closed) starts nothing, even when both are ready at once
// (select alone picks either; this failed about half the time per try).
func TestRespawnerStartsNothingOnceDone(t *testing.T) {
	dead := startChild(t, "true")
	<-dead.Exited
	var mu sync.Mutex
	var starts atomic.Int32
	for range 100 {
		done := make(chan struct{})
		close(done)
		r := testRespawner(&mu, done, func(context.Context) (*Process, error) {
			starts.Add(1)
			return nil, errors.New("must not start")
		})
		r.Watch(dead)
	}
	if n := starts.Load(); n != 0 {
		t.Fatalf("%d starts after supervision ended", n)
	}
}

// testRespawner is a Respawner that restarts at once, for any death, with
// start, and reports nothing.
func testRespawner(mu *sync.Mutex, done <-chan struct{}, start func(context.Context) (*Process, error)) *Respawner {
	return &Respawner{
		Lock: mu, Done: done,
		Backoff:      Backoff{Count: 5, Interval: time.Millisecond, Max: time.Millisecond, Stable: time.Hour},
		Respawns:     &Respawns{},
		StartTimeout: time.Second,
		Dead:         func(*Process) bool { return true },
		Wanted:       func() bool { return true },
		Start:        start,
		Died:         func(*Process, time.Duration, time.Duration, int) {},
		Restarted:    func(*Process, *Process, int) {},
		Failed:       func(error) {},
	}
}
