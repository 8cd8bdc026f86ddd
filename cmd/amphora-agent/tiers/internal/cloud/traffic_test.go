package cloud

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// TestTrafficOutages: failed asks group into outages that run from the
// last good answer (also one before the span asked about) to the next;
// FailedAfter counts only the failures after the first outage; an
// outage with no good answer after it is not over; slow good answers are
// counted apart.
func TestTrafficOutages(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	lost := errors.New("timeout")
	ask := func(ms int, err error) trafficSample { return trafficSample{at(ms), at(ms + 10), err} }
	samples := []trafficSample{
		ask(0, lost), ask(100, nil), ask(200, nil), // before the span
		ask(300, lost), ask(400, lost), ask(500, nil), // 210 → 510
		ask(600, nil), ask(700, lost), ask(800, nil), // 610 → 810
		ask(900, lost),
	}
	s := summarise(samples, at(250))
	if s.Asked != 7 || s.Failed != 4 || len(s.Outages) != 3 || s.LastErr != lost {
		t.Fatalf("got %+v, want 7 asked, 4 failed in 3 outages", s)
	}
	first := s.Outages[0]
	if first.From != at(210) || first.To != at(510) || first.Failed != 2 || first.Err != lost ||
		s.Outages[1].Length() != 200*time.Millisecond {
		t.Errorf("outages %+v: want the first from 210 ms to 510 ms with 2 failed, the second 200 ms", s.Outages)
	}
	if s.Outages[2].Over() || s.FailedAfter() != 2 {
		t.Errorf("the last outage over %v, %d failed after the first outage; want not over, 2", s.Outages[2].Over(), s.FailedAfter())
	}
	if s.Longest() < time.Hour {
		t.Errorf("longest %v: the open outage counts until now", s.Longest())
	}
	// A span that starts with a failure and no good answer before it.
	if s := summarise(samples[:2], t0); len(s.Outages) != 1 || s.Outages[0].From != t0 || s.FailedAfter() != 0 {
		t.Errorf("from the start: %+v", s)
	}
	if s := summarise(samples[1:3], t0); s.Failed != 0 || len(s.Outages) != 0 || s.Longest() != 0 {
		t.Errorf("only good answers: %+v", s)
	}
	// Samples kept in the order they came back are taken in the order sent.
	reversed := slices.Clone(samples)
	slices.Reverse(reversed)
	if r := summarise(reversed, at(250)); r.Failed != 4 || len(r.Outages) != 3 || r.Outages[0].From != at(210) {
		t.Errorf("samples out of order: %+v, want what the ordered ones gave", r)
	}
	// Overlapping asks: a slow good answer that came back after the next
	// ask failed does not start the outage after it ends.
	overlap := []trafficSample{{at(0), at(8000), nil}, {at(100), at(300), lost}, {at(200), at(500), nil}}
	if o := summarise(overlap, t0).Outages; len(o) != 1 || o[0].From != at(100) || o[0].To != at(500) {
		t.Errorf("overlapping asks: outages %+v, want one from 100 ms to 500 ms", o)
	}
	// Slow good answers are counted apart; a slow failure is a failure.
	slow := []trafficSample{{at(0), at(0).Add(SlowAnswer), nil}, {at(100), at(2600), nil},
		{at(3000), at(9000), lost}, {at(9100), at(9200), nil}}
	if s := summarise(slow, t0); s.Slow != 2 || s.Slowest != 2500*time.Millisecond || s.Failed != 1 {
		t.Errorf("slow answers: %+v, want 2 slow, the slowest 2.5s, 1 failed", s)
	}
}

// TestTrafficBounded: the loop asks at its pace, stops after limit asks
// on its own, and Stop ends it early; an ask still waiting does not
// hold back the next.
func TestTrafficBounded(t *testing.T) {
	var n atomic.Int32
	tr := StartTraffic(func() error { n.Add(1); return nil }, time.Millisecond, 5)
	WaitFor(t, 10*time.Second, "five asks", func() bool { return tr.Since(time.Time{}).Asked == 5 })
	tr.Stop()
	if got := n.Load(); got != 5 {
		t.Errorf("%d asks with a limit of 5", got)
	}
	tr = StartTraffic(func() error { n.Add(1); return errors.New("down") }, time.Millisecond, 1<<30)
	WaitFor(t, 10*time.Second, "an ask", func() bool { return tr.Since(time.Time{}).Asked > 0 })
	tr.Stop()
	// Stop waited for the loop to end: nothing asks any more.
	after := tr.Since(time.Time{}).Asked
	if again := tr.Since(time.Time{}); again.Asked != after || again.Failed != after || len(again.Outages) != 1 {
		t.Errorf("after Stop: %+v (had %d)", again, after)
	}
	// An ask waiting for its answer does not hold back the next ones.
	release := make(chan struct{})
	var first atomic.Bool
	tr = StartTraffic(func() error {
		if first.CompareAndSwap(false, true) {
			<-release
		}
		return nil
	}, time.Millisecond, 1<<30)
	WaitFor(t, 10*time.Second, "asks answered while the first waits", func() bool { return tr.Since(time.Time{}).Asked >= 5 })
	close(release)
	tr.Stop()
}
