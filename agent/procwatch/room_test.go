package procwatch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// sleeper is a Spec for a daemon that runs sleep, writes its pid file
// only when writePid, and whose folder has room only while room() says
// so. cmds collects the commands started.
func sleeper(t *testing.T, writePid bool, room func() bool, cmds *[]*exec.Cmd) Spec {
	dir := t.TempDir()
	pidPath := filepath.Join(dir, "daemon.pid")
	script := "exec sleep 30"
	if writePid {
		script = "echo $$ > " + pidPath + "; " + script
	}
	// A start the test wrongly let through leaves no sleep behind.
	t.Cleanup(func() {
		for _, cmd := range *cmds {
			if cmd.Process == nil {
				continue
			}
			// Only while the pid is still this test's sleep.
			if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", cmd.Process.Pid)); err == nil && strings.TrimSpace(string(comm)) == "sleep" {
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			}
		}
	})
	return Spec{
		Name:         "daemon",
		Command:      shell(script, cmds),
		PidPath:      pidPath,
		LogPath:      filepath.Join(dir, "daemon.log"),
		StatePath:    filepath.Join(dir, "state.json"),
		Ours:         func([]string) bool { return false },
		StartTimeout: 500 * time.Millisecond,
		Room: func(dir string) error {
			if room() {
				return nil
			}
			return &os.PathError{Op: "write", Path: filepath.Join(dir, ".room-1"), Err: syscall.ENOSPC}
		},
	}
}

// On a full disk nothing is started: the error says the disk is full.
func TestStartWithoutRoomStartsNothing(t *testing.T) {
	var cmds []*exec.Cmd
	done := make(chan struct{})
	defer close(done)
	d := NewDaemon(sleeper(t, true, func() bool { return false }, &cmds), done)
	var proc *Process
	err := d.With(func(h *Held) error {
		err := h.Start(context.Background())
		proc = h.Proc()
		return err
	})
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("start on a full disk: %v", err)
	}
	if len(cmds) != 1 || cmds[0].Process != nil || proc != nil {
		t.Fatalf("a process started on a full disk: %d commands, process %v", len(cmds), proc)
	}
}

// A daemon that has not written its pid file when StartTimeout passes
// does not count as started. When the disk filled up after the check it
// never will: it is killed at once and the error and the output say so.
func TestStartWithoutPidFileOnAFullDiskKillsTheDaemon(t *testing.T) {
	var cmds []*exec.Cmd
	checks := 0
	room := func() bool { checks++; return checks == 1 }
	done := make(chan struct{})
	defer close(done)
	d := NewDaemon(sleeper(t, false, room, &cmds), done)
	var proc *Process
	err := d.With(func(h *Held) error {
		err := h.Start(context.Background())
		proc = h.Proc()
		return err
	})
	if err == nil || proc != nil || len(cmds) != 1 {
		t.Fatalf("start without a pid file on a full disk: %v, process found %v, %d commands", err, proc != nil, len(cmds))
	}
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(Output(err), "no space left on device") {
		t.Fatalf("error %q, output %q", err, Output(err))
	}
	if perr := syscall.Kill(cmds[0].Process.Pid, 0); !errors.Is(perr, syscall.ESRCH) {
		t.Fatalf("daemon %d still there after the failed start: %v", cmds[0].Process.Pid, perr)
	}
}

// With room, a daemon alive without its pid file when StartTimeout passes
// is only slow: Start answers and keeps it, Starting says so, and once
// SlowStartLimit passes without the pid file it is killed.
func TestStartNotReadyIsFollowedThenKilled(t *testing.T) {
	var cmds []*exec.Cmd
	done := make(chan struct{})
	defer close(done)
	spec := sleeper(t, false, func() bool { return true }, &cmds)
	spec.SlowStartLimit = 500 * time.Millisecond
	d := NewDaemon(spec, done)
	var starting bool
	err := d.With(func(h *Held) error {
		err := h.Start(context.Background())
		starting = h.Starting() && h.Proc() != nil
		return err
	})
	if err != nil || !starting || d.Starting() == nil {
		t.Fatalf("slow start: %v, starting %v", err, starting)
	}
	testkit.WaitFor(t, 10*time.Second, "the daemon killed past SlowStartLimit", func() bool {
		return syscall.Kill(cmds[0].Process.Pid, 0) != nil && d.Starting() == nil
	})
	if len(cmds) != 1 {
		t.Fatalf("%d commands: a daemon not wanted was started again", len(cmds))
	}
}

// The real probe leaves nothing behind.
func TestProbeRoom(t *testing.T) {
	dir := t.TempDir()
	if err := probeRoom(dir); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("probe left %v", entries)
	}
	if err := probeRoom(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("probe of a missing folder passed")
	}
}

// shell is a Spec's Command running script, each command collected in
// cmds.
func shell(script string, cmds *[]*exec.Cmd) func() (*exec.Cmd, error) {
	return func() (*exec.Cmd, error) {
		cmd := exec.Command("sh", "-c", script)
		*cmds = append(*cmds, cmd)
		return cmd, nil
	}
}
