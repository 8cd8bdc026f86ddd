package health

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/config"
	"github.com/amphora-agent/amphora-agent/haproxy"
	"github.com/amphora-agent/amphora-agent/haproxy/stats"
	"github.com/amphora-agent/amphora-agent/haproxy/stats/haproxytest"
)

// statsServer answers every command on a UNIX socket like HAProxy's stats
// socket, with what answer returns; hang keeps connections open unanswered.
func statsServer(t *testing.T, path string, answer func() string, hang bool) {
	t.Helper()
	haproxytest.ServeFake(t, path, func(string) (string, bool) {
		if hang {
			return "", true
		}
		return answer(), false
	})
}

// makeLB lays out an LB as upstream does: <base>/<lb>/haproxy.cfg and,
// when pid is not 0, <base>/<lb>/<lb>.pid.
func makeLB(t *testing.T, base, lb string, pid int) {
	t.Helper()
	l := haproxy.Layout{Base: base}
	if err := os.MkdirAll(l.Dir(lb), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.ConfigPath(lb), []byte("global\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if pid != 0 {
		if err := os.WriteFile(l.PidPath(lb), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// frontendCSV is a `show stat` answer with one listener per id.
func frontendCSV(ids ...string) string {
	var b strings.Builder
	b.WriteString("# pxname,svname,status,weight,scur,stot,bin,bout,ereq,\n")
	for _, id := range ids {
		fmt.Fprintf(&b, "%s,FRONTEND,OPEN,,1,2,3,4,0,\n", id)
	}
	return b.String() + "\n"
}

// LBs are the folders of base_path with a haproxy.cfg; only those whose
// pid file names a live process are queried, on <base>/<lb>.sock (§7.13).
// An LB whose socket fails still leaves a heartbeat with the others, and a
// hung socket is bounded by the read timeout (§7.19).
func TestSenderLoadBalancers(t *testing.T) {
	base := haproxytest.ShortDir(t)
	hm := listen(t, "udp4", "127.0.0.1:0")
	self := os.Getpid()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	makeLB(t, base, "lb-sample", self) // running, answers the spec sample
	statsServer(t, filepath.Join(base, "lb-sample.sock"), func() string { return string(readTestdata(t, "show-stat-all.csv")) }, false)
	makeLB(t, base, "lb-other", self) // running, another listener
	statsServer(t, filepath.Join(base, "lb-other.sock"), func() string { return frontendCSV("other-listener") }, false)
	makeLB(t, base, "lb-nopid", 0) // configured, never started
	statsServer(t, filepath.Join(base, "lb-nopid.sock"), func() string { return frontendCSV("nopid-listener") }, false)
	makeLB(t, base, "lb-dead", dead.Process.Pid) // stale pid file
	statsServer(t, filepath.Join(base, "lb-dead.sock"), func() string { return frontendCSV("dead-listener") }, false)
	makeLB(t, base, "lb-refused", self) // running, socket missing
	makeLB(t, base, "lb-hung", self)    // running, socket never answers
	statsServer(t, filepath.Join(base, "lb-hung.sock"), nil, true)
	if err := os.MkdirAll(filepath.Join(base, "not-an-lb"), 0o755); err != nil { // no haproxy.cfg
		t.Fatal(err)
	}
	statsServer(t, filepath.Join(base, "not-an-lb.sock"), func() string { return frontendCSV("stray-listener") }, false)

	log, logs := observed()
	src := LayoutSource{Layout: haproxy.Layout{Base: base}, Timeout: 300 * time.Millisecond}
	s := newSender(t, testConfig(base, hm.dest()), log, src)
	start := time.Now()
	s.Cycle(context.Background())
	took := time.Since(start)
	m := hm.next(time.Second, testKey)

	var ids []string
	for id := range m.Listeners {
		ids = append(ids, id)
	}
	want := []string{"1e2d3c4b-5a69-4788-9a0b-c1d2e3f4a5b6", "7a8b9c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d", "other-listener"}
	if len(ids) != 3 || m.Listeners[want[0]].Status != "OPEN" || m.Listeners[want[1]].Status != "OPEN" || m.Listeners["other-listener"].Status != "OPEN" {
		t.Fatalf("listeners %v, want %v", ids, want)
	}
	if len(m.Pools) != 2 {
		t.Errorf("pools %v", m.Pools)
	}
	for _, lb := range []string{"lb-refused", "lb-hung"} {
		found := false
		for _, e := range logs.FilterMessage("HAProxy stats unavailable; the load balancer is left out of this heartbeat").All() {
			if e.ContextMap()["lb"] == lb {
				found = true
			}
		}
		if !found {
			t.Errorf("no warning for %s", lb)
		}
	}
	// The hung socket costs one read timeout, not a retry loop.
	if took > 10*time.Second {
		t.Errorf("the cycle took %v with a hung socket (read timeout 300ms)", took)
	}
	t.Logf("cycle with a refused and a hung socket took %v", took.Round(time.Millisecond))
}

// scriptedSource answers ShowStat from a script of outcomes per call.
type scriptedSource struct {
	mu      sync.Mutex
	running bool
	calls   int
	fail    func(call int) bool
	rows    []stats.Row
}

func (s *scriptedSource) LoadBalancers() ([]string, error) { return []string{"lb"}, nil }
func (s *scriptedSource) Running(string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running
}
func (s *scriptedSource) ShowStat(context.Context, string, *StatScratch) ([]stats.Row, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.fail(s.calls) {
		return nil, &stats.Error{Socket: "lb.sock", Command: "show stat -1 -1 -1", Err: errors.New("connection refused")}
	}
	return s.rows, nil
}

// The reload race rule (issue requirement 5): a failed read is retried
// briefly; if it keeps failing, the last good reading stands in for that
// one read only, never twice in a row, and never for an LB that stopped.
func TestReadFallbackOnce(t *testing.T) {
	rows := sampleRows(t, "")
	hm := listen(t, "udp4", "127.0.0.1:0")
	ctx := context.Background()
	listeners := func() int { return len(hm.next(time.Second, testKey).Listeners) }

	// A read that fails twice, then works: the retry hides it.
	src := &scriptedSource{running: true, rows: rows, fail: func(call int) bool { return call == 2 || call == 3 }}
	s := New(Options{Config: testConfig(t.TempDir(), hm.dest()), HAProxy: src, LVS: NoLVS{}, ReadRetryBudget: time.Second})
	s.Cycle(ctx)
	s.Cycle(ctx)
	if a, b := listeners(), listeners(); a != 2 || b != 2 || src.calls != 4 {
		t.Fatalf("retry: listeners %d, %d, calls %d; want 2, 2, 4", a, b, src.calls)
	}

	// Reads that keep failing: cached once, then the LB is left out until
	// a read works again; a cached reading adds no counter growth.
	failing := map[int]bool{}
	src = &scriptedSource{running: true, rows: rows, fail: func(call int) bool { return failing[call] }}
	log, logs := observed()
	s = New(Options{Config: testConfig(t.TempDir(), hm.dest()), Log: log, HAProxy: src, LVS: NoLVS{}, ReadRetryBudget: 50 * time.Millisecond})
	s.Cycle(ctx) // good
	if n := listeners(); n != 2 {
		t.Fatalf("first: %d listeners", n)
	}
	for c := 2; c < 100; c++ {
		failing[c] = true
	}
	s.Cycle(ctx) // fails → cached reading
	m := hm.next(time.Second, testKey)
	if len(m.Listeners) != 2 {
		t.Fatalf("cached: %d listeners, want 2", len(m.Listeners))
	}
	for id, l := range m.Listeners {
		if l.Stats.TX != 0 || l.Stats.RX != 0 || l.Stats.TotConns != 0 || l.Stats.Ereq != 0 {
			t.Errorf("cached reading of %s adds counters: %+v", id, l.Stats)
		}
	}
	if logs.FilterMessage("HAProxy stats unavailable; the previous reading stands in once").Len() != 1 {
		t.Error("standing in was not logged")
	}
	s.Cycle(ctx) // fails again → left out
	if n := listeners(); n != 0 {
		t.Fatalf("second failure in a row: %d listeners, want 0", n)
	}
	s.Cycle(ctx) // and again
	if n := listeners(); n != 0 {
		t.Fatalf("third failure: %d listeners, want 0", n)
	}
	clear(failing)
	s.Cycle(ctx) // works again
	if n := listeners(); n != 2 {
		t.Fatalf("recovered: %d listeners", n)
	}

	// The LB stopped (its process is gone) when the read failed: no cache.
	for c := src.calls + 1; c < src.calls+100; c++ {
		failing[c] = true
	}
	src.mu.Lock()
	src.running = false
	src.mu.Unlock()
	s.Cycle(ctx)
	if n := listeners(); n != 0 {
		t.Fatalf("stopped LB reported with %d listeners", n)
	}
	// Forget (called by the supervisor on stop/delete) drops the cache too.
	clear(failing)
	src.mu.Lock()
	src.running = true
	src.mu.Unlock()
	s.Cycle(ctx)
	listeners()
	s.Forget("lb")
	for c := src.calls + 1; c < src.calls+100; c++ {
		failing[c] = true
	}
	s.Cycle(ctx)
	if n := listeners(); n != 0 {
		t.Fatalf("forgotten LB reported with %d listeners", n)
	}
}

// A stats socket that stops answering holds no heartbeat back: its LB's
// last reading stands in while the read goes on; once the read has taken
// the slow-read limit the LB is left out, and the cycles stay short.
func TestWedgedStatsSocketDoesNotDelayHeartbeat(t *testing.T) {
	base := haproxytest.ShortDir(t)
	hm := listen(t, "udp4", "127.0.0.1:0")
	self := os.Getpid()
	makeLB(t, base, "lb-a-good", self)
	statsServer(t, filepath.Join(base, "lb-a-good.sock"), func() string { return frontendCSV("good-listener") }, false)
	makeLB(t, base, "lb-b-wedged", self)
	var wedged sync.Mutex
	hang := false
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	wedgedPath := filepath.Join(base, "lb-b-wedged.sock")
	statsServer(t, wedgedPath, func() string {
		wedged.Lock()
		h := hang
		wedged.Unlock()
		if h {
			<-stop // never answers while the test runs
			return ""
		}
		return frontendCSV("wedged-listener")
	}, false)
	makeLB(t, base, "lb-c-good", self)
	statsServer(t, filepath.Join(base, "lb-c-good.sock"), func() string { return frontendCSV("other-listener") }, false)

	cfg := withConfig(testConfig(base, hm.dest()), func(c *config.Config) { c.HeartbeatInterval = time.Second })
	const limit = 1500 * time.Millisecond
	s := New(Options{Config: cfg, Log: zap.NewNop(), HAProxy: LayoutSource{Layout: haproxy.Layout{Base: base}},
		LVS: NoLVS{}, SlowReadLimit: limit})
	s.Cycle(context.Background())
	if m := hm.next(10*time.Second, testKey); len(m.Listeners) != 3 {
		t.Fatalf("first heartbeat: listeners %v, want all three", m.Listeners)
	}
	wedged.Lock()
	hang = true
	wedged.Unlock()
	cycle := func(what string, wantWedged bool) {
		t.Helper()
		start := time.Now()
		s.Cycle(context.Background())
		took := time.Since(start)
		m := hm.next(10*time.Second, testKey)
		if _, ok := m.Listeners["good-listener"]; !ok || m.Listeners["other-listener"].Status != "OPEN" {
			t.Fatalf("%s: listeners %v: the answering LBs are missing", what, m.Listeners)
		}
		if _, present := m.Listeners["wedged-listener"]; present != wantWedged {
			t.Fatalf("%s: wedged LB present = %v, want %v", what, present, wantWedged)
		}
		// The soft deadline is 500 ms.
		if took > 2*time.Second {
			t.Fatalf("%s: the cycle took %v with a wedged stats socket", what, took)
		}
		t.Logf("%s: cycle with a wedged stats socket took %v", what, took.Round(time.Millisecond))
	}
	start := time.Now()
	cycle("while the read goes on", true)
	if !s.readEnded("lb-b-wedged", 10*time.Second) || !s.isUnresponsive("lb-b-wedged") {
		t.Fatal("the wedged LB's read did not end as unresponsive")
	}
	if waited := time.Since(start); waited < limit {
		t.Fatalf("unresponsive after %v, before the slow-read limit %v", waited, limit)
	}
	cycle("once unresponsive", false)
	cycle("still unresponsive", false)
}

// A HAProxy slow to answer its first stats read (a busy machine, a worker
// stopped for a moment) is waited for: the heartbeat comes late but
// carries its listeners, as upstream's, which blocks until HAProxy
// answers.
func TestSlowFirstReadIsWaitedFor(t *testing.T) {
	base := haproxytest.ShortDir(t)
	hm := listen(t, "udp4", "127.0.0.1:0")
	self := os.Getpid()
	makeLB(t, base, "lb-fast", self)
	statsServer(t, filepath.Join(base, "lb-fast.sock"), func() string { return frontendCSV("fast-listener") }, false)
	makeLB(t, base, "lb-slow", self)
	const delay = 1500 * time.Millisecond
	statsServer(t, filepath.Join(base, "lb-slow.sock"), func() string {
		time.Sleep(delay) // HAProxy taking its time
		return frontendCSV("slow-listener")
	}, false)
	cfg := withConfig(testConfig(base, hm.dest()), func(c *config.Config) { c.HeartbeatInterval = time.Second })
	s := newSender(t, cfg, nil, LayoutSource{Layout: haproxy.Layout{Base: base}})
	start := time.Now()
	s.Cycle(context.Background())
	took := time.Since(start)
	m := hm.next(10*time.Second, testKey)
	if len(m.Listeners) != 2 {
		t.Fatalf("first heartbeat after %v: listeners %v, want both", took, m.Listeners)
	}
	t.Logf("first heartbeat went after %v", took.Round(time.Millisecond))
}

// A HAProxy that stalls for 3 s (its worker stopped, say) after answering
// keeps its listeners in every heartbeat of the stall: its last reading
// stands in while the read goes on, and the cycles keep their pace.
func TestStalledHAProxyKeepsItsListeners(t *testing.T) {
	base := haproxytest.ShortDir(t)
	hm := listen(t, "udp4", "127.0.0.1:0")
	makeLB(t, base, "lb-stall", os.Getpid())
	var mu sync.Mutex
	var stalledUntil time.Time
	statsServer(t, filepath.Join(base, "lb-stall.sock"), func() string {
		mu.Lock()
		until := stalledUntil
		mu.Unlock()
		time.Sleep(time.Until(until)) // no wait when not stalled
		return frontendCSV("stall-listener")
	}, false)
	cfg := withConfig(testConfig(base, hm.dest()), func(c *config.Config) { c.HeartbeatInterval = time.Second })
	s := newSender(t, cfg, nil, LayoutSource{Layout: haproxy.Layout{Base: base}})
	s.Cycle(context.Background())
	if m := hm.next(10*time.Second, testKey); len(m.Listeners) != 1 {
		t.Fatalf("first heartbeat: listeners %v", m.Listeners)
	}
	const stall = 3 * time.Second
	mu.Lock()
	stalledUntil = time.Now().Add(stall)
	end := stalledUntil
	mu.Unlock()
	// The cycles of the stall, and two after it.
	cycles, after := 0, 0
	for ; after < 2; cycles++ {
		if !time.Now().Before(end) {
			after++
		}
		start := time.Now()
		s.Cycle(context.Background())
		took := time.Since(start)
		m := hm.next(10*time.Second, testKey)
		if _, ok := m.Listeners["stall-listener"]; !ok {
			t.Fatalf("heartbeat %d, %v into the stall: listener left out", cycles+1, start.Sub(end.Add(-stall)).Round(time.Millisecond))
		}
		if took > 2*time.Second {
			t.Fatalf("heartbeat %d: the cycle took %v during the stall", cycles, took)
		}
	}
	t.Logf("%d heartbeats during and after a %v stall, all with the listener", cycles, stall)
}

// Under CPU contention (busy loops on every core, as when the unit tier
// runs packages side by side under -race) a healthy LB is never left out
// of a heartbeat, the first one after start included.
func TestHealthyLoadBalancersUnderCPUContention(t *testing.T) {
	base := haproxytest.ShortDir(t)
	hm := listen(t, "udp4", "127.0.0.1:0")
	const lbs = 8
	for i := range lbs {
		lb := fmt.Sprintf("lb-%d", i)
		makeLB(t, base, lb, os.Getpid())
		statsServer(t, filepath.Join(base, lb+".sock"), func() string { return frontendCSV("listener-" + lb) }, false)
	}
	stop := make(chan struct{})
	var spinners sync.WaitGroup
	for range 2 * runtime.NumCPU() {
		spinners.Add(1)
		go func() {
			defer spinners.Done()
			for n := 0; ; n++ {
				if n%1024 == 0 {
					select {
					case <-stop:
						return
					default:
					}
				}
			}
		}()
	}
	defer func() { close(stop); spinners.Wait() }()
	cfg := withConfig(testConfig(base, hm.dest()), func(c *config.Config) { c.HeartbeatInterval = 200 * time.Millisecond })
	for round := range 3 {
		// A new sender each round: its first heartbeat has no earlier
		// reading to stand in.
		s := newSender(t, cfg, nil, LayoutSource{Layout: haproxy.Layout{Base: base}})
		for beat := range 3 {
			s.Cycle(context.Background())
			if m := hm.next(20*time.Second, testKey); len(m.Listeners) != lbs {
				t.Fatalf("round %d, heartbeat %d: %d listeners of %d", round, beat, len(m.Listeners), lbs)
			}
		}
	}
}

// The names a reading keeps must not point into the answer buffer, which
// the LB's next read overwrites; names seen in the previous reading are
// shared, not copied again.
func TestNamesOutliveTheBuffer(t *testing.T) {
	buf := []byte("member-a UP")
	var n names
	id := n.keep(unsafe.String(&buf[0], 8))
	copy(buf, "XXXXXXXX")
	if id != "member-a" {
		t.Fatalf("kept name changed with the buffer: %q", id)
	}
	n.trim()
	copy(buf, "member-a")
	if allocs := testing.AllocsPerRun(10, func() { n.keep(unsafe.String(&buf[0], 8)) }); allocs != 0 {
		t.Fatalf("a name from the previous reading was copied again (%v allocations)", allocs)
	}
	for i := range 100 {
		n.keep(fmt.Sprint("member-", i))
	}
	n.trim()
	n.keep("member-0")
	n.trim()
	if len(n.m) > 64 {
		t.Fatalf("names no longer read are still kept: %d", len(n.m))
	}
}
