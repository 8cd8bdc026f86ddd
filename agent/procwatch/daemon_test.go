package procwatch

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/journalfwd"
	"github.com/amphora-agent/amphora-agent/agent/journalfwd/journalfwdtest"
	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// A Held is the lock itself: one kept past With's callback cannot be used.
func TestHeldIsVoidAfterWith(t *testing.T) {
	d := NewDaemon(Spec{Name: "daemon", StatePath: filepath.Join(t.TempDir(), "state.json")}, nil)
	var kept *Held
	d.With(func(h *Held) error { kept = h; return nil })
	defer func() {
		if recover() == nil {
			t.Fatal("a Held kept past With still worked")
		}
	}()
	kept.SetDesired(true)
}

// startAndStop starts and stops d n times, failing t on any error.
func startAndStop(t *testing.T, d *Daemon, n int) {
	t.Helper()
	err := d.With(func(h *Held) error {
		for range n {
			if err := h.Start(context.Background()); err != nil {
				return err
			}
			if err := h.Stop(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The output file holds one run: a start moves the previous run's output
// to <log>.1, so a crash loop cannot grow it. Each start waits the
// default settle time, asked of the spec's clock.
func TestStartRotatesTheOutputFile(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "daemon.log")
	done := make(chan struct{})
	defer close(done)
	spec := echoSpec(dir, logPath)
	var clock testkit.Delays
	spec.After = clock.After
	d := NewDaemon(spec, done)
	startAndStop(t, d, 3)
	if got, want := clock.Asked(), []time.Duration{DefaultSettle, DefaultSettle, DefaultSettle}; !slices.Equal(got, want) {
		t.Fatalf("three starts waited %v, want %v", got, want)
	}
	cur, _ := os.ReadFile(logPath)
	prev, _ := os.ReadFile(logPath + ".1")
	if strings.TrimSpace(string(cur)) != "run 3" || strings.TrimSpace(string(prev)) != "run 2" {
		t.Fatalf("log %q, previous %q", cur, prev)
	}
}

// echoSpec is a daemon that says "run <n>" on its n-th start, then sleeps.
func echoSpec(dir, logPath string) Spec {
	run := 0
	pidPath := filepath.Join(dir, "daemon.pid")
	return Spec{
		Name: "daemon",
		Command: func() (*exec.Cmd, error) {
			run++
			return exec.Command("sh", "-c", "echo $$ > "+pidPath+"; echo run "+string(rune('0'+run))+"; exec sleep 30"), nil
		},
		PidPath:   pidPath,
		LogPath:   logPath,
		StatePath: filepath.Join(dir, "state.json"),
		Ours:      func([]string) bool { return false },
		// Ready once this run has said so.
		Ready: func(context.Context, *Process) bool {
			out, _ := os.ReadFile(logPath)
			return strings.HasPrefix(string(out), "run ")
		},
	}
}

// A running daemon's output file is held to its cap, its latest part kept
// in <log>.1.
func TestCapLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "daemon.log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString(strings.Repeat("a", 900) + strings.Repeat("b", 200))
	capLog(path, 1000)
	// The writer's next line lands at the start of the emptied file.
	f.WriteString("next\n")
	cur, _ := os.ReadFile(path)
	prev, _ := os.ReadFile(path + ".1")
	if string(cur) != "next\n" || len(prev) != 1000 || !strings.HasSuffix(string(prev), strings.Repeat("b", 200)) {
		t.Fatalf("after the cap: file %q, previous %d bytes", cur, len(prev))
	}
	capLog(path, 1000) // under the cap: untouched
	if cur, _ := os.ReadFile(path); string(cur) != "next\n" {
		t.Fatalf("a file under the cap changed: %q", cur)
	}
}

// The desired state shares its record with what the daemon kind keeps
// there (HAProxy's peer name): only "running" is the core's.
func TestDesiredStateKeepsOtherKeys(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "agent-state.json")
	os.WriteFile(state, []byte(`{"peer":"abc","amphora_id":"amp"}`), 0o600)
	d := NewDaemon(Spec{Name: "daemon", StatePath: state}, nil)
	if _, recorded, err := d.ReadDesired(); recorded || err != nil {
		t.Fatalf("nothing recorded yet: recorded %v, %v", recorded, err)
	}
	for _, want := range []bool{true, false} {
		if err := d.With(func(h *Held) error { return h.SetDesired(want) }); err != nil {
			t.Fatal(err)
		}
		running, recorded, err := d.ReadDesired()
		if running != want || !recorded || err != nil {
			t.Fatalf("set %v: read %v recorded %v %v", want, running, recorded, err)
		}
	}
	data, _ := os.ReadFile(state)
	if string(data) != `{"amphora_id":"amp","peer":"abc","running":false}`+"\n" {
		t.Fatalf("record %s", data)
	}
	// A record that is not JSON is replaced, not fatal.
	os.WriteFile(state, []byte("garbage"), 0o600)
	if _, _, err := d.ReadDesired(); err == nil {
		t.Fatal("garbage read as a state")
	}
	if err := d.With(func(h *Held) error { return h.SetDesired(true) }); err != nil {
		t.Fatal(err)
	}
	if running, _, err := d.ReadDesired(); !running || err != nil {
		t.Fatalf("after rewriting garbage: %v %v", running, err)
	}
}

// Under systemd each line the daemon writes reaches the journal under the
// daemon's identifier: across a new run (which moves the file to .1) and
// across an agent restart, where the next agent's Daemon resumes at the
// file's end instead of sending it again.
func TestOutputReachesTheJournal(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "daemon.log")
	j := &journalfwdtest.Journal{}
	spec := echoSpec(dir, logPath)
	spec.Journal = journalfwd.Options{Sink: j, Identifier: "daemon-x"}
	done := make(chan struct{})
	d := NewDaemon(spec, done)
	startAndStop(t, d, 2)
	equal := func(want ...string) func([]string) bool {
		return func(got []string) bool { return slices.Equal(got, want) }
	}
	j.WaitFor(t, 5*time.Second, "daemon-x", "both runs", equal("run 1", "run 2"))

	// The agent restarts: a new Daemon over the same file, which an
	// adopted process goes on writing.
	close(done)
	waitKept(t, d)
	done2 := make(chan struct{})
	defer close(done2)
	d2 := NewDaemon(spec, done2)
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString("after the restart\n")
	j.WaitFor(t, 5*time.Second, "daemon-x", "the new line once", equal("run 1", "run 2", "after the restart"))

	// Once the daemon is removed, nothing more is forwarded.
	d2.With(func(h *Held) error { h.Remove(); return nil })
	waitKept(t, d2)
	f.WriteString("after the removal\n")
	if got := j.Messages("daemon-x"); !equal("run 1", "run 2", "after the restart")(got) {
		t.Fatalf("journal after the removal: %q", got)
	}
}

func waitKept(t *testing.T, d *Daemon) {
	t.Helper()
	select {
	case <-d.kept:
	case <-time.After(5 * time.Second):
		t.Fatal("the keeper of the output file does not stop")
	}
}
