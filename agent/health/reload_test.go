package health

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/amphora-agent/amphora-agent/haproxy"
	"github.com/amphora-agent/amphora-agent/haproxy/stats/haproxytest"
)

// The reload race against a real HAProxy in
// master-worker mode, laid out under base_path as the controller's config
// would be: while the master is reloaded with SIGUSR2 back to back, every
// heartbeat built reports all the LB's listeners.
func TestReloadRaceRealHAProxy(t *testing.T) {
	hp, s, hm, logs := startThreeListeners(t)
	ctx := context.Background()

	const reloads = 30
	var done atomic.Bool
	reloadErr := make(chan error, 1)
	go func() {
		defer done.Store(true)
		for range reloads {
			if _, err := hp.TryReload(); err != nil {
				reloadErr <- err
				return
			}
		}
	}()
	heartbeats, short := 0, 0
	// Milliseconds each on an idle machine; the unit tier beside busy
	// loops was seen to take seconds per reload.
	deadline := time.Now().Add(5 * time.Minute)
	for !done.Load() {
		if time.Now().After(deadline) {
			t.Fatal("reloads did not finish in 5 minutes")
		}
		s.Cycle(ctx)
		m := hm.next(5*time.Second, testKey)
		heartbeats++
		if len(m.Listeners) != 3 || len(m.Pools) != 3 {
			short++
			t.Errorf("heartbeat %d during reloads: %d listeners, %d pools; want 3 each", m.Seq, len(m.Listeners), len(m.Pools))
		}
	}
	select {
	case err := <-reloadErr:
		t.Fatalf("reload failed: %v", err)
	default:
	}
	proc, err := hp.ShowProc()
	if err != nil || proc.Reloads < reloads {
		t.Fatalf("master reloaded %d times (%v), want %d", proc.Reloads, err, reloads)
	}
	retried := logs.FilterMessage("stats read succeeded after retrying").Len()
	busy := logs.FilterMessage("HAProxy stats unavailable while the agent starts or reloads it; the previous reading stands in").Len()
	cached := logs.FilterMessage("HAProxy stats unavailable; the previous reading stands in once").Len()
	left := logs.FilterMessage("HAProxy stats unavailable; the load balancer is left out of this heartbeat").Len()
	t.Logf("%d reloads, %d heartbeats built during them: %d reads needed a retry, %d stand-ins while reloading were logged, %d used the previous reading once, %d left the LB out, %d short",
		proc.Reloads, heartbeats, retried, busy, cached, left, short)
	for _, e := range logs.FilterLevelExact(zapcore.WarnLevel).All() {
		t.Logf("warning: %s %v", e.Message, e.ContextMap())
	}

	// Stopped: the LB leaves the heartbeat at once, no cached stand-in. A
	// read begun before the stop (a slow one under load) rightly reports
	// the LB as it ran, so the stop waits for it.
	if !s.readEnded(testLB, 20*time.Second) {
		t.Fatal("a stats read still under way after 20 s")
	}
	hp.Stop()
	s.Cycle(ctx)
	if m := hm.next(5*time.Second, testKey); len(m.Listeners) != 0 {
		t.Fatalf("stopped LB still reported: %v", m.Listeners)
	}
	if _, err := os.Stat(filepath.Join(s.base, CountersFile)); err != nil {
		t.Error(err)
	}
}

// A reload whose worker is stalled (stopped here; starved of CPU or still
// starting in real life) does not hand its sockets over: HAProxy binds a
// new stats socket over the path after 1 s. The read queued on the old
// one meanwhile is answered by the new worker, and no heartbeat leaves
// the load balancer out, however long the old worker stays stalled (here
// until the end: longer than the read's 5 s limit).
func TestReloadStalledWorkerRealHAProxy(t *testing.T) {
	hp, s, hm, _ := startThreeListeners(t)
	ctx := context.Background()
	s.Cycle(ctx)
	if m := hm.next(5*time.Second, testKey); len(m.Listeners) != 3 {
		t.Fatalf("before the reload: %d listeners, want 3", len(m.Listeners))
	}
	hp.StallWorker()
	sock := haproxy.Layout{Base: s.base}.SocketPath(testLB)
	before, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	var done, replaced atomic.Bool
	reloadErr := make(chan error, 1)
	go func() {
		defer done.Store(true)
		_, err := hp.TryReload()
		now, serr := os.Stat(sock)
		replaced.Store(serr == nil && !os.SameFile(before, now))
		reloadErr <- err
	}()
	// Without following the new socket, the cycles after the reload would
	// wait for the read queued on the old one (2 s each) until its 5 s
	// limit left the LB out; four of them outlast it.
	after := 0
	for after < 4 {
		if done.Load() {
			if after == 0 && !replaced.Load() {
				t.Skip("this HAProxy kept the stats socket: nothing to follow")
			}
			after++
		}
		s.Cycle(ctx)
		if m := hm.next(10*time.Second, testKey); len(m.Listeners) != 3 || len(m.Pools) != 3 {
			t.Errorf("heartbeat %d around a reload with a stalled worker: %d listeners, %d pools; want 3 each", m.Seq, len(m.Listeners), len(m.Pools))
		}
	}
	if err := <-reloadErr; err != nil {
		t.Fatal(err)
	}
}

const testLB = "6f1c2b3a-9d8e-4f70-a1b2-c3d4e5f60718"

// startThreeListeners runs a real HAProxy in master-worker mode with an LB
// of three listeners, laid out under base_path as the controller's config
// would be, and a sender that reads it.
func startThreeListeners(t *testing.T) (*haproxytest.Process, *Sender, *receiver, *observer.ObservedLogs) {
	t.Helper()
	lb := testLB
	listenerIDs := []string{
		"1e2d3c4b-5a69-4788-9a0b-c1d2e3f4a5b6",
		"7a8b9c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d",
		"a0b1c2d3-e4f5-4a6b-8c7d-9e0f1a2b3c4d",
	}
	base := haproxytest.ShortDir(t)
	layout := haproxy.Layout{Base: base}
	if err := os.MkdirAll(layout.Dir(lb), 0o755); err != nil {
		t.Fatal(err)
	}
	member := haproxytest.FreePort(t)
	var cfg strings.Builder
	cfg.WriteString(haproxytest.Preamble(200, layout.SocketPath(lb)))
	for i, l := range listenerIDs {
		fmt.Fprintf(&cfg, `
frontend %[1]s
    bind 127.0.0.1:%[2]d
    default_backend pool-%[3]d:%[1]s

backend pool-%[3]d:%[1]s
    server member-%[3]d 127.0.0.1:%[4]d
`, l, haproxytest.FreePort(t), i, member)
	}
	hp := haproxytest.Start(t, haproxytest.Options{
		Config: cfg.String(), Dir: base, ConfigPath: layout.ConfigPath(lb), PidFile: layout.PidPath(lb),
		StatsSocket: layout.SocketPath(lb),
	})
	if !layout.Running(lb) {
		t.Fatalf("the layout does not see HAProxy (pid %d) running", hp.Pid())
	}
	hm := listen(t, "udp4", "127.0.0.1:0")
	log, logs := observed()
	// The harness answers for HAProxy as the agent's supervisor does.
	state := func(string) (bool, bool) { return hp.State() }
	return hp, New(Options{Config: testConfig(base, hm.dest()), Log: log, LVS: NoLVS{}, HAProxyState: state}), hm, logs
}
