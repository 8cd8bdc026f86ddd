// Package memtrim hands heap memory the agent has freed back to the
// kernel once the agent is quiet: Go's runtime keeps a few MiB of freed
// pages mapped after a burst of requests. A trim is two collections (a
// sync.Pool survives one) and debug.FreeOSMemory; it costs a millisecond
// or two, so it runs only after a quiet moment when enough would return.
//
// Go keeps freed heap mapped up to its heap goal (never below 4 MiB), so
// after a burst of controller requests or scrapes an idle agent would go
// on holding memory it no longer uses. The agent touches the Trimmer on
// every API request, every answer of the metrics endpoint and at the end
// of the restore: a trim is tried DefaultQuiet after the last touch, and
// DefaultEvery without any, each time only when at least DefaultMinimum
// would come back. With debug logging each trim is logged as "returned
// freed memory".
package memtrim

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/tick"
)

// Defaults of Options.
const (
	// DefaultQuiet is how long after the last activity a trim is tried:
	// the controller sends its requests for one change back to back.
	DefaultQuiet = 2 * time.Second
	// DefaultEvery is how often a trim is tried without activity; the
	// heartbeats' garbage builds up slowly.
	DefaultEvery = time.Minute
	// DefaultMinimum is how much memory a trim must be able to return.
	DefaultMinimum = 1 << 20
)

// Options configure a Trimmer; zero fields take the defaults.
type Options struct {
	Quiet   time.Duration
	Every   time.Duration
	Minimum uint64
	// Reclaimable reports how much heap memory a trim would return
	// (runtime/metrics by default).
	Reclaimable func() uint64
	// Release returns it (Release by default).
	Release func()
	// Trimmed, when set, hears about each trim: what was reclaimable.
	Trimmed func(reclaimable uint64)
}

// Trimmer decides when to trim; Run does it.
type Trimmer struct {
	o       Options
	touched chan struct{}
}

// New returns a Trimmer; nothing happens until Run.
func New(o Options) *Trimmer {
	if o.Quiet <= 0 {
		o.Quiet = DefaultQuiet
	}
	if o.Every <= 0 {
		o.Every = DefaultEvery
	}
	if o.Minimum == 0 {
		o.Minimum = DefaultMinimum
	}
	if o.Reclaimable == nil {
		o.Reclaimable = Reclaimable
	}
	if o.Release == nil {
		o.Release = Release
	}
	return &Trimmer{o: o, touched: make(chan struct{}, 1)}
}

// Touch records activity (the end of a request): a trim is tried once
// the agent has been quiet for Options.Quiet. It never blocks.
func (t *Trimmer) Touch() {
	select {
	case t.touched <- struct{}{}:
	default:
	}
}

// Run trims after each quiet spell that follows activity and on the
// agent's shared instants every Options.Every, until ctx ends.
func (t *Trimmer) Run(ctx context.Context) {
	quiet := time.NewTimer(time.Hour)
	quiet.Stop()
	defer quiet.Stop()
	every := tick.NewTicker(t.o.Every)
	defer every.Stop()
	active := false // a quiet spell is being waited for
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.touched:
			active = true
			quiet.Reset(t.o.Quiet)
		case <-quiet.C:
			active = false
			t.try()
		case <-every.C:
			every.Next()
			if !active {
				t.try()
			}
		}
	}
}

// try trims when at least Options.Minimum would come back.
func (t *Trimmer) try() {
	n := t.o.Reclaimable()
	if n < t.o.Minimum {
		return
	}
	t.o.Release()
	if t.o.Trimmed != nil {
		t.o.Trimmed(n)
	}
}

// Release returns every free heap page to the kernel, the contents of
// sync.Pools included: the first collection moves them to the pools'
// victim caches, the second frees them.
func Release() {
	runtime.GC()
	debug.FreeOSMemory()
}

// Reclaimable is the heap memory a full collection and a release would
// return, as far as the runtime knows without collecting: every heap byte
// it keeps mapped (objects, dead or alive, the unused room in their spans,
// and free spans not yet returned) less what the last collection found
// alive.
func Reclaimable() uint64 {
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/gc/heap/live:bytes"},
	}
	metrics.Read(s)
	var mapped uint64
	for _, x := range s[:3] {
		if x.Value.Kind() == metrics.KindUint64 {
			mapped += x.Value.Uint64()
		}
	}
	var live uint64
	if s[3].Value.Kind() == metrics.KindUint64 {
		live = s[3].Value.Uint64()
	}
	if live >= mapped {
		return 0
	}
	return mapped - live
}
