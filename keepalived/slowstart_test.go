package keepalived

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/amphora-agent/amphora-agent/agent/pidfile"
	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// slowEnv is a fakeEnv whose starts are answered after 300 ms, its log
// observed, with <dir>/hold made: keepalived starts slowly until the test
// removes it (release).
func slowEnv(t *testing.T) (e *fakeEnv, logs *observer.ObservedLogs, release func()) {
	e = newFakeEnv(t)
	core, logs := observer.New(zapcore.DebugLevel)
	e.opts.Log = zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core))
	e.opts.StartWait = 300 * time.Millisecond
	hold := filepath.Join(e.dir, "hold")
	testkit.WriteFile(t, hold, "")
	release = func() { os.Remove(hold) }
	t.Cleanup(release)
	return e, logs, release
}

// A keepalived alive but without its pid file when StartWait passes, in a
// start nobody waits on (no caller), is answered for and followed, not
// killed. A reload asked for meanwhile is sent once it is ready: a SIGHUP
// before it set up its signals would end it.
func TestFakeKeepalivedSlowStartIsAnsweredAndFollowed(t *testing.T) {
	e, logs, release := slowEnv(t)
	v := e.vrrp(t)
	ctx := context.Background()
	if err := v.Upload(ctx, []byte("global_defs {}\n")); err != nil {
		t.Fatal(err)
	}
	if reloaded, err := v.Start(ctx); err != nil || reloaded {
		t.Fatalf("slow start: reloaded %v, %v", reloaded, err)
	}
	pid := v.Pid()
	if pid == 0 {
		t.Fatal("no keepalived runs after the slow start was answered")
	}
	if reloaded, err := v.Start(ctx); err != nil || !reloaded || v.Pid() != pid {
		t.Fatalf("start during the slow start: reloaded %v, pid %d→%d, %v", reloaded, pid, v.Pid(), err)
	}
	release()
	testkit.WaitFor(t, 20*time.Second, "the pid file naming the slow keepalived", func() bool {
		got, _ := pidfile.Read(v.Layout().PidPath())
		return got == pid
	})
	testkit.WaitFor(t, 20*time.Second, "the reload reaching keepalived once ready", func() bool {
		out, _ := os.ReadFile(v.Layout().LogPath())
		return strings.Contains(string(out), "reloaded")
	})
	if v.Pid() != pid || logs.FilterMessageSnippet("killing it").Len() != 0 {
		t.Fatalf("keepalived %d replaced by %d", pid, v.Pid())
	}
}

// A slow start that fails after it was answered is logged with
// keepalived's output and retried with backoff until it works.
func TestFakeKeepalivedSlowStartThatFailsIsRetried(t *testing.T) {
	e, logs, release := slowEnv(t)
	fail := filepath.Join(e.dir, "fail")
	testkit.WriteFile(t, fail, "")
	v := e.vrrp(t)
	ctx := context.Background()
	if err := v.Upload(ctx, []byte("global_defs {}\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Start(ctx); err != nil {
		t.Fatalf("slow start: %v", err)
	}
	release()
	testkit.WaitFor(t, 20*time.Second, "the late failure logged with its output", func() bool {
		for _, l := range logs.FilterMessageSnippet("failed after its start was answered").All() {
			if strings.Contains(l.ContextMap()["output"].(string), "failing after a slow start") {
				return true
			}
		}
		return false
	})
	os.Remove(fail)
	testkit.WaitFor(t, 20*time.Second, "keepalived started again", func() bool {
		got, _ := pidfile.Read(v.Layout().PidPath())
		return got != 0 && got == v.Pid()
	})
}

// A UDP/SCTP listener whose start was answered before its keepalived was
// ready stays busy (the heartbeat reports its last reading) until it is.
func TestLVSBusyWhileASlowStartIsFollowed(t *testing.T) {
	e, _, release := slowEnv(t)
	s := e.lvs(t)
	ctx := context.Background()
	if err := s.Upload(ctx, "l1", []byte(lvsConf)); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx, "l1"); err != nil {
		t.Fatalf("slow start: %v", err)
	}
	if !s.Busy("l1") {
		t.Fatal("not busy while the answered start goes on")
	}
	release()
	testkit.WaitFor(t, 20*time.Second, "the listener no longer busy", func() bool { return !s.Busy("l1") })
	if !s.Layout().Running("l1") {
		t.Fatal("keepalived not running once the start was done")
	}
}
