package haproxy

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest/observer"

	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/pidfile"
	"github.com/amphora-agent/amphora-agent/agent/procwatch"
	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// slowStarting makes cfg load slowly, in any HAProxy that parses it while
// the returned marker file exists (a Lua script that sleeps): the test
// creates it after the upload, so that the check at upload stays fast.
func slowStarting(t *testing.T, cfg []byte, seconds int) (slow []byte, marker string) {
	t.Helper()
	dir := t.TempDir()
	marker = filepath.Join(dir, "slow")
	script := filepath.Join(dir, "slow.lua")
	lua := fmt.Sprintf("local f = io.open(%q) if f then f:close() os.execute(\"sleep %d\") end\n", marker, seconds)
	if err := os.WriteFile(script, []byte(lua), 0o644); err != nil {
		t.Fatal(err)
	}
	return []byte(strings.Replace(string(cfg), "global\n", "global\n    lua-load "+script+"\n", 1)), marker
}

// slowStartSupervisor is realSupervisor answering a start after 300 ms,
// its log observed.
func slowStartSupervisor(t *testing.T) (*Supervisor, *Store, int, *observer.ObservedLogs) {
	sup, st, port := realSupervisor(t)
	sup.opts.StartWait = 300 * time.Millisecond
	return sup, st, port, observed(t, sup)
}

// uploadSlow uploads cfg made slow to load and arms the slowness.
func uploadSlow(t *testing.T, st *Store, cfg []byte, seconds int) {
	t.Helper()
	slow, marker := slowStarting(t, cfg, seconds)
	if err := st.Upload(context.Background(), "AMP1", "lb1", slow); err != nil {
		t.Fatal(err)
	}
	testkit.WriteFile(t, marker, "")
}

// A start nobody waits on (a restore, a respawn: no caller) whose master
// is alive but still loading when StartWait passes is answered success,
// not killed: the same master goes on to serve the config, and the config
// becomes the last good one only after it served.
func TestSupervisorSlowStartIsAnsweredAndFollowed(t *testing.T) {
	sup, st, port, _ := slowStartSupervisor(t)
	uploadSlow(t, st, testConfig(st, port, "gen1"), 2)
	ctx := context.Background()
	begun := time.Now()
	if err := sup.Start(ctx, "lb1"); err != nil {
		t.Fatalf("a slow start was answered with an error: %v", err)
	}
	t.Logf("answered after %v", time.Since(begun).Round(time.Millisecond))
	pid := sup.instance("lb1").d.Pid()
	if pid == 0 {
		t.Fatal("no master runs after the slow start was answered")
	}
	if _, err := os.Stat(st.Layout.LastGoodPath("lb1")); err == nil {
		t.Fatal("a config still loading was made the last good one")
	}
	waitAnswer(t, port, "gen1")
	if now, _ := pidfile.Read(st.Layout.PidPath("lb1")); now != pid {
		t.Fatalf("master %d replaced by %d", pid, now)
	}
	testkit.WaitFor(t, 15*time.Second, "gen1 confirmed as the last good config", func() bool {
		good, _ := os.ReadFile(st.Layout.LastGoodPath("lb1"))
		return strings.Contains(string(good), "gen1")
	})
}

// A slow start that fails after it was answered (the new config cannot
// bind once loaded) is put right in the background: the last good config
// goes back and serves, the failed one is kept aside.
func TestSupervisorSlowStartThatFailsIsRolledBack(t *testing.T) {
	sup, st, port, logs := slowStartSupervisor(t)
	ctx := context.Background()
	startGen1(t, sup, st, port)
	// The stop confirms gen1, which served until then, once its start
	// (slow too on a busy machine) is known to be done.
	startDone(t, sup)
	if err := sup.Stop(ctx, "lb1"); err != nil {
		t.Fatal(err)
	}
	uploadSlow(t, st, unbindable(t, st, port, "gen2"), 2)
	if err := sup.Start(ctx, "lb1"); err != nil {
		t.Fatalf("a slow start was answered with an error: %v", err)
	}
	waitAnswer(t, port, "gen1")
	if cfg, _ := st.Config("lb1"); !strings.Contains(string(cfg), "gen1") {
		t.Fatalf("stored config after the background rollback: %s", cfg)
	}
	if failed, _ := os.ReadFile(st.Layout.FailedPath("lb1")); !strings.Contains(string(failed), "gen2") {
		t.Fatal("the config that failed is not kept as haproxy.cfg.new-failed")
	}
	waitLogged(t, logs, 10*time.Second, "HAProxy failed after its start was answered")
	startDone(t, sup)
}

// Without a different last good config, a slow start that fails is
// retried with backoff until it works (here: once the address it binds
// is free).
func TestSupervisorSlowStartThatFailsIsRetried(t *testing.T) {
	sup, st, port, logs := slowStartSupervisor(t)
	cfg := testConfig(st, port, "gen1")
	uploadSlow(t, st, cfg, 2)
	// The port is taken until the first start failed.
	busy, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	if err := sup.Start(context.Background(), "lb1"); err != nil {
		t.Fatalf("a slow start was answered with an error: %v", err)
	}
	waitLogged(t, logs, 30*time.Second, "HAProxy failed after its start was answered")
	busy.Close()
	waitAnswer(t, port, "gen1")
	startDone(t, sup)
}

// A reload that comes while a slow start loads the very config asked for
// changes nothing: the master loading it is left to finish.
func TestSupervisorReloadDuringASlowStartLeavesItAlone(t *testing.T) {
	sup, st, port, _ := slowStartSupervisor(t)
	sup.opts.ReloadWait = 300 * time.Millisecond
	uploadSlow(t, st, testConfig(st, port, "gen1"), 3)
	ctx := context.Background()
	if err := sup.Start(ctx, "lb1"); err != nil {
		t.Fatalf("a slow start was answered with an error: %v", err)
	}
	pid := sup.instance("lb1").d.Pid()
	started, err := sup.Reload(ctx, "lb1")
	if err != nil || started {
		t.Fatalf("reload during the slow start: started %v, %v", started, err)
	}
	waitAnswer(t, port, "gen1")
	if now, _ := pidfile.Read(st.Layout.PidPath("lb1")); now != pid {
		t.Fatalf("master %d replaced by %d", pid, now)
	}
	startDone(t, sup)
}

// A config HAProxy cannot load is still answered 500 with HAProxy's
// output as soon as the master exits, never held back for StartWait.
func TestSupervisorStartOfABadConfigFailsAtOnce(t *testing.T) {
	sup, st, port := realSupervisor(t)
	sup.opts.StartWait = time.Minute
	if err := st.Upload(context.Background(), "AMP1", "lb1", unbindable(t, st, port, "gen1")); err != nil {
		t.Fatal(err)
	}
	begun := time.Now()
	err := sup.Start(context.Background(), "lb1")
	took := time.Since(begun)
	fe, ok := fault.As(err)
	if !ok || fe.Message != "Error starting haproxy" || !strings.Contains(fe.Details, "cannot bind") {
		t.Fatalf("start of an unbindable config: %v", err)
	}
	if took > 30*time.Second {
		t.Fatalf("the failed start was answered after %v", took)
	}
	t.Logf("answered after %v", took.Round(time.Millisecond))
	// Ends the retries (they cannot bind either).
	if err := sup.Stop(context.Background(), "lb1"); err != nil {
		t.Fatal(err)
	}
}

// startDone waits until lb1's start, however slow, is over: none is
// followed any more and none holds the lock (a respawn).
func startDone(t *testing.T, sup *Supervisor) {
	t.Helper()
	d := sup.instance("lb1").d
	testkit.WaitFor(t, 30*time.Second, "lb1's start done", func() bool {
		d.With(func(*procwatch.Held) error { return nil })
		return d.Starting() == nil
	})
}
