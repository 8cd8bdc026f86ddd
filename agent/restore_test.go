package agent

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/amphora-agent/amphora-agent/agent/config/configtest"
	"github.com/amphora-agent/amphora-agent/keepalived"
	"github.com/amphora-agent/amphora-agent/netns/netnstest"
)

// restoreLog records, in one sequence, the progress reports and the
// restore steps as they run, with whether the mutation lock was held.
type restoreLog struct {
	mu    sync.Mutex
	a     *Agent
	steps []string
	fail  map[string]error
}

func (r *restoreLog) add(s string) {
	r.mu.Lock()
	r.steps = append(r.steps, s)
	r.mu.Unlock()
}

func (r *restoreLog) step(name string) error {
	if len(r.a.mutate) == 1 {
		name += " (locked)"
	}
	r.add(name)
	return r.fail[name]
}

func (r *restoreLog) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.steps)
}

type stepKernel struct {
	*netnstest.Kernel
	log *restoreLog
}

func (k stepKernel) EnsureNamespace(ns string) error {
	if err := k.log.step("network"); err != nil {
		return err
	}
	return k.Kernel.EnsureNamespace(ns)
}

type stepLBs struct {
	fakeLBs
	log *restoreLog
}

func (f *stepLBs) Restore(context.Context) error { return f.log.step("load balancers") }

type stepLVS struct {
	fakeLVS
	log *restoreLog
}

func (f *stepLVS) Restore(context.Context) error { return f.log.step("listeners") }

type stepVRRP struct {
	fakeVRRP
	log *restoreLog
}

func (f *stepVRRP) Restore(context.Context) error { return f.log.step("keepalived") }

// restoreAgent is an agent whose network, load balancers, listeners and
// keepalived record their restore in one log; fail makes the named step
// (with " (locked)" when it ran under the lock) fail.
func restoreAgent(t *testing.T, fail map[string]error) (*Agent, *restoreLog, *observer.ObservedLogs) {
	t.Helper()
	dir := t.TempDir()
	cfg := configtest.Load(t, dir, baseConfig(dir))
	core, logs := observer.New(zap.InfoLevel)
	r := &restoreLog{fail: fail}
	r.a = New(Options{Config: cfg, Log: zap.New(core), Runner: fakeRunner{},
		Kernel:        stepKernel{Kernel: netnstest.NewKernel(), log: r},
		LoadBalancers: &stepLBs{fakeLBs: fakeLBs{running: map[string]bool{}}, log: r},
		LVS:           &stepLVS{fakeLVS: fakeLVS{layout: keepalived.LVSLayout{Base: cfg.BasePath}}, log: r},
		VRRP:          &stepVRRP{log: r}})
	return r.a, r, logs
}

// jobs holds what Restore hands to the background, to be run by the test.
type jobs struct {
	names []string
	fns   map[string]func() error
}

func (j *jobs) Go(name string, fn func() error) {
	j.names = append(j.names, name)
	if j.fns == nil {
		j.fns = map[string]func() error{}
	}
	j.fns[name] = fn
}

// restoreUntilBackground runs Restore and checks what happened before it
// returned: only the network, and the background jobs handed over.
func restoreUntilBackground(t *testing.T, a *Agent, r *restoreLog, o RestoreOptions, wantSync, wantJobs []string) (<-chan error, *jobs) {
	t.Helper()
	bg := &jobs{}
	o.Go = bg.Go
	o.Progress = func(s string) { r.add("status: " + s) }
	done := a.Restore(context.Background(), o)
	if got := r.seen(); !slices.Equal(got, wantSync) {
		t.Errorf("before Restore returned: %q, want %q", got, wantSync)
	}
	if !slices.Equal(bg.names, wantJobs) {
		t.Errorf("background jobs %q, want %q", bg.names, wantJobs)
	}
	select {
	case err := <-done:
		t.Fatalf("the outcome came before the background restore ran: %v", err)
	default:
	}
	return done, bg
}

var daemonSteps = []string{
	"status: restoring load balancers", "load balancers (locked)",
	"status: restoring UDP and SCTP listeners", "listeners (locked)",
	"status: restoring keepalived", "keepalived (locked)",
}

// The network comes back before Restore returns, outside the lock (the
// API does not serve yet); then load balancers, listeners and keepalived,
// in that order, each under the mutation lock, each announced first.
func TestRestoreOrder(t *testing.T) {
	a, r, _ := restoreAgent(t, nil)
	network := []string{"status: restoring network namespace", "network"}
	done, bg := restoreUntilBackground(t, a, r, RestoreOptions{}, network, []string{"late ports", "restore"})
	if err := bg.fns["restore"](); err != nil {
		t.Fatalf("restore job: %v", err)
	}
	if got, want := r.seen(), append(network, daemonSteps...); !slices.Equal(got, want) {
		t.Errorf("steps %q, want %q", got, want)
	}
	if err := <-done; err != nil {
		t.Errorf("outcome: %v", err)
	}
	// Nothing plugged: the late-ports watch ends at once.
	if err := bg.fns["late ports"](); err != nil {
		t.Errorf("late ports job: %v", err)
	}
}

// A failed step is logged and the next ones still run. The outcome joins
// every failure, the network's included; the background job's error
// leaves the network's out, as it was logged when it happened.
func TestRestoreErrorsCombine(t *testing.T) {
	netErr, lvsErr := errors.New("no namespace"), errors.New("keepalived exited")
	a, r, logs := restoreAgent(t, map[string]error{"network": netErr, "listeners (locked)": lvsErr})
	network := []string{"status: restoring network namespace", "network"}
	done, bg := restoreUntilBackground(t, a, r, RestoreOptions{}, network, []string{"late ports", "restore"})
	jobErr := bg.fns["restore"]()
	if !errors.Is(jobErr, lvsErr) || errors.Is(jobErr, netErr) {
		t.Errorf("restore job: %v, want the listeners' error only", jobErr)
	}
	if got, want := r.seen(), append(network, daemonSteps...); !slices.Equal(got, want) {
		t.Errorf("steps %q, want %q", got, want)
	}
	outcome := <-done
	if !errors.Is(outcome, netErr) || !errors.Is(outcome, lvsErr) {
		t.Errorf("outcome %v, want both failures", outcome)
	}
	if want := "network namespace amphora-agent-unit-test-absent: no namespace\nkeepalived exited"; outcome.Error() != want {
		t.Errorf("outcome %q, want %q", outcome.Error(), want)
	}
	for _, msg := range []string{"network namespace not fully restored", "restoring UDP and SCTP listeners"} {
		if n := logs.FilterMessage(msg).FilterLevelExact(zap.ErrorLevel).Len(); n != 1 {
			t.Errorf("%d errors %q logged, want 1", n, msg)
		}
	}
	if n := logs.FilterLevelExact(zap.ErrorLevel).Len(); n != 2 {
		t.Errorf("%d errors logged, want 2: %v", n, logs.All())
	}
}

// Without the right to build the namespace the network is skipped with
// one warning, nothing watches for late ports, and the daemons are still
// restored.
func TestRestoreWithoutDataPlane(t *testing.T) {
	a, r, logs := restoreAgent(t, nil)
	done, bg := restoreUntilBackground(t, a, r, RestoreOptions{NoDataPlane: "not running as root"},
		[]string{"status: restoring network namespace"}, []string{"restore"})
	if err := bg.fns["restore"](); err != nil {
		t.Fatalf("restore job: %v", err)
	}
	if got, want := r.seen(), append([]string{"status: restoring network namespace"}, daemonSteps...); !slices.Equal(got, want) {
		t.Errorf("steps %q, want %q", got, want)
	}
	if err := <-done; err != nil {
		t.Errorf("outcome: %v", err)
	}
	warn := "not running as root: the data-plane namespace amphora-agent-unit-test-absent cannot be made"
	if n := logs.FilterMessageSnippet(warn).FilterLevelExact(zap.WarnLevel).Len(); n != 1 {
		t.Errorf("%d warnings %q, want 1", n, warn)
	}
}
