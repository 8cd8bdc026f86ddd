package health

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/config"
	"github.com/amphora-agent/amphora-agent/agent/tick"
)

// State tells status what the last cycle did: sent (where, which seq),
// withheld because keepalived is down (and why), or not sent for want of
// a destination.
func TestSenderState(t *testing.T) {
	hm := listen(t, "udp4", "127.0.0.1:0")
	base := t.TempDir()
	cfg := testConfig(base, hm.dest())
	s := newSender(t, cfg, nil, nil)
	ctx := context.Background()
	if st := s.State(); !st.LastSendAt.IsZero() || st.LastResult != "" {
		t.Fatalf("before the first cycle: %+v", st)
	}
	s.Cycle(ctx)
	hm.next(time.Second, testKey)
	s.Cycle(ctx)
	hm.next(time.Second, testKey)
	st := s.State()
	if st.LastResult != "sent" || st.Destination != hm.dest() || st.Seq != 1 || st.LastSendAt.IsZero() || st.Suppressed != "" {
		t.Fatalf("after two heartbeats: %+v", st)
	}

	vrrp := filepath.Join(base, "vrrp")
	if err := os.MkdirAll(vrrp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vrrp, "octavia-keepalived.conf"), []byte("vrrp_instance x {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.Cycle(ctx)
	if st := s.State(); !strings.Contains(st.Suppressed, "pid file") || !strings.HasPrefix(st.LastResult, "not sent: keepalived") {
		t.Fatalf("keepalived down: %+v", st)
	}
	os.Remove(filepath.Join(vrrp, "octavia-keepalived.conf"))

	s.SetConfig(withConfig(cfg, func(c *config.Config) { c.ControllerIPPortList = nil }))
	s.Cycle(ctx)
	if st := s.State(); st.Suppressed != "" || !strings.Contains(st.LastResult, "no destination") || st.Seq != 2 {
		t.Fatalf("no destination: %+v", st)
	}
}

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
