package haproxy

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/procwatch"
	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// State is what the heartbeat asks each cycle: a load balancer stays
// running across a reload (the master keeps its pid), is busy from the
// reload's start until the follow-up of a reload answered early ends,
// and idle before and after; an unknown one is neither. State never waits
// for the daemon's lock, which an operation holds for seconds.
func TestSupervisorStateThroughASlowReload(t *testing.T) {
	sup, st, port, logs := slowReloadSupervisor(t)
	ctx := context.Background()
	if running, busy := sup.State("lb-unknown"); running || busy {
		t.Fatalf("an unknown load balancer: running %v, busy %v", running, busy)
	}
	if running, busy := sup.State("lb1"); !running || busy {
		t.Fatalf("after its start: running %v, busy %v; want running, idle", running, busy)
	}

	// Asked while the lock is held: answered all the same.
	in := sup.instance("lb1")
	answered := make(chan bool, 1)
	in.d.With(func(*procwatch.Held) error {
		go func() { running, _ := sup.State("lb1"); answered <- running }()
		select {
		case running := <-answered:
			if !running {
				t.Error("asked during an operation: not running")
			}
		case <-time.After(10 * time.Second):
			t.Error("State waited for the daemon's lock")
		}
		return nil
	})

	if err := st.Upload(ctx, "AMP1", "lb1", slowLoading(t, testConfig(st, port, "gen2"), 3)); err != nil {
		t.Fatal(err)
	}
	// Polled from before the reload until it is followed to its end.
	var stoppedSeen, busySeen atomic.Bool
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			running, busy := sup.State("lb1")
			if !running {
				stoppedSeen.Store(true)
			}
			if busy {
				busySeen.Store(true)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	if _, err := sup.Reload(ctx, "lb1"); err != nil {
		t.Fatal(err)
	}
	// Answered after ReloadWait while the master still loads: busy until
	// the follow-up sees the new worker.
	if _, busy := sup.State("lb1"); !busy {
		if logs.FilterMessage("HAProxy finished loading the new configuration").Len() == 0 {
			t.Fatal("a reload answered early is not busy while it is followed")
		}
	}
	waitLogged(t, logs, 30*time.Second, "HAProxy finished loading the new configuration")
	testkit.WaitFor(t, 10*time.Second, "lb1 idle after the follow-up", func() bool {
		_, busy := sup.State("lb1")
		return !busy
	})
	close(stop)
	<-polled
	if stoppedSeen.Load() {
		t.Error("the load balancer looked stopped during its reload")
	}
	if !busySeen.Load() {
		t.Error("the load balancer never looked busy during its reload")
	}
	waitAnswer(t, port, "gen2")
	if err := sup.Stop(ctx, "lb1"); err != nil {
		t.Fatal(err)
	}
	if running, busy := sup.State("lb1"); running || busy {
		t.Fatalf("stopped: running %v, busy %v", running, busy)
	}
}
