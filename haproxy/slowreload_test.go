package haproxy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/amphora-agent/amphora-agent/agent/pidfile"
	"github.com/amphora-agent/amphora-agent/agent/procwatch"
	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// observed makes sup log to the test and to the returned observer.
func observed(t *testing.T, sup *Supervisor) *observer.ObservedLogs {
	core, logs := observer.New(zapcore.DebugLevel)
	sup.log = zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core))
	return logs
}

// waitLogged waits for a line containing one of texts and returns it.
func waitLogged(t *testing.T, logs *observer.ObservedLogs, timeout time.Duration, texts ...string) string {
	t.Helper()
	var found string
	testkit.WaitFor(t, timeout, fmt.Sprintf("a log line with one of %q", texts), func() bool {
		for _, e := range logs.All() {
			for _, s := range texts {
				if strings.Contains(e.Message, s) {
					found = e.Message
					return true
				}
			}
		}
		return false
	})
	return found
}

// slowLoading makes cfg load slowly in a master re-executing for a reload
// (HAProxy sets HAPROXY_MWORKER_REEXEC then), not in the check or the
// first start: a Lua script that sleeps.
func slowLoading(t *testing.T, cfg []byte, seconds int) []byte {
	t.Helper()
	script := filepath.Join(t.TempDir(), "slow.lua")
	lua := fmt.Sprintf("if os.getenv(\"HAPROXY_MWORKER_REEXEC\") then os.execute(\"sleep %d\") end\n", seconds)
	if err := os.WriteFile(script, []byte(lua), 0o644); err != nil {
		t.Fatal(err)
	}
	return []byte(strings.Replace(string(cfg), "global\n", "global\n    lua-load "+script+"\n", 1))
}

// slowReloadSupervisor is realSupervisor running lb1 on gen1, its log
// observed, answering a reload after 300 ms.
func slowReloadSupervisor(t *testing.T) (*Supervisor, *Store, int, *observer.ObservedLogs) {
	sup, st, port := realSupervisor(t)
	sup.opts.ReloadWait = 300 * time.Millisecond
	logs := observed(t, sup)
	startGen1(t, sup, st, port)
	return sup, st, port, logs
}

// A reload whose new worker comes later than ReloadWait, from a master
// that lives on, is answered as upstream's is (the controller's flow goes
// on) and followed: the new config serves and is the one loaded.
func TestSupervisorSlowReloadIsAnsweredAndFollowed(t *testing.T) {
	sup, st, port, logs := slowReloadSupervisor(t)
	ctx := context.Background()
	if err := st.Upload(ctx, "AMP1", "lb1", slowLoading(t, testConfig(st, port, "gen2"), 3)); err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Reload(ctx, "lb1"); err != nil {
		t.Fatalf("a slow reload was answered with an error: %v", err)
	}
	waitAnswer(t, port, "gen2")
	waitLogged(t, logs, 30*time.Second, "HAProxy finished loading the new configuration")
	if cfg, _ := st.Config("lb1"); !strings.Contains(string(cfg), "gen2") {
		t.Fatalf("stored config after the slow reload: %s", cfg)
	}
	if _, err := os.Stat(st.Layout.FailedPath("lb1")); err == nil {
		t.Fatal("the slow config was kept as failed")
	}
}

// A slow reload that fails after it was answered (the new config cannot
// bind) is rolled back in the background: the last good config is stored
// and serves, the failed one is kept aside.
func TestSupervisorSlowReloadThatFailsIsRolledBack(t *testing.T) {
	sup, st, port, logs := slowReloadSupervisor(t)
	ctx := context.Background()
	if err := st.Upload(ctx, "AMP1", "lb1", slowLoading(t, unbindable(t, st, port, "gen2"), 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Reload(ctx, "lb1"); err != nil {
		t.Fatalf("a slow reload was answered with an error: %v", err)
	}
	waitLogged(t, logs, 30*time.Second, "reload failed after it was answered")
	// The rollback runs under the load balancer's lock: taking it waits.
	sup.instance("lb1").d.With(func(*procwatch.Held) error { return nil })
	if cfg, _ := st.Config("lb1"); !strings.Contains(string(cfg), "gen1") {
		t.Fatalf("stored config after the background rollback: %s", cfg)
	}
	if failed, _ := os.ReadFile(st.Layout.FailedPath("lb1")); !strings.Contains(string(failed), "gen2") {
		t.Fatal("the config that failed is not kept as haproxy.cfg.new-failed")
	}
	waitAnswer(t, port, "gen1")
}

// A master that does not answer when the new worker is checked after a
// reload (stopped here; on a busy hypervisor, slow) is no proof that the
// worker died: the config that was loaded stays, and so does the master.
func TestSettleWatchLeavesAQuietMasterAlone(t *testing.T) {
	sup, st, port := realSupervisor(t)
	logs := observed(t, sup)
	var hold atomic.Bool
	release := make(chan time.Time)
	sup.opts.After = func(d time.Duration) <-chan time.Time {
		if d == settle && hold.Load() {
			return release
		}
		return time.After(d)
	}
	ctx := context.Background()
	startGen1(t, sup, st, port)
	if err := st.Upload(ctx, "AMP1", "lb1", testConfig(st, port, "gen2")); err != nil {
		t.Fatal(err)
	}
	hold.Store(true)
	if _, err := sup.Reload(ctx, "lb1"); err != nil {
		t.Fatal(err)
	}
	waitAnswer(t, port, "gen2")
	master, err := pidfile.Read(st.Layout.PidPath("lb1"))
	if err != nil {
		t.Fatal(err)
	}
	syscall.Kill(master, syscall.SIGSTOP)
	defer syscall.Kill(master, syscall.SIGCONT)
	close(release)
	line := waitLogged(t, logs, time.Minute, "did not answer after the reload", "putting the last good config back")
	syscall.Kill(master, syscall.SIGCONT)
	if !strings.Contains(line, "did not answer") {
		t.Fatalf("a master that did not answer made the agent act: %q", line)
	}
	if cfg, _ := st.Config("lb1"); !strings.Contains(string(cfg), "gen2") {
		t.Fatalf("stored config after the quiet master: %s", cfg)
	}
	if now, _ := pidfile.Read(st.Layout.PidPath("lb1")); now != master {
		t.Fatalf("master %d replaced by %d", master, now)
	}
	waitAnswer(t, port, "gen2")
}

// A reload whose operation runs out of time before ReloadWait does (the
// config check before the signal took most of it, on a busy amphora) is
// as slow as one past ReloadWait, not failed: answered and followed,
// never rolled back while the master goes on loading.
func TestSupervisorReloadPastTheOperationTimeIsFollowed(t *testing.T) {
	sup, st, port, logs := slowReloadSupervisor(t)
	sup.opts.ReloadWait = 10 * time.Second
	sup.opts.OperationTimeout = time.Second
	ctx := context.Background()
	if err := st.Upload(ctx, "AMP1", "lb1", slowLoading(t, testConfig(st, port, "gen2"), 3)); err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Reload(ctx, "lb1"); err != nil {
		t.Fatalf("a reload that outlasted the operation's time was answered with an error: %v", err)
	}
	waitAnswer(t, port, "gen2")
	waitLogged(t, logs, 30*time.Second, "HAProxy finished loading the new configuration")
	if cfg, _ := st.Config("lb1"); !strings.Contains(string(cfg), "gen2") {
		t.Fatalf("stored config after the slow reload: %s", cfg)
	}
}

// A reload signal the master never takes (HAProxy can lose one that lands
// as it finishes re-executing; dropped here) is sent again once the master
// answers with its old reload count: the new config serves within the
// reload's own wait, not never.
func TestSupervisorReloadSignalLostIsSentAgain(t *testing.T) {
	sup, st, port := realSupervisor(t)
	logs := observed(t, sup)
	startGen1(t, sup, st, port)
	var dropped atomic.Int32
	sup.kill = func(pid int, sig syscall.Signal) error {
		if sig == syscall.SIGUSR2 && dropped.CompareAndSwap(0, 1) {
			return nil
		}
		return syscall.Kill(pid, sig)
	}
	ctx := context.Background()
	if err := st.Upload(ctx, "AMP1", "lb1", testConfig(st, port, "gen2")); err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Reload(ctx, "lb1"); err != nil {
		t.Fatal(err)
	}
	if dropped.Load() != 1 {
		t.Fatal("the reload sent no signal")
	}
	if logs.FilterMessage("HAProxy is still loading the new configuration; answering now and following it").Len() != 0 {
		t.Fatal("the reload waited out ReloadWait for a signal the master never had")
	}
	if logs.FilterMessage("the HAProxy master did not take the reload signal; signalling it again").Len() != 1 {
		t.Fatal("the lost signal was not sent again")
	}
	waitAnswer(t, port, "gen2")
}
