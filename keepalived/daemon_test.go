package keepalived

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/pidfile"
	"github.com/amphora-agent/amphora-agent/agent/procwatch"
	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// fakeKeepalived stands in for keepalived: it writes its pid to -p's file
// (and -c's, as the checker child would), says "reloaded" on SIGHUP,
// removes the pid files and exits on SIGTERM, and exits at once with
// status 1 while the file <dir>/refuse exists; while <dir>/hold exists it
// waits (up to 30 s) before writing its pid files, as a slow start, and
// after that wait exits with status 1 while <dir>/fail exists. Asked for
// --version, it notes the call in <dir>/version.calls and prints
// <dir>/version on stderr, as keepalived prints its banner.
const fakeKeepalived = `#!/bin/sh
pidfile=""
checkfile=/dev/null
dir=$(dirname "$0")
while [ $# -gt 0 ]; do
  case "$1" in
    -p) pidfile="$2"; shift ;;
    -c) checkfile="$2"; shift ;;
    --version) echo >> "$dir/version.calls"; cat "$dir/version" >&2; exit 0 ;;
  esac
  shift
done
if [ -e "$dir/refuse" ]; then echo "fake keepalived: refusing to start"; exit 1; fi
n=0
while [ -e "$dir/hold" ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done
if [ -e "$dir/fail" ]; then echo "fake keepalived: failing after a slow start"; exit 1; fi
trap 'echo reloaded' HUP
trap 'rm -f "$pidfile" "$checkfile"; exit 0' TERM
echo $$ > "$checkfile"
echo $$ > "$pidfile"
while :; do sleep 1 & wait $!; done
`

// A test run under nohup ignores SIGHUP, children inherit that, and a
// shell cannot trap a signal ignored when it started: the fake would never
// see a reload. A caught signal is reset in children instead, as in the
// agent, which catches SIGHUP for its own reload.
func init() { signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP) }

type fakeEnv struct {
	dir, base string
	opts      VRRPOptions
	// clock lets the backoff and the settle times pass at once.
	clock testkit.Delays
}

func newFakeEnv(t *testing.T) *fakeEnv {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "keepalived")
	if err := os.WriteFile(bin, []byte(fakeKeepalived), 0o755); err != nil {
		t.Fatal(err)
	}
	e := &fakeEnv{dir: dir, base: filepath.Join(dir, "lib")}
	e.opts = VRRPOptions{Base: e.base,
		Options: Options{Cmd: bin, Log: zaptest.NewLogger(t),
			Backoff: procwatch.Backoff{Count: 1, Interval: 100 * time.Millisecond, Max: 200 * time.Millisecond, Stable: time.Minute},
			After:   e.clock.After},
		Validate: func(context.Context, string) (string, error) { return "", nil }}
	t.Cleanup(func() {
		if pid, err := pidfile.Read(VRRPLayout{Base: e.base}.PidPath()); err == nil {
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	})
	return e
}

// vrrp is a VRRP supervision as one agent process would have it.
func (e *fakeEnv) vrrp(t *testing.T) *VRRP {
	v := NewVRRP(e.opts)
	t.Cleanup(v.Close)
	return v
}

func TestFakeKeepalivedStartReloadRespawnStop(t *testing.T) {
	e := newFakeEnv(t)
	v := e.vrrp(t)
	ctx := context.Background()
	if _, err := v.Start(ctx); err == nil {
		t.Fatal("start without a config succeeded")
	}
	if err := v.Upload(ctx, []byte("global_defs {}\n")); err != nil {
		t.Fatal(err)
	}
	if v.Running() {
		t.Fatal("upload started keepalived")
	}
	reloaded, err := v.Start(ctx)
	if err != nil || reloaded {
		t.Fatalf("start: reloaded %v, %v", reloaded, err)
	}
	pid := v.Pid()
	if got, _ := pidfile.Read(v.Layout().PidPath()); pid == 0 || got != pid {
		t.Fatalf("pid %d, pid file %d", pid, got)
	}
	// start of a running keepalived reloads it, as upstream.
	if reloaded, err := v.Start(ctx); err != nil || !reloaded || v.Pid() != pid {
		t.Fatalf("second start: reloaded %v, pid %d→%d, %v", reloaded, pid, v.Pid(), err)
	}
	testkit.WaitFor(t, 10*time.Second, "the reload reaching keepalived", func() bool {
		out, _ := os.ReadFile(v.Layout().LogPath())
		return strings.Contains(string(out), "reloaded")
	})
	// kill -9: restarted by the supervisor.
	syscall.Kill(pid, syscall.SIGKILL)
	// The new process is visible (Pid reads no lock) a moment before the
	// restart is counted in the history.
	testkit.WaitFor(t, 10*time.Second, "a respawned keepalived, counted", func() bool {
		p := v.Pid()
		return p != 0 && p != pid && v.k.d.History().Restarts > 0
	})
	if h := v.k.d.History(); h.Restarts != 1 || h.LastExit != "killed by signal killed" {
		t.Fatalf("history %+v", h)
	}
	// The start and the reload settled; the restart came at once (the
	// first of its streak) and settled too.
	settle := procwatch.DefaultSettle
	if got, want := e.clock.Asked(), []time.Duration{settle, settle, 0, settle}; !slices.Equal(got, want) {
		t.Fatalf("waits %v, want %v", got, want)
	}
	// stop: gone, recorded, and not brought back by a new agent.
	if err := v.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if v.Running() {
		t.Fatal("running after stop")
	}
	if running, recorded, _ := v.k.d.ReadDesired(); running || !recorded {
		t.Fatalf("stop recorded as running=%v recorded=%v", running, recorded)
	}
	v.Close()
	next := e.vrrp(t)
	if err := next.Restore(ctx); err != nil || next.Running() {
		t.Fatalf("restore after stop: running %v, %v", next.Running(), err)
	}
}

// An agent restart adopts the keepalived its predecessor started and goes
// on supervising it; a reboot (nothing running) starts it again.
func TestFakeKeepalivedAdoptedAndRestored(t *testing.T) {
	e := newFakeEnv(t)
	ctx := context.Background()
	first := e.vrrp(t)
	if err := first.Upload(ctx, []byte("global_defs {}\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pid := first.Pid()
	first.Close()

	second := e.vrrp(t)
	if err := second.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	if second.Pid() != pid {
		t.Fatalf("adopted pid %d, want %d", second.Pid(), pid)
	}
	// The adopted process is not the new agent's child; its death is still
	// seen and it is restarted.
	syscall.Kill(pid, syscall.SIGKILL)
	testkit.WaitFor(t, 10*time.Second, "the adopted keepalived respawned", func() bool { p := second.Pid(); return p != 0 && p != pid })
	pid = second.Pid()
	second.Close()
	// "Reboot": the process is gone, the desired state says running.
	syscall.Kill(pid, syscall.SIGKILL)
	testkit.WaitFor(t, 10*time.Second, "the old keepalived gone", func() bool { return syscall.Kill(pid, 0) != nil })
	third := e.vrrp(t)
	if err := third.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	if !third.Running() || third.Pid() == pid {
		t.Fatalf("restore after reboot: running %v pid %d", third.Running(), third.Pid())
	}
}

// A start that fails is answered with keepalived's output and retried
// until it works; a cancelled request changes nothing of that.
func TestFakeKeepalivedFailedStartRetried(t *testing.T) {
	e := newFakeEnv(t)
	v := e.vrrp(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := v.Upload(context.Background(), []byte("global_defs {}\n")); err != nil {
		t.Fatal(err)
	}
	refuse := filepath.Join(e.dir, "refuse")
	if err := os.WriteFile(refuse, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := v.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "refusing to start") {
		t.Fatalf("failed start: %v", err)
	}
	os.Remove(refuse)
	testkit.WaitFor(t, 10*time.Second, "the retried start", v.Running)
}

// keepalived --log-console prints its log records with a date; those go
// to syslog as well and are not forwarded, the rest is.
func TestIsLogLine(t *testing.T) {
	for line, want := range map[string]bool{
		"Mon Nov 30 16:09:07 2026: Starting Keepalived v2.2.7 (01/16,2022)": true,
		"Tue Dec  1 09:00:00 2026:               '/tmp/v.pid' '-c'":         true,
		"keepalived: unrecognized option '--bogus'":                         false,
		"Segmentation fault": false,
		"":                   false,
	} {
		if got := isLogLine([]byte(line)); got != want {
			t.Errorf("isLogLine(%q) = %v", line, got)
		}
	}
}

// A stop whose state cannot be recorded (a full disk, here a folder in
// the state file's place) still stops keepalived, and says what failed.
func TestFakeKeepalivedStopsWhenItsStateCannotBeRecorded(t *testing.T) {
	e := newFakeEnv(t)
	v := e.vrrp(t)
	ctx := context.Background()
	if err := v.Upload(ctx, []byte("global_defs {}\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pid := v.Pid()
	state := v.Layout().StatePath()
	if err := os.Remove(state); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(state, "blocker"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := v.Stop(ctx)
	if fe, ok := fault.As(err); !ok || fe.Kind != fault.KindInternal ||
		fe.Message != "keepalived stopped, but its stopped state could not be recorded" || fe.Details == "" {
		t.Fatalf("stop: %v", err)
	}
	if v.Running() || syscall.Kill(pid, 0) == nil {
		t.Fatalf("keepalived %d still runs after stop", pid)
	}
	if _, err := os.Stat(v.Layout().PidPath()); !os.IsNotExist(err) {
		t.Fatalf("pid file after stop: %v", err)
	}
}
