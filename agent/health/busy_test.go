package health

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/config"
)

// A load balancer the agent is busy with (a reload or a restart under
// way) stays in every heartbeat while its stats socket refuses reads,
// from its last reading, for up to MaxBusyStandIn after it; one the agent
// is not busy with is stood in for once; one neither running nor busy
// leaves the heartbeat at once, without a wait. The reader asks only the
// source's State, the supervisor's answer: no pid file exists anywhere.
func TestBusyLoadBalancerStaysInEveryHeartbeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		never := func(int) bool { return false }
		always := func(int) bool { return true }
		src := &scriptedSource{running: true, rows: sampleRows(t, ""), fail: never}
		set := func(running, busy bool, fail func(int) bool) {
			src.mu.Lock()
			src.running, src.busy, src.fail = running, busy, fail
			src.mu.Unlock()
		}
		log := &beatLog{t: t}
		hm := listen(t, "udp4", "127.0.0.1:0")
		cfg := withConfig(testConfig(t.TempDir(), hm.dest()), func(c *config.Config) { c.HeartbeatInterval = time.Second })
		s := New(Options{Config: cfg, HAProxy: src, LVS: NoLVS{}, Sent: log.sent})
		// cycle runs one cycle, then waits out the interval; it returns the
		// heartbeat's listener count and how long the cycle took.
		cycle := func() (int, time.Duration) {
			t.Helper()
			before, start := len(log.all()), time.Now()
			s.Cycle(context.Background())
			took := time.Since(start)
			beats := log.all()
			if len(beats) != before+1 {
				t.Fatalf("a cycle sent %d heartbeats, want 1", len(beats)-before)
			}
			time.Sleep(time.Second)
			return len(beats[before].msg.Listeners), took
		}

		if n, _ := cycle(); n != 2 {
			t.Fatalf("first heartbeat: %d listeners, want 2", n)
		}
		read := time.Now().Add(-time.Second) // the last good reading's time

		// A reload: the master runs, every read is refused.
		set(true, true, always)
		reported := 0
		for time.Since(read) < MaxBusyStandIn+5*time.Second {
			at := time.Since(read)
			n, took := cycle()
			switch end := at + took; {
			case end <= MaxBusyStandIn && n != 2:
				t.Fatalf("%v after the last reading, while busy: %d listeners, want 2", end, n)
			case at > MaxBusyStandIn && n != 0:
				t.Fatalf("%v after the last reading, still busy: %d listeners, want 0 (the stand-in is bounded)", at, n)
			case n == 2:
				reported++
			}
		}
		t.Logf("a busy load balancer stood in for %d heartbeats", reported)

		// Busy no more and reading again; then refused while idle: once.
		set(true, false, never)
		if n, _ := cycle(); n != 2 {
			t.Fatalf("reading again: %d listeners, want 2", n)
		}
		set(true, false, always)
		if a, _ := cycle(); a != 2 {
			t.Fatalf("first refused read while idle: %d listeners, want 2", a)
		}
		if b, _ := cycle(); b != 0 {
			t.Fatalf("second refused read while idle: %d listeners, want 0", b)
		}

		// A restart under way: no master for a moment, still reported.
		set(true, false, never)
		cycle()
		set(false, true, always)
		for i := range 3 {
			if n, _ := cycle(); n != 2 {
				t.Fatalf("heartbeat %d during a restart: %d listeners, want 2", i, n)
			}
		}

		// Stopped: neither running nor busy. Left out at once, and the
		// cycle does not wait to believe it.
		set(false, false, always)
		n, took := cycle()
		if n != 0 || took != 0 {
			t.Fatalf("stopped: %d listeners after %v, want 0 at once", n, took)
		}
	})
}
