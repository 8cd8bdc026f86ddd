package procwatch

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// strayScene is a daemon whose processes run `sleep <unique duration>`,
// so that Ours knows them among every other sleep on the machine.
type strayScene struct {
	spec  Spec
	sleep string
	cmds  []*exec.Cmd
}

func newStrayScene(t *testing.T) *strayScene {
	sc := &strayScene{sleep: fmt.Sprintf("60.%d", rand.Uint32())}
	dir := t.TempDir()
	pid := filepath.Join(dir, "daemon.pid")
	sc.spec = Spec{
		Name:         "daemon",
		Command:      shell("echo $$ > "+pid+"; exec sleep "+sc.sleep, &sc.cmds),
		PidPath:      pid,
		LogPath:      filepath.Join(dir, "daemon.log"),
		StatePath:    filepath.Join(dir, "state.json"),
		Ours:         func(args []string) bool { return len(args) == 2 && args[0] == "sleep" && args[1] == sc.sleep },
		StartTimeout: 5 * time.Second,
	}
	t.Cleanup(func() {
		for _, pid := range sc.running() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return sc
}

// restoreWanted restores a daemon recorded as wanted, as an agent's
// start-up does, failing t when that fails.
func restoreWanted(t *testing.T, spec Spec, done <-chan struct{}) *Daemon {
	t.Helper()
	d := NewDaemon(spec, done)
	err := d.With(func(h *Held) error {
		if err := h.SetDesired(true); err != nil {
			return err
		}
		return h.Restore(context.Background(), h.Start)
	})
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	return d
}

// stray starts a process of the scene's daemon outside any supervision,
// in its own process group and without writing the pid file.
func (sc *strayScene) stray(t *testing.T) int {
	c := exec.Command("sleep", sc.sleep)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	go c.Wait() // reaps it once killed, as its own agent would have
	return c.Process.Pid
}

// running lists the live processes of the scene's daemon.
func (sc *strayScene) running() []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if args, err := Cmdline("/proc", pid); err == nil && sc.spec.Ours(args) {
			out = append(out, pid)
		}
	}
	return out
}

// An agent restarted while its predecessor's process was still starting
// (no pid file yet), or whose pid file names some other process, starts
// a new one, and that start ends the process nobody supervises, so
// exactly one process of the daemon runs.
func TestStartEndsStrays(t *testing.T) {
	for _, c := range []struct {
		name  string
		stray func(t *testing.T, sc *strayScene) int
	}{
		{"NoPidFileYet", func(t *testing.T, sc *strayScene) int {
			return sc.stray(t)
		}},
		{"PidFileNamesAnother", func(t *testing.T, sc *strayScene) int {
			other := exec.Command("sleep", "60")
			if err := other.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { other.Process.Kill(); other.Wait() })
			testkit.WriteFile(t, sc.spec.PidPath, strconv.Itoa(other.Process.Pid)+"\n")
			return sc.stray(t)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sc := newStrayScene(t)
			stray := c.stray(t, sc)
			testkit.WaitFor(t, 5*time.Second, "the stray running", func() bool { return len(sc.running()) == 1 })

			done := make(chan struct{})
			defer close(done)
			d := restoreWanted(t, sc.spec, done)
			if !d.Running() {
				t.Fatal("restore started nothing")
			}
			// Unwanted first, as the kinds' stop does: a wanted daemon's
			// process that ends is respawned, and that one would write
			// into the test's folder after the test.
			defer d.With(func(h *Held) error {
				h.SetDesired(false)
				return h.Stop()
			})
			if got := sc.running(); len(got) != 1 || got[0] != d.Pid() {
				t.Fatalf("after the restore, %v run (the stray was %d, the new process %d): want the new one alone",
					got, stray, d.Pid())
			}
		})
	}
}
