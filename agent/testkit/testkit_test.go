package testkit

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestUntilWaitsForTheCondition(t *testing.T) {
	var calls atomic.Int32
	if !Until(10*time.Second, func() bool { return calls.Add(1) == 3 }) {
		t.Fatal("a condition that came true was reported as timed out")
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
}

func TestUntilGivesUpAtTheDeadline(t *testing.T) {
	start := time.Now()
	if Until(50*time.Millisecond, func() bool { return false }) {
		t.Fatal("a condition that never held was reported as met")
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("gave up after %v, before the deadline", d)
	}
}

// RequireRoot lets a root test go on and ends any other by skipping it.
func TestRequireRoot(t *testing.T) {
	root := os.Geteuid() == 0
	went, skipped := false, false
	t.Run("probe", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		RequireRoot(t, "the probe")
		went = true
	})
	if went != root || skipped == root {
		t.Fatalf("as uid %d: went on %v, skipped %v", os.Geteuid(), went, skipped)
	}
}

func TestDelaysRecordAndPassAtOnce(t *testing.T) {
	var c Delays
	for _, d := range []time.Duration{0, time.Hour, time.Second} {
		select {
		case <-c.After(d):
		default:
			t.Fatalf("a delay of %v did not pass at once", d)
		}
	}
	if got := c.Asked(); len(got) != 3 || got[0] != 0 || got[1] != time.Hour || got[2] != time.Second {
		t.Fatalf("asked %v, want [0s 1h0m0s 1s]", got)
	}
}

// fatalRecorder notes a Fatalf instead of ending the test.
type fatalRecorder struct {
	testing.TB
	fatal string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) { r.fatal = fmt.Sprintf(format, args...) }

func TestReadFilesInNameOrderAndNoneIsFatal(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"b.conf", "a.conf", "c.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	files := ReadFiles(t, filepath.Join(dir, "*.conf"))
	if len(files) != 2 || files[0].Path != filepath.Join(dir, "a.conf") || string(files[1].Data) != "b.conf" {
		t.Fatalf("got %+v, want a.conf then b.conf", files)
	}
	r := &fatalRecorder{TB: t}
	if got := ReadFiles(r, filepath.Join(dir, "*.json")); len(got) != 0 || r.fatal == "" {
		t.Fatalf("no match: got %v, fatal %q; want nothing and a fatal", got, r.fatal)
	}
}

func TestWriteFileMakesTheFolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a", "b", "f.conf")
	WriteFile(t, path, "x = 1\n")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("stat: %v, %v; want a 0600 file", fi, err)
	}
	if got, _ := os.ReadFile(path); string(got) != "x = 1\n" {
		t.Fatalf("content %q", got)
	}
}

// The busy loops spin while the test runs and are gone, group and all,
// once it has ended.
func TestBusyLoopsEndWithTheTest(t *testing.T) {
	var pids []int
	t.Run("busy", func(t *testing.T) {
		pids = BusyLoops(t, 2)
		for _, pid := range pids {
			if err := syscall.Kill(pid, 0); err != nil {
				t.Fatalf("busy loop %d: %v", pid, err)
			}
		}
	})
	for _, pid := range pids {
		if err := syscall.Kill(-pid, 0); err != syscall.ESRCH {
			t.Errorf("busy loop group %d after the test: %v, want ESRCH", pid, err)
		}
	}
}
