package memtrim

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/tick"
)

// fake counts what a Trimmer asks and does.
type fake struct {
	reclaimable atomic.Uint64
	asked       atomic.Int32
	released    atomic.Int32
	onRelease   func()
}

func (f *fake) start(t *testing.T, o Options) *Trimmer {
	t.Helper()
	// The periodic check ticks at this process's random phase within a
	// second of the bubble's start; starting on an instant of the period
	// puts its first tick a whole period away from the test's steps.
	time.Sleep(time.Until(tick.Next(time.Now(), o.Every)))
	o.Reclaimable = func() uint64 { f.asked.Add(1); return f.reclaimable.Load() }
	o.Release = func() {
		if f.onRelease != nil {
			f.onRelease()
		}
		f.released.Add(1)
	}
	tr := New(o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tr.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return tr
}

// The scheduling tests run in a synctest bubble: time there is fake and
// moves only when every goroutine of the bubble waits, so a sleep in the
// test advances the Trimmer's timers to the exact instant and
// synctest.Wait lets its loop finish reacting before the test looks.

// Requests in a row postpone the trim: none comes while they arrive, and
// exactly one comes the quiet time after the last.
func TestTrimOnlyAfterQuiet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const quiet = 100 * time.Millisecond
		var f fake
		f.reclaimable.Store(3 << 20)
		var mu sync.Mutex // a timer's wake-up orders nothing for the race detector
		var releases []time.Time
		f.onRelease = func() { mu.Lock(); releases = append(releases, time.Now()); mu.Unlock() }
		trims := func() []time.Time { mu.Lock(); defer mu.Unlock(); return slices.Clone(releases) }
		tr := f.start(t, Options{Quiet: quiet, Every: time.Hour})
		var last time.Time
		for range 10 {
			last = time.Now()
			tr.Touch()
			time.Sleep(quiet / 5)
		}
		synctest.Wait()
		if r := trims(); len(r) != 0 {
			t.Fatalf("trims at %v while requests kept coming", r)
		}
		time.Sleep(quiet)
		synctest.Wait()
		if r := trims(); len(r) != 1 || !r[0].Equal(last.Add(quiet)) {
			t.Fatalf("trims at %v, want one at %v (the quiet time after the last request)", r, last.Add(quiet))
		}
	})
}

// A trim that would return less than the minimum is not done.
func TestNoTrimBelowMinimum(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const quiet = 10 * time.Millisecond
		var f fake
		f.reclaimable.Store(DefaultMinimum - 1)
		tr := f.start(t, Options{Quiet: quiet, Every: time.Hour})
		tr.Touch()
		time.Sleep(quiet)
		synctest.Wait()
		if a, n := f.asked.Load(), f.released.Load(); a != 1 || n != 0 {
			t.Fatalf("%d checks and %d trims with %d bytes reclaimable, want 1 and 0", a, n, DefaultMinimum-1)
		}
		f.reclaimable.Store(DefaultMinimum)
		tr.Touch()
		time.Sleep(quiet)
		synctest.Wait()
		if n := f.released.Load(); n != 1 {
			t.Fatalf("%d trims at the minimum, want 1", n)
		}
	})
}

// Without activity the periodic check trims what built up, once a period.
func TestTrimPeriodically(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const every = 20 * time.Millisecond
		var f fake
		f.reclaimable.Store(2 << 20)
		f.start(t, Options{Quiet: time.Hour, Every: every})
		time.Sleep(2 * every)
		synctest.Wait()
		if n := f.released.Load(); n != 2 {
			t.Fatalf("%d trims in two periods, want 2", n)
		}
	})
}

// The periodic check waits while a quiet spell is pending, so requests
// are never followed by a collection in their midst.
func TestPeriodicWaitsForQuiet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const quiet, every = 150 * time.Millisecond, 10 * time.Millisecond
		var f fake
		f.reclaimable.Store(2 << 20)
		tr := f.start(t, Options{Quiet: quiet, Every: every})
		tr.Touch()
		time.Sleep(quiet - time.Millisecond)
		synctest.Wait()
		if n := f.released.Load(); n != 0 {
			t.Fatalf("%d periodic trims while a quiet spell was pending", n)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if n := f.released.Load(); n == 0 {
			t.Fatal("no trim once the quiet spell ended")
		}
	})
}

// Reclaimable sees garbage and a release returns it. The garbage stays
// under the runtime's 4 MiB heap goal: above it the runtime returns the
// excess itself.
func TestReclaimableAndRelease(t *testing.T) {
	// No collection but the trim's own: one set off by the allocations
	// below, and the scavenger after it, would return the dropped memory
	// before it is measured (under 1 MiB left of 3 once, under -race).
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	runtime.GC()
	const dropped = 12 * 256 << 10
	var keep [][]byte
	for range 12 {
		keep = append(keep, make([]byte, 256<<10))
	}
	runtime.KeepAlive(keep)
	keep = nil
	before := Reclaimable()
	if before < 2<<20 {
		t.Fatalf("reclaimable after dropping 3 MiB: %d bytes", before)
	}
	tr := New(Options{})
	tr.try()
	after := Reclaimable()
	// What the trim took back is measured against what the test dropped,
	// not against what is left: the room in partly used spans stays
	// reclaimable (1.2 MiB of 4.4 once, under -race -shuffle beside busy
	// loops).
	if after > before || before-after < dropped*3/4 {
		t.Fatalf("reclaimable %d bytes before the trim, %d after: want the %d dropped (at least 3/4) gone", before, after, dropped)
	}
	t.Logf("reclaimable %d KiB before, %d KiB after", before>>10, after>>10)
}

// liveHeap is what the last collection found alive.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// What sync.Pools hold comes back too (after a flood
// of scrapes, net/http's pooled buffers kept the agent 5 MB over idle).
func TestReleaseEmptiesPools(t *testing.T) {
	var pool sync.Pool
	runtime.GC()
	runtime.GC()
	base := liveHeap()
	const n, size = 64, 64 << 10 // 4 MiB
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	for _, b := range bufs {
		pool.Put(&b) // a pointer: a slice would be boxed in a new allocation
	}
	bufs = nil
	Release()
	if live := liveHeap(); live > base+n*size/4 {
		t.Fatalf("live heap %d KiB after a release, %d KiB before the pool was filled", live>>10, base>>10)
	}
	runtime.KeepAlive(&pool)
}
