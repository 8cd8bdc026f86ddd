package procwatch

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The output file holds one run: a start moves the previous run's output
// to <log>.1, so a crash loop cannot grow it.
func TestStartRotatesTheOutputFile(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "daemon.log")
	done := make(chan struct{})
	defer close(done)
	run := 0
	pidPath := filepath.Join(dir, "daemon.pid")
	d := NewDaemon(Spec{
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
	}, done)
	d.Lock()
	defer d.Unlock()
	for i := 0; i < 3; i++ {
		if err := d.StartLocked(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := d.StopLocked(); err != nil {
			t.Fatal(err)
		}
	}
	cur, _ := os.ReadFile(logPath)
	prev, _ := os.ReadFile(logPath + ".1")
	if strings.TrimSpace(string(cur)) != "run 3" || strings.TrimSpace(string(prev)) != "run 2" {
		t.Fatalf("log %q, previous %q", cur, prev)
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
		if err := d.SetDesiredLocked(want); err != nil {
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
	if err := d.SetDesiredLocked(true); err != nil {
		t.Fatal(err)
	}
	if running, _, err := d.ReadDesired(); !running || err != nil {
		t.Fatalf("after rewriting garbage: %v %v", running, err)
	}
}
