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

// holdTheLock stands for a long change: it returns once the mutation lock
// is held, and the lock is freed when the returned func is called.
func holdTheLock(a *Agent) (free func()) {
	held, done := make(chan struct{}), make(chan struct{})
	go a.exclusive(context.Background(), func(context.Context) error {
		close(held)
		<-done
		return nil
	})
	<-held
	return func() { close(done) }
}

// A reload that joined a queued one gets the reload's result even when
// the request that queued it first gives up.
func TestJoinedReloadDoesNotInheritCancellation(t *testing.T) {
	a, lbs := gatedAgent(t)
	lbs.running["lb1"] = true
	// Another mutation holds the lock while the reloads queue.
	free := holdTheLock(a)
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
	free()
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

// The agent owns the mutation lock: while a change runs, every other
// exported mutation waits for it (here: gives up waiting, having done
// nothing), and every read goes ahead. The inputs are invalid, so a
// mutation that skipped the lock fails for another reason and touches
// nothing.
func TestEveryMutationTakesTheLock(t *testing.T) {
	f := newFixture(t)
	a := f.a
	defer holdTheLock(a)()

	const lb = "0b0b0b0b-0000-4000-8000-000000000001"
	bad := []byte("not a valid body")
	mutations := map[string]func(context.Context) error{
		"UpdateConfig":      func(ctx context.Context) error { return a.UpdateConfig(ctx, bad) },
		"RotateCertificate": func(ctx context.Context) error { return a.RotateCertificate(ctx, bad) },
		"PlugVIP":           func(ctx context.Context) error { _, err := a.PlugVIP(ctx, "not-an-ip", bad); return err },
		"PlugNetwork":       func(ctx context.Context) error { _, err := a.PlugNetwork(ctx, bad); return err },
		"SetInterfaceRules": func(ctx context.Context) error { return a.SetInterfaceRules(ctx, "not-an-ip", bad) },
		"UploadHAProxy":     func(ctx context.Context) error { _, err := a.UploadHAProxy(ctx, "amp-1", "../x", bad); return err },
		"LoadBalancerAction start": func(ctx context.Context) error {
			_, err := a.LoadBalancerAction(ctx, lb, "start")
			return err
		},
		"LoadBalancerAction reload": func(ctx context.Context) error {
			_, err := a.LoadBalancerAction(ctx, lb, "reload")
			return err
		},
		"DeleteListener":    func(ctx context.Context) error { return a.DeleteListener(ctx, "../x") },
		"PutCertificate":    func(ctx context.Context) error { _, err := a.PutCertificate(ctx, "../x", "a.pem", bad); return err },
		"DeleteCertificate": func(ctx context.Context) error { return a.DeleteCertificate(ctx, "../x", "a.pem") },
		"UploadVRRP":        func(ctx context.Context) error { _, err := a.UploadVRRP(ctx, bad); return err },
		"VRRPAction":        func(ctx context.Context) error { _, err := a.VRRPAction(ctx, "no-such-action"); return err },
		"UploadLVS":         func(ctx context.Context) error { _, err := a.UploadLVS(ctx, "amp-1", "../x", bad); return err },
		"Reload":            a.Reload,
	}
	for name, mutate := range mutations {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := mutate(ctx)
		cancel()
		if fe, ok := fault.As(err); !ok || fe.Message != "Request abandoned" {
			t.Errorf("%s while another change runs: %v, want it to wait for the lock", name, err)
		}
	}

	reads := map[string]func(context.Context) error{
		"Info":           func(ctx context.Context) error { _, err := a.Info(ctx); return err },
		"Details":        func(ctx context.Context) error { _, err := a.Details(ctx); return err },
		"Listeners":      func(ctx context.Context) error { _, err := a.Listeners(ctx); return err },
		"HAProxyConfig":  func(ctx context.Context) error { _, _, err := a.HAProxyConfig(ctx, lb); return err },
		"CertificateMD5": func(ctx context.Context) error { _, err := a.CertificateMD5(ctx, lb, "a.pem"); return err },
		"LVSConfig":      func(ctx context.Context) error { _, err := a.LVSConfig(ctx, lb); return err },
		"InterfaceFor":   func(ctx context.Context) error { _, err := a.InterfaceFor(ctx, "203.0.113.1"); return err },
	}
	for name, read := range reads {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := read(ctx)
		cancel()
		if fe, ok := fault.As(err); ok && fe.Message == "Request abandoned" {
			t.Errorf("%s waited for the mutation lock", name)
		}
	}
}
