package agent

import (
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/config/configtest"
	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// gatedLBs blocks every lifecycle call until released, then records
// whether the context it was given had ended.
type gatedLBs struct {
	fakeLBs
	entered chan string
	release chan struct{}
	ctxErrs chan error
	reloads atomic.Int32
}

func (g *gatedLBs) gate(ctx context.Context, what string) {
	g.entered <- what
	<-g.release
	g.ctxErrs <- ctx.Err()
}

func (g *gatedLBs) Start(ctx context.Context, lb string) error {
	g.gate(ctx, "start")
	return g.fakeLBs.Start(ctx, lb)
}

func (g *gatedLBs) Reload(ctx context.Context, lb string) (bool, error) {
	g.reloads.Add(1)
	g.gate(ctx, "reload")
	return g.fakeLBs.Reload(ctx, lb)
}

func gatedAgent(t *testing.T) (*Agent, *gatedLBs) {
	t.Helper()
	dir := t.TempDir()
	cfg := configtest.Load(t, dir, baseConfig(dir))
	lbs := &gatedLBs{fakeLBs: fakeLBs{running: map[string]bool{}},
		entered: make(chan string, 4), release: make(chan struct{}), ctxErrs: make(chan error, 4)}
	a := New(Options{Config: cfg, Runner: fakeRunner{}, LoadBalancers: lbs,
		Advertise: func(context.Context, string, []netip.Addr) error { return nil }})
	(&fixture{dir: dir}).write("lib/lb1/haproxy.cfg", "frontend L1\n    mode http\n")
	return a, lbs
}

func within(t *testing.T, what string, c <-chan error) error {
	t.Helper()
	select {
	case err := <-c:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer", what)
		return nil
	}
}

// Once a start has begun, the request's end does not reach it: the
// supervisor gets a context that is still alive.
func TestActionOutlivesItsRequest(t *testing.T) {
	a, lbs := gatedAgent(t)
	ctx, hangUp := context.WithCancel(context.Background())
	answer := make(chan error, 1)
	go func() {
		_, err := a.LoadBalancerAction(ctx, "lb1", "start")
		answer <- err
	}()
	<-lbs.entered
	hangUp()
	close(lbs.release)
	if err := within(t, "start", lbs.ctxErrs); err != nil {
		t.Fatalf("the start saw the request's end: %v", err)
	}
	if err := within(t, "answer", answer); err != nil {
		t.Fatal(err)
	}
}

// A request already cancelled when it arrives at a free agent is carried
// out, not refused at random.
func TestCancelledRequestTakesAFreeLock(t *testing.T) {
	a, lbs := gatedAgent(t)
	close(lbs.release)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := 0; i < 20; i++ {
		if _, err := a.LoadBalancerAction(ctx, "lb1", "start"); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		<-lbs.entered
		if err := <-lbs.ctxErrs; err != nil {
			t.Fatalf("round %d: the start saw a cancelled context: %v", i, err)
		}
	}
}

// A reload that joined a queued one gets the reload's result even when
// the request that queued it first gives up.
func TestJoinedReloadDoesNotInheritCancellation(t *testing.T) {
	a, lbs := gatedAgent(t)
	lbs.running["lb1"] = true
	// Another mutation holds the lock while the reloads queue.
	held, free := make(chan struct{}), make(chan struct{})
	go a.Exclusive(context.Background(), func(context.Context) error {
		close(held)
		<-free
		return nil
	})
	<-held
	firstCtx, firstGivesUp := context.WithCancel(context.Background())
	first, second := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := a.LoadBalancerAction(firstCtx, "lb1", "reload")
		first <- err
	}()
	// The second joins the first's queued run.
	testkit.WaitFor(t, 10*time.Second, "the first reload to queue", func() bool {
		a.reloads.mu.Lock()
		defer a.reloads.mu.Unlock()
		return a.reloads.pending["lb1"] != nil
	})
	go func() {
		details, err := a.LoadBalancerAction(context.Background(), "lb1", "reload")
		if err == nil && details != "Listener lb1 reloaded" {
			err = errors.New("details " + details)
		}
		second <- err
	}()
	testkit.WaitFor(t, 10*time.Second, "the second reload to join", func() bool {
		a.reloads.mu.Lock()
		defer a.reloads.mu.Unlock()
		c := a.reloads.pending["lb1"]
		return c != nil && c.waiters == 2
	})
	firstGivesUp()
	if fe, ok := fault.As(within(t, "first", first)); !ok || fe.Message != "Request abandoned" {
		t.Fatalf("the first caller: %v", fe)
	}
	close(free)
	select {
	case <-lbs.entered:
	case err := <-second:
		t.Fatalf("the second caller inherited the first one's end: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the queued reload never ran")
	}
	close(lbs.release)
	if err := within(t, "second", second); err != nil {
		t.Fatalf("the second caller inherited the first one's end: %v", err)
	}
	if n := lbs.reloads.Load(); n != 1 {
		t.Fatalf("%d reloads ran, want 1", n)
	}
}
