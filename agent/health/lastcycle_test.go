package health

import (
	"context"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/config"
)

// LastCycle is zero until Run finishes its first cycle and then moves
// with every cycle: the agent's watchdog reads it to tell a live loop
// from a stuck one.
func TestLastCycleFollowsRun(t *testing.T) {
	hm := listen(t, "udp4", "127.0.0.1:0")
	cfg := testConfig(t.TempDir(), hm.dest()) // interval: one hour
	s := newSender(t, cfg, nil, nil)
	if got := s.LastCycle(); !got.IsZero() {
		t.Fatalf("LastCycle before Run = %v, want zero", got)
	}
	before := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()

	hm.next(5*time.Second, testKey)
	first := waitLastCycle(t, s, before)
	// With an hour to wait, only a shorter interval brings a new cycle.
	s.SetConfig(withConfig(cfg, func(c *config.Config) { c.HeartbeatInterval = 10 * time.Millisecond }))
	hm.next(5*time.Second, testKey)
	waitLastCycle(t, s, first)
}

// waitLastCycle polls until LastCycle is later than after and returns it.
func waitLastCycle(t *testing.T, s *Sender, after time.Time) time.Time {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		// The datagram leaves before the cycle is recorded as finished.
		if got := s.LastCycle(); got.After(after) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("LastCycle did not move past %v", after)
		}
		time.Sleep(time.Millisecond)
	}
}
