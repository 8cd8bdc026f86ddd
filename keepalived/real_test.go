package keepalived

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/amphora-agent/amphora-agent/agent/pidfile"
	"github.com/amphora-agent/amphora-agent/agent/procwatch"
)

// Real keepalived: a request already cancelled, or one whose client hangs
// up at once, still starts and reloads it completely, and exactly one
// keepalived runs the config.
func TestRealKeepalivedOutlivesTheRequest(t *testing.T) {
	bin, err := exec.LookPath("keepalived")
	if err != nil {
		t.Skip("keepalived is not installed (make test installs it)")
	}
	if os.Geteuid() != 0 {
		t.Skip("keepalived needs root")
	}
	base := t.TempDir()
	v := NewVRRP(VRRPOptions{Base: base, Options: Options{Cmd: bin, Log: zaptest.NewLogger(t)}})
	t.Cleanup(func() {
		v.Stop(context.Background())
		v.Close()
		if pid, err := pidfile.Read(v.Layout().PidPath()); err == nil {
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	})
	// A router id of its own: nothing else on the host is touched.
	if err := v.Upload(context.Background(), []byte("global_defs {\n    router_id aa_test_"+filepath.Base(base)+"\n}\n")); err != nil {
		t.Fatal(err)
	}
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
