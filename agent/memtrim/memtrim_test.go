package memtrim

import (
	"context"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
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

// Requests in a row postpone the trim: each trim comes at least the quiet
// time after the last touch before it, and one follows the last touch.
func TestTrimOnlyAfterQuiet(t *testing.T) {
	const quiet = 100 * time.Millisecond
	var f fake
	f.reclaimable.Store(3 << 20)
	var mu sync.Mutex
	var releases []time.Time
	f.onRelease = func() { mu.Lock(); releases = append(releases, time.Now()); mu.Unlock() }
	tr := f.start(t, Options{Quiet: quiet, Every: time.Hour})
	var touches []time.Time
	for range 10 {
		touches = append(touches, time.Now())
		tr.Touch()
		time.Sleep(20 * time.Millisecond)
	}
	last := touches[len(touches)-1]
	testkit.WaitFor(t, 5*time.Second, "the trim after the last request", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(releases) > 0 && releases[len(releases)-1].After(last)
	})
	mu.Lock()
	defer mu.Unlock()
	for _, r := range releases {
		for _, to := range touches {
			if to.Before(r) && r.Sub(to) < quiet {
				t.Fatalf("a trim %v after a request (quiet %v)", r.Sub(to), quiet)
			}
		}
	}
	if len(releases) > 1 {
		t.Logf("%d trims: the machine stalled between requests", len(releases))
	}
}

// A trim that would return less than the minimum is not done.
func TestNoTrimBelowMinimum(t *testing.T) {
	var f fake
	f.reclaimable.Store(DefaultMinimum - 1)
	tr := f.start(t, Options{Quiet: 10 * time.Millisecond, Every: time.Hour})
	tr.Touch()
	testkit.WaitFor(t, 5*time.Second, "the check after the quiet", func() bool { return f.asked.Load() == 1 })
	if n := f.released.Load(); n != 0 {
		t.Fatalf("%d trims with %d bytes reclaimable", n, DefaultMinimum-1)
	}
	f.reclaimable.Store(DefaultMinimum)
	tr.Touch()
	testkit.WaitFor(t, 5*time.Second, "the trim at the minimum", func() bool { return f.released.Load() == 1 })
}

// Without activity the periodic check trims what built up.
func TestTrimPeriodically(t *testing.T) {
	var f fake
	f.reclaimable.Store(2 << 20)
	f.start(t, Options{Quiet: time.Hour, Every: 20 * time.Millisecond})
	testkit.WaitFor(t, 5*time.Second, "two periodic trims", func() bool { return f.released.Load() >= 2 })
}

// The periodic check waits while a quiet spell is pending, so requests
// are never followed by a collection in their midst.
func TestPeriodicWaitsForQuiet(t *testing.T) {
	var f fake
	f.reclaimable.Store(2 << 20)
	tr := f.start(t, Options{Quiet: 150 * time.Millisecond, Every: 10 * time.Millisecond})
	tr.Touch()
	// Give the Run loop the touch before counting.
	testkit.WaitFor(t, 5*time.Second, "the touch taken", func() bool { return len(tr.touched) == 0 })
	before := f.released.Load()
	time.Sleep(60 * time.Millisecond)
	if n := f.released.Load() - before; n > 1 {
		t.Fatalf("%d periodic trims while a quiet spell was pending", n)
	}
}

// Reclaimable sees garbage and a release returns it. The garbage stays
// under the runtime's 4 MiB heap goal: above it the runtime returns the
// excess itself.
func TestReclaimableAndRelease(t *testing.T) {
	runtime.GC()
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
	if after > before/4 {
		t.Fatalf("reclaimable %d bytes before the trim, %d after", before, after)
	}
	t.Logf("reclaimable %d KiB before, %d KiB after", before>>10, after>>10)
}

// liveHeap is what the last collection found alive.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// What sync.Pools hold comes back too (issue 23, item 1: after a flood
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
		pool.Put(b)
	}
	bufs = nil
	Release()
	if live := liveHeap(); live > base+n*size/4 {
		t.Fatalf("live heap %d KiB after a release, %d KiB before the pool was filled", live>>10, base>>10)
	}
	runtime.KeepAlive(&pool)
}
