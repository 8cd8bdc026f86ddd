package health

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/config"
	"github.com/amphora-agent/amphora-agent/agent/tick"
)

// LastCycle is zero until Run finishes its first cycle and then moves
// with every cycle: the agent's watchdog reads it to tell a live loop
// from a stuck one. In a synctest bubble a cycle takes no time, so
// LastCycle is exactly the instant of each heartbeat.
func TestLastCycleFollowsRun(t *testing.T) {
	hm := listen(t, "udp4", "127.0.0.1:0")
	cfg := testConfig(t.TempDir(), hm.dest()) // interval: one hour
	synctest.Test(t, func(t *testing.T) {
		s := New(Options{Config: cfg, LVS: NoLVS{}})
		if got := s.LastCycle(); !got.IsZero() {
			t.Fatalf("LastCycle before Run = %v, want zero", got)
		}
		start := time.Now()
		stop := runInBubble(t, s)
		defer stop()
		synctest.Wait()
		if got := s.LastCycle(); !got.Equal(start) {
			t.Fatalf("LastCycle after the first cycle = %v, want %v", got, start)
		}
		// With an hour to wait, only a shorter interval brings a new cycle.
		const every = 10 * time.Millisecond
		s.SetConfig(withConfig(cfg, func(c *config.Config) { c.HeartbeatInterval = every }))
		next := tick.Next(start, every)
		time.Sleep(time.Until(next))
		synctest.Wait()
		if got := s.LastCycle(); !got.Equal(next) {
			t.Fatalf("LastCycle after the second cycle = %v, want %v", got, next)
		}
	})
}
