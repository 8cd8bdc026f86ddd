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
		if _, err := a.LoadBalancerAction(context.Background(), "lb1", "start"); err != nil {
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
		_, err := a.LoadBalancerAction(req, "lb1", "reload")
		if fe, ok := fault.As(err); !ok || fe.Message != "Request abandoned" {
			t.Fatalf("reload whose client left: %v", err)
		}
		synctest.Wait()
		if n := lbs.left.Load(); n != 1 {
			t.Fatalf("%d starts ended with their client, want 1", n)
		}
	})
}
