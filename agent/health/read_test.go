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
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/amphora-agent/amphora-agent/agent/config"
	"github.com/amphora-agent/amphora-agent/agent/testkit"
	"github.com/amphora-agent/amphora-agent/haproxy"
	"github.com/amphora-agent/amphora-agent/haproxy/stats"
	"github.com/amphora-agent/amphora-agent/haproxy/stats/haproxytest"
)

// statsServer answers every command on a UNIX socket like HAProxy's stats
// socket, with what answer returns; hang keeps connections open unanswered.
// The fake socket it returns lists the commands it received.
func statsServer(t *testing.T, path string, answer func() string, hang bool) *haproxytest.FakeSocket {
	t.Helper()
	return haproxytest.ServeFake(t, path, func(string) (string, bool) {
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
	hung := statsServer(t, filepath.Join(base, "lb-hung.sock"), nil, true)
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
	// The hung socket costs one read and the one question more after its
	// time-out, not a retry loop: counted, not timed, so that a loaded
	// machine cannot fail it.
	if n := len(hung.Commands()); n > 2 {
		t.Errorf("the hung socket was asked %d times in one cycle, want at most 2", n)
	}
	t.Logf("cycle with a refused and a hung socket took %v", took.Round(time.Millisecond))
}

// scriptedSource answers ShowStat from a script of outcomes per call.
type scriptedSource struct {
	mu      sync.Mutex
	running bool
	busy    bool
	calls   int
	fail    func(call int) bool
	rows    []stats.Row
}

func (s *scriptedSource) LoadBalancers() ([]string, error) { return []string{"lb"}, nil }
func (s *scriptedSource) State(string) LBState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return LBState{Running: s.running, Busy: s.busy}
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

// The reload race rule: a failed read is retried
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

// pacedSource is an HAProxySource for a synctest bubble: its LBs run, and
// each answers with one listener, <lb>-listener, after wait(lb); a
// negative wait never answers (the read lasts until it is cut off).
type pacedSource struct {
	lbs  []string
	wait func(lb string) time.Duration
}

func (p pacedSource) LoadBalancers() ([]string, error) { return p.lbs, nil }
func (p pacedSource) State(string) LBState             { return LBState{Running: true} }
func (p pacedSource) ShowStat(ctx context.Context, lb string, _ *StatScratch) ([]stats.Row, error) {
	var answered <-chan time.Time
	if d := p.wait(lb); d >= 0 {
		answered = time.After(d)
	}
	select {
	case <-answered:
		return stats.ParseStat([]byte(frontendCSV(lb + "-listener")))
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// pacedSender is a sender over src at a 1 s interval (a 500 ms soft
// deadline), its heartbeats seen by log.
func pacedSender(t *testing.T, src pacedSource, limit time.Duration, log *beatLog) *Sender {
	hm := listen(t, "udp4", "127.0.0.1:0")
	cfg := withConfig(testConfig(t.TempDir(), hm.dest()), func(c *config.Config) { c.HeartbeatInterval = time.Second })
	return New(Options{Config: cfg, HAProxy: src, LVS: NoLVS{}, SlowReadLimit: limit, Sent: log.sent})
}

// timedCycle runs one cycle and returns its heartbeat and how long the
// cycle took on the bubble's clock.
func timedCycle(t *testing.T, s *Sender, log *beatLog) (Message, time.Duration) {
	t.Helper()
	before := len(log.all())
	start := time.Now()
	s.Cycle(context.Background())
	took := time.Since(start)
	beats := log.all()
	if len(beats) != before+1 {
		t.Fatalf("a cycle sent %d heartbeats, want 1", len(beats)-before)
	}
	return beats[before].msg, took
}

// soft is the soft deadline of a 1 s interval.
const soft = 500 * time.Millisecond

// A stats socket that stops answering holds no heartbeat back: its LB's
// last reading stands in for the soft deadline's wait while the read goes
// on; once the read has taken the slow-read limit the LB is left out, and
// the cycles still wait only the soft deadline. In a synctest bubble the
// waits are exact.
func TestWedgedStatsSocketDoesNotDelayHeartbeat(t *testing.T) {
	var wedged atomic.Bool
	src := pacedSource{lbs: []string{"lb-a-good", "lb-b-wedged", "lb-c-good"}, wait: func(lb string) time.Duration {
		if lb == "lb-b-wedged" && wedged.Load() {
			return -1
		}
		return 0
	}}
	const limit = 1500 * time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		log := &beatLog{t: t}
		s := pacedSender(t, src, limit, log)
		if m, took := timedCycle(t, s, log); len(m.Listeners) != 3 || took != 0 {
			t.Fatalf("first heartbeat after %v: listeners %v, want all three at once", took, m.Listeners)
		}
		wedged.Store(true)
		cycle := func(what string, wantWedged bool) {
			t.Helper()
			m, took := timedCycle(t, s, log)
			if _, ok := m.Listeners["lb-a-good-listener"]; !ok || m.Listeners["lb-c-good-listener"].Status != "OPEN" {
				t.Fatalf("%s: listeners %v: the answering LBs are missing", what, m.Listeners)
			}
			if _, present := m.Listeners["lb-b-wedged-listener"]; present != wantWedged {
				t.Fatalf("%s: wedged LB present = %v, want %v", what, present, wantWedged)
			}
			if took != soft {
				t.Fatalf("%s: the cycle took %v with a wedged stats socket, want the soft deadline %v", what, took, soft)
			}
		}
		start := time.Now()
		cycle("while the read goes on", true)
		if !s.readEnded("lb-b-wedged", 10*time.Second) || !s.isUnresponsive("lb-b-wedged") {
			t.Fatal("the wedged LB's read did not end as unresponsive")
		}
		if waited, want := time.Since(start), limit+recheckLimit; waited != want {
			t.Fatalf("unresponsive after %v, want the slow-read limit and the recheck, %v", waited, want)
		}
		cycle("once unresponsive", false)
		cycle("still unresponsive", false)
		// A bubble ends only once its goroutines have: the last read too.
		s.readEnded("lb-b-wedged", limit+recheckLimit)
	})
}

// A read that outlasts the slow-read limit because the agent got no CPU
// (its timers all fire at once when it runs again, before HAProxy had the
// chance to answer) is followed by one more read, which HAProxy answers
// at once: the LB is not unresponsive and keeps its listeners.
func TestReadPastTheLimitIsAskedOnceMore(t *testing.T) {
	var reads atomic.Int32
	src := pacedSource{lbs: []string{"lb-starved"}, wait: func(string) time.Duration {
		if reads.Add(1) == 2 {
			return -1 // the read during which the agent was starved
		}
		return 0
	}}
	const limit = 1500 * time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		log := &beatLog{t: t}
		s := pacedSender(t, src, limit, log)
		if m, _ := timedCycle(t, s, log); len(m.Listeners) != 1 {
			t.Fatalf("first heartbeat: listeners %v", m.Listeners)
		}
		timedCycle(t, s, log)
		if !s.readEnded("lb-starved", 10*time.Second) {
			t.Fatal("the read did not end")
		}
		if s.isUnresponsive("lb-starved") {
			t.Fatal("an LB that answered the read after the limit is unresponsive")
		}
		if m, _ := timedCycle(t, s, log); len(m.Listeners) != 1 {
			t.Fatalf("heartbeat after the starved read: listeners %v, want the LB's", m.Listeners)
		}
		if n := reads.Load(); n != 4 {
			t.Fatalf("%d reads, want 4 (the starved one asked once more)", n)
		}
	})
}

// A HAProxy slow to answer its first stats read (a busy machine, a worker
// stopped for a moment) is waited for: the heartbeat comes late but
// carries its listeners, as upstream's, which blocks until HAProxy
// answers.
func TestSlowFirstReadIsWaitedFor(t *testing.T) {
	const delay = 1500 * time.Millisecond
	src := pacedSource{lbs: []string{"lb-fast", "lb-slow"}, wait: func(lb string) time.Duration {
		if lb == "lb-slow" {
			return delay // HAProxy taking its time
		}
		return 0
	}}
	synctest.Test(t, func(t *testing.T) {
		log := &beatLog{t: t}
		s := pacedSender(t, src, 0, log)
		if m, took := timedCycle(t, s, log); len(m.Listeners) != 2 || took != delay {
			t.Fatalf("first heartbeat after %v: listeners %v, want both after %v", took, m.Listeners, delay)
		}
	})
}

// A HAProxy that stalls for 3 s (its worker stopped, say) after answering
// keeps its listeners in every heartbeat of the stall: its last reading
// stands in while the read goes on, and each cycle waits no longer than
// the soft deadline.
func TestStalledHAProxyKeepsItsListeners(t *testing.T) {
	var mu sync.Mutex
	var stalledUntil time.Time
	src := pacedSource{lbs: []string{"lb-stall"}, wait: func(string) time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return max(time.Until(stalledUntil), 0) // no wait when not stalled
	}}
	synctest.Test(t, func(t *testing.T) {
		log := &beatLog{t: t}
		s := pacedSender(t, src, 0, log)
		if m, _ := timedCycle(t, s, log); len(m.Listeners) != 1 {
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
			start := time.Now()
			if !start.Before(end) {
				after++
			}
			m, took := timedCycle(t, s, log)
			if _, ok := m.Listeners["lb-stall-listener"]; !ok {
				t.Fatalf("heartbeat %d, %v into the stall: listener left out", cycles+1, start.Sub(end.Add(-stall)))
			}
			if want := min(max(end.Sub(start), 0), soft); took != want {
				t.Fatalf("heartbeat %d, %v into the stall: the cycle took %v, want %v", cycles+1, start.Sub(end.Add(-stall)), took, want)
			}
		}
		if want := int(stall/soft) + 2; cycles != want {
			t.Fatalf("%d heartbeats during and after a %v stall, want %d", cycles, stall, want)
		}
	})
}

// Under CPU contention (busy loops on every core, as when the unit tier
// runs packages side by side under -race) a healthy LB is never left out
// of a heartbeat, the first one after start included. The loops are other
// processes, as HAProxy's rivals for the CPU are: spinning goroutines
// would also queue the stand-in stats servers, which run in this process
// where HAProxy would not, behind them (3 of 8 LBs out once, in a unit
// run beside two more busy loops and other packages under -race).
func TestHealthyLoadBalancersUnderCPUContention(t *testing.T) {
	base := haproxytest.ShortDir(t)
	hm := listen(t, "udp4", "127.0.0.1:0")
	const lbs = 8
	for i := range lbs {
		lb := fmt.Sprintf("lb-%d", i)
		makeLB(t, base, lb, os.Getpid())
		statsServer(t, filepath.Join(base, lb+".sock"), func() string { return frontendCSV("listener-" + lb) }, false)
	}
	testkit.BusyLoops(t, 2*runtime.NumCPU())
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
