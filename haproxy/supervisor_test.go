package haproxy

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/journal"
	"go.uber.org/zap/zaptest"

	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/journalfwd"
	"github.com/amphora-agent/amphora-agent/agent/journalfwd/journalfwdtest"
	"github.com/amphora-agent/amphora-agent/agent/pidfile"
	"github.com/amphora-agent/amphora-agent/agent/procwatch"
	"github.com/amphora-agent/amphora-agent/agent/testkit"
	"github.com/amphora-agent/amphora-agent/haproxy/stats"
	"github.com/amphora-agent/amphora-agent/haproxy/stats/haproxytest"
)

// These tests run a real HAProxy in the test's own network namespace on
// loopback; no root needed.

func realSupervisor(t *testing.T) (*Supervisor, *Store, int) {
	t.Helper()
	return realSupervisorJournal(t, nil)
}

// realSupervisorJournal is realSupervisor sending HAProxy's output to j.
func realSupervisorJournal(t *testing.T, j journalfwd.Sink) (*Supervisor, *Store, int) {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy is not installed (make test installs it)")
	}
	dir, err := os.MkdirTemp("", "aa-sup-")
	if err != nil {
		t.Fatal(err)
	}
	st := realStore(t, bin, dir)
	sup := NewSupervisor(testOptions(t, st, j))
	t.Cleanup(func() {
		sup.Close()
		if pid, err := pidfile.Read(st.Layout.PidPath("lb1")); err == nil {
			syscall.Kill(-pid, syscall.SIGKILL)
		}
		os.RemoveAll(dir)
	})
	return sup, st, haproxytest.FreePort(t)
}

func testOptions(t *testing.T, st *Store, j journalfwd.Sink) SupervisorOptions {
	return SupervisorOptions{Store: st, Log: zaptest.NewLogger(t),
		Backoff:      procwatch.Backoff{Count: 1, Interval: 100 * time.Millisecond, Max: time.Second, Stable: time.Minute},
		ConfirmAfter: time.Second, Journal: j}
}

// realStore keeps its files under dir and checks with the real HAProxy bin.
func realStore(t *testing.T, bin, dir string) *Store {
	st := &Store{
		Layout:        Layout{Base: filepath.Join(dir, "lib")},
		HAProxyCmd:    bin,
		UserGroupFile: filepath.Join(dir, "user-group.conf"),
		Log:           zaptest.NewLogger(t),
	}
	// No user/group switch: the test may not run as root.
	if err := os.WriteFile(st.UserGroupFile, []byte("global\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return st
}

// unbindable is testConfig that passes the check but cannot bind: its
// second address is held by the test until it ends.
func unbindable(t *testing.T, st *Store, port int, body string) []byte {
	t.Helper()
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Close() })
	return append(testConfig(st, port, body), "    bind "+held.Addr().String()+"\n"...)
}

func testConfig(st *Store, port int, body string) []byte {
	return []byte(fmt.Sprintf(`global
    maxconn 100
    stats socket %s mode 0600 level admin
defaults
    mode http
    timeout connect 1s
    timeout client 5s
    timeout server 5s
frontend L1
    bind 127.0.0.1:%d
    http-request return status 200 content-type text/plain string "%s"
`, st.Layout.SocketPath("lb1"), port, body))
}

// startGen1 uploads and starts lb1 answering "gen1" on port.
func startGen1(t *testing.T, sup *Supervisor, st *Store, port int) {
	t.Helper()
	ctx := context.Background()
	if err := st.Upload(ctx, "AMP1", "lb1", testConfig(st, port, "gen1")); err != nil {
		t.Fatal(err)
	}
	if err := sup.Start(ctx, "lb1"); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, port, "gen1")
}

func answer(t *testing.T, port int) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.0\r\n\r\n")
	buf := make([]byte, 4096)
	n, _ := c.Read(buf)
	m := regexp.MustCompile(`gen\d+`).Find(buf[:n])
	return string(m)
}

func waitAnswer(t *testing.T, port int, want string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for answer(t, port) != want {
		if time.Now().After(deadline) {
			t.Fatalf("HAProxy never answered %q", want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A master killed again and again is restarted after the backoff of its
// crash streak, which doubles up to Max; a stop ends it for good. The
// waits are asked of the supervisor's clock, which lets them pass at once.
func TestSupervisorRespawnsAndStaysStopped(t *testing.T) {
	sup, st, port := realSupervisor(t)
	var clock testkit.Delays
	sup.opts.After = clock.After
	sup.opts.Backoff = procwatch.Backoff{Count: 1, Interval: time.Second, Max: 3 * time.Second, Stable: time.Minute}
	ctx := context.Background()
	startGen1(t, sup, st, port)
	for round := 0; round < 4; round++ {
		old, err := pidfile.Read(st.Layout.PidPath("lb1"))
		if err != nil {
			t.Fatal(err)
		}
		syscall.Kill(-old, syscall.SIGKILL)
		waitRespawned(t, sup, st, old)
		waitAnswer(t, port, "gen1")
	}
	// Each start settles; each restart waits its backoff first.
	s, settle := time.Second, procwatch.DefaultSettle
	want := []time.Duration{settle, 0, settle, 1 * s, settle, 2 * s, settle, 3 * s, settle}
	if got := clock.Asked(); !slices.Equal(got, want) {
		t.Fatalf("waits %v, want %v", got, want)
	}
	if err := sup.Stop(ctx, "lb1"); err != nil {
		t.Fatal(err)
	}
	if sup.Running("lb1") || answer(t, port) != "" {
		t.Fatal("still serving after stop")
	}
	if st2, _ := st.ReadState("lb1"); st2.Running {
		t.Fatal("stop not recorded")
	}
}

// waitRespawned waits until lb1 runs again, on a master other than old,
// its start done (Running is false until then).
func waitRespawned(t *testing.T, sup *Supervisor, st *Store, old int) {
	t.Helper()
	testkit.WaitFor(t, 15*time.Second, "lb1 respawned", func() bool {
		pid, err := pidfile.Read(st.Layout.PidPath("lb1"))
		return err == nil && pid != old && sup.Running("lb1")
	})
}

// HAProxy's output reaches the journal under haproxy-<lb>, with its level
// as the priority; after an agent restart (a new Supervisor adopting the
// running master) what the master says next arrives too, and nothing is
// sent twice.
func TestSupervisorForwardsHAProxyOutputToTheJournal(t *testing.T) {
	j := &journalfwdtest.Journal{}
	sup, st, port := realSupervisorJournal(t, j)
	ctx := context.Background()
	if err := st.Upload(ctx, "AMP1", "lb1", testConfig(st, port, "gen1")); err != nil {
		t.Fatal(err)
	}
	if err := sup.Start(ctx, "lb1"); err != nil {
		t.Fatal(err)
	}
	id := st.Layout.JournalIdentifier("lb1")
	has := func(sub string, n int) func([]string) bool {
		return func(lines []string) bool {
			c := 0
			for _, l := range lines {
				if strings.Contains(l, sub) {
					c++
				}
			}
			return c >= n
		}
	}
	j.WaitFor(t, 10*time.Second, id, "the first worker", has("New worker", 1))
	for _, e := range j.Entries() {
		if strings.HasPrefix(e.Message, "[NOTICE]") && e.Priority != journal.PriNotice {
			t.Errorf("%q sent at priority %d", e.Message, e.Priority)
		}
	}
	sup.Close()
	started := len(j.Messages(id))

	sup2 := NewSupervisor(testOptions(t, st, j))
	t.Cleanup(sup2.Close)
	if err := sup2.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Upload(ctx, "AMP1", "lb1", testConfig(st, port, "gen2")); err != nil {
		t.Fatal(err)
	}
	if _, err := sup2.Reload(ctx, "lb1"); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, port, "gen2")
	j.WaitFor(t, 10*time.Second, id, "the reload's worker", has("New worker", 2))
	lines := j.Messages(id)
	t.Logf("journal:\n%s", strings.Join(lines, "\n"))
	if has("New worker", 3)(lines) || len(lines) <= started {
		t.Fatalf("after the restart the journal holds %d lines, %d before", len(lines), started)
	}
}

func TestSupervisorRollsBackAFailedStart(t *testing.T) {
	sup, st, port := realSupervisor(t)
	ctx := context.Background()
	startGen1(t, sup, st, port)
	if err := sup.Stop(ctx, "lb1"); err != nil {
		t.Fatal(err)
	}
	// The new config passes the check but cannot bind: the port is taken.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	bad := append(testConfig(st, port, "gen2"), []byte(fmt.Sprintf("frontend L2\n    bind %s\n", busy.Addr()))...)
	if err := st.Upload(ctx, "AMP1", "lb1", bad); err != nil {
		t.Fatal(err)
	}
	err = sup.Start(ctx, "lb1")
	fe, ok := fault.As(err)
	if !ok || fe.Kind != fault.KindInternal || fe.Message != "Error starting haproxy" || !strings.Contains(fe.Details, "cannot bind") {
		t.Fatalf("start of an unbindable config: %v", err)
	}
	waitAnswer(t, port, "gen1")
	cfg, _ := os.ReadFile(st.Layout.ConfigPath("lb1"))
	if regexp.MustCompile(`gen2`).Match(cfg) {
		t.Fatal("stored config is still the failed one")
	}
	if failed, _ := os.ReadFile(st.Layout.FailedPath("lb1")); !regexp.MustCompile(`gen2`).Match(failed) {
		t.Fatal("failed config not kept as haproxy.cfg.new-failed")
	}
}

// currentWorker returns the pid of the master's current worker.
func currentWorker(t *testing.T, sup *Supervisor) int {
	t.Helper()
	tbl, err := stats.ShowProc(context.Background(), sup.store().Layout.MasterSocketPath("lb1"))
	if err != nil || len(tbl.Workers) == 0 {
		t.Fatalf("show proc: %+v %v", tbl, err)
	}
	return tbl.Workers[0]
}

// pendingTimers stands in for the clock of ConfirmAfter: nothing is
// confirmed until pass says the time has come.
type pendingTimers struct {
	mu  sync.Mutex
	fns []func()
}

func (p *pendingTimers) add(_ time.Duration, f func()) {
	p.mu.Lock()
	p.fns = append(p.fns, f)
	p.mu.Unlock()
}

// pass runs every pending timer, as if their time had passed.
func (p *pendingTimers) pass() {
	p.mu.Lock()
	fns := p.fns
	p.fns = nil
	p.mu.Unlock()
	for _, f := range fns {
		f()
	}
}

// TestSupervisorWorkerDeathAfterLoad: a config that kills HAProxy soon
// after it was loaded is replaced by the last good one before the
// restart; one that kept HAProxy up for ConfirmAfter is kept. The settle
// times and the backoff pass at once: a worker killed after a reload is
// always the master's death (OnDeath), never the settle watch's.
func TestSupervisorWorkerDeathAfterLoad(t *testing.T) {
	sup, st, port := realSupervisor(t)
	var confirm pendingTimers
	sup.opts.AfterFunc = confirm.add
	sup.opts.After = new(testkit.Delays).After
	ctx := context.Background()
	startGen1(t, sup, st, port)

	// gen2 loads, then its worker dies at once (as a runtime failure would).
	if err := st.Upload(ctx, "AMP1", "lb1", testConfig(st, port, "gen2")); err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Reload(ctx, "lb1"); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(currentWorker(t, sup), syscall.SIGKILL)
	waitAnswer(t, port, "gen1")
	if cfg, _ := st.Config("lb1"); !strings.Contains(string(cfg), "gen1") {
		t.Fatalf("stored config after the rollback: %s", cfg)
	}
	if failed, _ := os.ReadFile(st.Layout.FailedPath("lb1")); !strings.Contains(string(failed), "gen2") {
		t.Fatal("the config that failed is not kept as haproxy.cfg.new-failed")
	}

	// gen3 stays up past ConfirmAfter: a later crash restarts gen3.
	if err := st.Upload(ctx, "AMP1", "lb1", testConfig(st, port, "gen3")); err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Reload(ctx, "lb1"); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, port, "gen3")
	confirm.pass()
	if good, _ := os.ReadFile(st.Layout.LastGoodPath("lb1")); !strings.Contains(string(good), "gen3") {
		t.Fatalf("last good config once gen3 stayed up for ConfirmAfter: %s", good)
	}
	master, _ := pidfile.Read(st.Layout.PidPath("lb1"))
	syscall.Kill(currentWorker(t, sup), syscall.SIGKILL)
	waitRespawned(t, sup, st, master)
	waitAnswer(t, port, "gen3")
}

// TestRestoreNeverAdoptsAForeignProcess: a pid file naming some other
// process (a recycled pid after a reboot) is neither adopted nor killed;
// the load balancer is started afresh.
func TestRestoreNeverAdoptsAForeignProcess(t *testing.T) {
	sup, st, port := realSupervisor(t)
	ctx := context.Background()
	if err := st.Upload(ctx, "AMP1", "lb1", testConfig(st, port, "gen1")); err != nil {
		t.Fatal(err)
	}
	state, _ := st.ReadState("lb1")
	state.Running = true
	if err := st.WriteState("lb1", state); err != nil {
		t.Fatal(err)
	}
	foreign := exec.Command("sleep", "60")
	if err := foreign.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { foreign.Process.Kill(); foreign.Wait() })
	if err := os.WriteFile(st.Layout.PidPath("lb1"), []byte(strconv.Itoa(foreign.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sup.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, port, "gen1")
	if syscall.Kill(foreign.Process.Pid, 0) != nil {
		t.Fatal("the foreign process was killed")
	}
	if pid, _ := pidfile.Read(st.Layout.PidPath("lb1")); pid == foreign.Process.Pid {
		t.Fatal("the foreign process was adopted as the HAProxy master")
	}
}

// A reload that fails right after a load (the running config not yet
// confirmed) goes back to that running config: the last good config is
// written while the master reloads, and the rollback waits for it.
func TestSupervisorFailedReloadWaitsForTheLastGoodWrite(t *testing.T) {
	sup, st, port := realSupervisor(t)
	sup.opts.ConfirmAfter = time.Hour
	// The write is held until the reload joins it, which happens once the
	// master has reported the failure: a rollback that did not join first
	// would find no last good config. The deadline only ends a write that
	// no reload joins.
	joined := make(chan struct{})
	var once sync.Once
	lastGoodJoining = func() { once.Do(func() { close(joined) }) }
	lastGoodWriting = func() {
		select {
		case <-joined:
		case <-time.After(10 * time.Second):
		}
	}
	t.Cleanup(func() { lastGoodJoining, lastGoodWriting = func() {}, func() {} })
	ctx := context.Background()
	startGen1(t, sup, st, port)
	if err := st.Upload(ctx, "AMP1", "lb1", unbindable(t, st, port, "gen2")); err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Reload(ctx, "lb1"); err == nil {
		t.Fatal("the reload of a config that cannot bind succeeded")
	}
	if cfg, _ := st.Config("lb1"); !strings.Contains(string(cfg), "gen1") {
		t.Fatalf("stored config after the failed reload: %s", cfg)
	}
	waitAnswer(t, port, "gen1")
}
