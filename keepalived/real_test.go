package keepalived

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/amphora-agent/amphora-agent/agent/journalfwd"
	"github.com/amphora-agent/amphora-agent/agent/journalfwd/journalfwdtest"
	"github.com/amphora-agent/amphora-agent/agent/pidfile"
	"github.com/amphora-agent/amphora-agent/agent/procwatch"
	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// Real keepalived: a request already cancelled, or one whose client hangs
// up at once, still starts and reloads it completely, and exactly one
// keepalived runs the config.
func TestRealKeepalivedOutlivesTheRequest(t *testing.T) {
	v := realVRRP(t, nil)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := v.Start(gone); err != nil {
		t.Fatalf("start with a cancelled request: %v", err)
	}
	pid := v.Pid()
	hangUp, cancel2 := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel2()
	if reloaded, err := v.Start(hangUp); err != nil || !reloaded {
		t.Fatalf("reload with a request that hung up: reloaded %v, %v", reloaded, err)
	}
	if v.Pid() != pid || !v.Running() {
		t.Fatalf("keepalived %d replaced by %d", pid, v.Pid())
	}
	if n := keepaliveds(v.Layout().ConfigPath()); n != 1 {
		t.Fatalf("%d keepalived main processes run the config, want 1", n)
	}
}

// realVRRP is the VRRP keepalived of a config that touches nothing (a
// router id of its own), uploaded, not started; j receives its output.
func realVRRP(t *testing.T, j journalfwd.Sink) *VRRP {
	t.Helper()
	bin, err := exec.LookPath("keepalived")
	if err != nil {
		t.Skip("keepalived is not installed (make test installs it)")
	}
	testkit.RequireRoot(t, "runs keepalived")
	base := t.TempDir()
	v := NewVRRP(VRRPOptions{Base: base, Options: Options{Cmd: bin, Log: zaptest.NewLogger(t), Journal: j}})
	t.Cleanup(func() {
		v.Stop(context.Background())
		v.Close()
		if pid, err := pidfile.Read(v.Layout().PidPath()); err == nil {
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	})
	if err := v.Upload(context.Background(), []byte("global_defs {\n    router_id aa_test_"+filepath.Base(base)+"\n}\n")); err != nil {
		t.Fatal(err)
	}
	return v
}

// keepaliveds counts the keepalived instances running conf. The agent
// starts each in a process group of its own, which its VRRP and checker
// children (same command line) share: one group is one instance.
func keepaliveds(conf string) int {
	groups := map[int]bool{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		args, err := procwatch.Cmdline("/proc", pid)
		if err != nil || !slices.Contains(args, conf) {
			continue
		}
		if pgid, err := syscall.Getpgid(pid); err == nil {
			groups[pgid] = true
		}
	}
	return len(groups)
}

// Under systemd a real keepalived's log records reach the journal through
// syslog only: none of the log lines of its output file is forwarded,
// while a line it writes outside its log is, under octavia-keepalived.
func TestRealKeepalivedOutputReachesTheJournalOnce(t *testing.T) {
	j := &journalfwdtest.Journal{}
	v := realVRRP(t, j)
	if _, err := v.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	logPath := v.Layout().LogPath()
	out, _ := os.ReadFile(logPath)
	if !strings.Contains(string(out), "Starting Keepalived") {
		t.Fatalf("keepalived's output file lacks its log lines: %q", out)
	}
	// A line of the kind keepalived writes outside its log; forwarding is
	// in order, so once it is in, everything before it was looked at.
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("keepalived: not a log record\n")
	f.Close()
	j.WaitFor(t, 10*time.Second, "octavia-keepalived", "the line outside the log",
		func(l []string) bool { return len(l) > 0 })
	if got := j.Messages(""); len(got) != 1 || got[0] != "keepalived: not a log record" {
		t.Fatalf("the journal holds %q", got)
	}
}
