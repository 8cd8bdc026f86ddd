package agent

import (
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/caller"
	"github.com/amphora-agent/amphora-agent/agent/config/configtest"
	"github.com/amphora-agent/amphora-agent/agent/fault"
)

// slowLBs start as slowly as a HAProxy taking 80 s to load, within the
// wait of the client that asked (caller.Of), or until it leaves.
type slowLBs struct {
	fakeLBs
	left atomic.Int32 // starts that ended because their client left
	// leftAt is when the last of them ended.
	leftAt atomic.Pointer[time.Time]
	// restoreAsked: the restore ran as if a client had asked for it.
	restoreAsked atomic.Bool
}

func (s *slowLBs) Restore(ctx context.Context) error {
	_, asked := caller.Of(ctx)
	s.restoreAsked.Store(asked)
	return nil
}

func (s *slowLBs) start(ctx context.Context) error {
	c, ok := caller.Of(ctx)
	if !ok {
		return errors.New("the start does not know the client that asked")
	}
	select {
	case <-time.After(80 * time.Second):
	case <-c.Done():
		s.left.Add(1)
		now := time.Now()
		s.leftAt.Store(&now)
	}
	return nil
}

func (s *slowLBs) Start(ctx context.Context, lb string) error { return s.start(ctx) }
func (s *slowLBs) Reload(ctx context.Context, lb string) (bool, error) {
	return true, s.start(ctx)
}

// A start the controller asked for runs as long as the controller waits
// for it (80 s here, past the mutation's own deadline), and what follows
// it (the VIP's gratuitous ARP) still gets its time. A reload's start
// stops waiting once every client that asked for it went away.
func TestAskedStartsWaitAsLongAsTheirClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		cfg := configtest.Load(t, dir, baseConfig(dir))
		lbs := &slowLBs{fakeLBs: fakeLBs{running: map[string]bool{}}}
		var advertiseErr error
		advertised := 0
		a := New(Options{Config: cfg, Runner: fakeRunner{}, LoadBalancers: lbs,
			Advertise: func(ctx context.Context, _ string, _ []netip.Addr) error {
				advertised++
				advertiseErr = ctx.Err()
				return nil
			}})
		defer a.Close()
		f := &fixture{dir: dir}
		f.write("lib/lb1/haproxy.cfg", "frontend L1\n    mode http\n    bind 203.0.113.10:80\n")

		begun := time.Now()
		// As the API hands it on (see api.unbudgeted).
		if _, err := a.LoadBalancerAction(caller.With(context.Background()), "lb1", "start"); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(begun); took < 80*time.Second {
			t.Fatalf("start answered after %v, before the 80 s start ended", took)
		}
		if advertised != 1 || advertiseErr != nil {
			t.Fatalf("advertised %d times, with context error %v", advertised, advertiseErr)
		}

		req, leave := context.WithCancel(context.Background())
		time.AfterFunc(10*time.Second, leave)
		_, err := a.LoadBalancerAction(caller.With(req), "lb1", "reload")
		if fe, ok := fault.As(err); !ok || fe.Message != "Request abandoned" {
			t.Fatalf("reload whose client left: %v", err)
		}
		synctest.Wait()
		if n := lbs.left.Load(); n != 1 {
			t.Fatalf("%d starts ended with their client, want 1", n)
		}
	})
}

// The restore at start-up is nobody's request: its starts keep the short
// bound and are followed in the background.
func TestRestoreIsNotAsked(t *testing.T) {
	dir := t.TempDir()
	cfg := configtest.Load(t, dir, baseConfig(dir))
	lbs := &slowLBs{fakeLBs: fakeLBs{running: map[string]bool{}}}
	a := New(Options{Config: cfg, Runner: fakeRunner{}, LoadBalancers: lbs})
	defer a.Close()
	if err := a.restoreDaemons(context.Background(), func(string) {}); err != nil {
		t.Fatal(err)
	}
	if lbs.restoreAsked.Load() {
		t.Fatal("the restore's starts wait as if a client had asked for them")
	}
}

// A reload that several clients joined (queued behind another change)
// waits for its start until the last of them has gone.
func TestJoinedReloadWaitsForItsLastClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		cfg := configtest.Load(t, dir, baseConfig(dir))
		lbs := &slowLBs{fakeLBs: fakeLBs{running: map[string]bool{}}}
		a := New(Options{Config: cfg, Runner: fakeRunner{}, LoadBalancers: lbs,
			Advertise: func(context.Context, string, []netip.Addr) error { return nil }})
		defer a.Close()
		f := &fixture{dir: dir}
		f.write("lib/lb1/haproxy.cfg", "frontend L1\n    mode http\n")

		begun := time.Now()
		go a.LoadBalancerAction(caller.With(context.Background()), "lb1", "start") // holds the lock 80 s
		synctest.Wait()
		for _, leaveAfter := range []time.Duration{90 * time.Second, 100 * time.Second} {
			req, leave := context.WithCancel(context.Background())
			time.AfterFunc(leaveAfter, leave)
			go a.LoadBalancerAction(caller.With(req), "lb1", "reload")
			synctest.Wait() // the first one makes the run, the second joins it
		}
		time.Sleep(200 * time.Second)
		synctest.Wait()
		at := lbs.leftAt.Load()
		if lbs.left.Load() != 1 || at == nil || at.Sub(begun) != 100*time.Second {
			var after time.Duration
			if at != nil {
				after = at.Sub(begun)
			}
			t.Fatalf("%d starts ended with their clients, the last %v after the first request", lbs.left.Load(), after)
		}
	})
}
