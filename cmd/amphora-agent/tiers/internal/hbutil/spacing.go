package hbutil

import (
	"slices"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/health"
	"github.com/amphora-agent/amphora-agent/agent/health/healthtest"
)

// MedianSpacing reads gaps+1 heartbeats, each of which must verify with
// key, and returns the median time between consecutive arrivals with the
// gaps it measured. A median shrugs off one datagram delayed by a busy
// machine.
func (r *Receiver) MedianSpacing(gaps int, key string) (time.Duration, []time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(Wait + time.Duration(gaps)*5*time.Second)
	var stamps []time.Time
	for len(stamps) < gaps+1 {
		d := r.Next(deadline)
		if d == nil {
			r.t.Fatalf("only %d heartbeats arrived; want %d to measure their spacing", len(stamps), gaps+1)
		}
		stamps = append(stamps, time.Now())
		if _, err := healthtest.Decode[health.Message](d, key); err != nil {
			r.t.Fatalf("heartbeat does not verify with key %q: %v", key, err)
		}
	}
	measured := make([]time.Duration, 0, gaps)
	for i := 1; i < len(stamps); i++ {
		measured = append(measured, stamps[i].Sub(stamps[i-1]).Round(time.Millisecond))
	}
	sorted := slices.Clone(measured)
	slices.Sort(sorted)
	med := sorted[len(sorted)/2]
	if len(sorted)%2 == 0 {
		med = (sorted[len(sorted)/2-1] + med) / 2
	}
	return med, measured
}
