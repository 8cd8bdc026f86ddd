package cloud

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// Traffic asks a service at a steady pace on a goroutine of its own and
// keeps each answer's outcome, so a test can tell, around a failover,
// how long the service was away and whether it failed at any other time.
type Traffic struct {
	mu      sync.Mutex
	samples []trafficSample
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// trafficSample is one ask: when it was sent, when it came back, and its
// failure (nil: answered as wanted).
type trafficSample struct {
	start, end time.Time
	err        error
}

// maxInFlight bounds the asks waiting for an answer at once (each also
// ends on its own timeout), so a slow service is not sent more than it
// answers: with 256, the third ACTIVE_STANDBY run kept up to 100 HTTP
// requests out at a starved amphora.
const maxInFlight = 10

// StartTraffic sends an ask every interval, each on its own goroutine, so
// one that waits for its timeout does not hold back the next (which may
// find the service back), until Stop or until it sent limit asks, so the
// loop ends even when nobody stops it. A tick that finds maxInFlight asks
// still waiting sends none. ask returns nil for a good answer; it must
// time out on its own.
func StartTraffic(ask func() error, every time.Duration, limit int) *Traffic {
	tr := &Traffic{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		var asking sync.WaitGroup
		defer asking.Wait()
		slots := make(chan struct{}, maxInFlight)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for range limit {
			select {
			case <-tr.stop:
				return
			case <-tick.C:
			}
			select {
			case slots <- struct{}{}:
			default:
				continue
			}
			start := time.Now()
			asking.Go(func() {
				defer func() { <-slots }()
				err := ask()
				tr.mu.Lock()
				tr.samples = append(tr.samples, trafficSample{start, time.Now(), err})
				tr.mu.Unlock()
			})
		}
	}()
	return tr
}

// Stop ends the loop and waits for the asks still out.
func (tr *Traffic) Stop() {
	tr.once.Do(func() { close(tr.stop) })
	<-tr.done
}

// Since summarises the asks sent at or after from.
func (tr *Traffic) Since(from time.Time) TrafficStats {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return summarise(tr.samples, from)
}

// SlowAnswer is how long a good answer may take before TrafficStats
// counts it as slow (printed, not a failure).
const SlowAnswer = time.Second

// TrafficStats is what the asks in a span of time met.
type TrafficStats struct {
	Asked, Failed int
	// Slow counts the good answers that took SlowAnswer or longer, and
	// Slowest is the longest a good answer took.
	Slow    int
	Slowest time.Duration
	// Outages are the runs of failed asks, in order.
	Outages []Outage
	LastErr error
}

// Outage is one run of failed asks: the service was away from the last
// good answer before it (or the first failed ask, when there was none)
// to the first good answer after it (zero while none came).
type Outage struct {
	From, To time.Time
	Failed   int
	// Err is the outage's last failure.
	Err error
}

// Over reports whether a good answer ended the outage.
func (o Outage) Over() bool { return !o.To.IsZero() }

// Length is how long the service was away; for an outage not over yet,
// until now.
func (o Outage) Length() time.Duration {
	if !o.Over() {
		return time.Since(o.From)
	}
	return o.To.Sub(o.From)
}

// Longest is the longest outage's length (0 without one).
func (s TrafficStats) Longest() time.Duration {
	var longest time.Duration
	for _, o := range s.Outages {
		longest = max(longest, o.Length())
	}
	return longest
}

// FailedAfter counts the failed asks after the first outage ended: what
// failed once the service had come back.
func (s TrafficStats) FailedAfter() int {
	n := 0
	for i, o := range s.Outages {
		if i > 0 {
			n += o.Failed
		}
	}
	return n
}

func (s TrafficStats) String() string {
	out := fmt.Sprintf("%d asked, %d failed in %d outages, longest %.1fs; %d answered slowly (%v or more), slowest %.1fs",
		s.Asked, s.Failed, len(s.Outages), s.Longest().Seconds(), s.Slow, SlowAnswer, s.Slowest.Seconds())
	if s.LastErr != nil {
		out += fmt.Sprintf(" (last failure: %v)", s.LastErr)
	}
	return out
}

// summarise counts the samples sent at or after from and groups their
// failures into outages; an outage's start looks back past from for the
// last good answer.
func summarise(samples []trafficSample, from time.Time) TrafficStats {
	// Asks come back out of the order they were sent in; runs of failures
	// are runs in the order sent.
	samples = slices.Clone(samples)
	slices.SortStableFunc(samples, func(a, b trafficSample) int { return a.start.Compare(b.start) })
	var s TrafficStats
	var lastGood time.Time
	var cur *Outage
	for _, x := range samples {
		counted := !x.start.Before(from)
		if x.err == nil {
			if cur != nil {
				cur.To = x.end
				s.Outages = append(s.Outages, *cur)
				cur = nil
			}
			lastGood = x.end
			if took := x.end.Sub(x.start); counted && took >= SlowAnswer {
				s.Slow++
				s.Slowest = max(s.Slowest, took)
			}
		} else if counted {
			if cur == nil {
				// A good answer that came back after this ask was sent
				// (asks overlap) does not push the outage's start past it.
				cur = &Outage{From: lastGood}
				if lastGood.IsZero() || lastGood.After(x.start) {
					cur.From = x.start
				}
			}
			cur.Failed++
			cur.Err = x.err
			s.Failed++
			s.LastErr = x.err
		}
		if counted {
			s.Asked++
		}
	}
	if cur != nil {
		s.Outages = append(s.Outages, *cur)
	}
	return s
}
