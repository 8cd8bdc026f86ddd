package dirlock

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A second Acquire of a held folder fails with the holder's pid and
// changes nothing; once the lock is released it succeeds.
func TestSecondAcquireIsRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	first, err := Acquire(dir, "x.lock")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "x.lock")
	before, err := os.Stat(path)
	if err != nil || before.Mode().Perm() != 0o600 {
		t.Fatalf("lock file: %v %v", before, err)
	}
	content, _ := os.ReadFile(path)
	if string(content) != strconv.Itoa(os.Getpid())+"\n" {
		t.Fatalf("lock file holds %q, want this pid", content)
	}

	// Another open file description conflicts as another process would.
	_, err = Acquire(dir, "x.lock")
	var held *HeldError
	if !errors.As(err, &held) || held.Dir != dir || held.Path != path || held.Pid != os.Getpid() {
		t.Fatalf("second Acquire: %v (%+v)", err, held)
	}
	want := dir + " is in use: process " + strconv.Itoa(os.Getpid()) + " holds the lock " + path
	if err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
	after, _ := os.Stat(path)
	again, _ := os.ReadFile(path)
	if !after.ModTime().Equal(before.ModTime()) || string(again) != string(content) {
		t.Fatalf("the refused Acquire changed the lock file: %v %q", after.ModTime(), again)
	}

	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	acquireFree(t, dir, "after Release")
}

// acquireFree fails the test unless dir's lock can be taken now, and
// gives it back.
func acquireFree(t *testing.T, dir, when string) {
	t.Helper()
	l, err := Acquire(dir, "x.lock")
	if err != nil {
		t.Fatalf("Acquire %s: %v", when, err)
	}
	l.Release()
}

// A child started while the lock is held does not hold it: after the
// parent lets go (as when the agent exits and HAProxy runs on), the lock
// is free although the child still runs.
func TestChildrenDoNotInheritTheLock(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir, "x.lock")
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	// exec closed the lock file in the child (close-on-exec); sleep opens
	// no file of its own.
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(child.Process.Pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if target, _ := os.Readlink("/proc/" + strconv.Itoa(child.Process.Pid) + "/fd/" + fd.Name()); strings.HasSuffix(target, "x.lock") {
			t.Fatalf("the child holds the lock file as fd %s", fd.Name())
		}
	}
	l.Release()
	acquireFree(t, dir, "with the child running")
}

// The folder is made when missing; a lock file that is a symlink is not
// followed.
func TestFolderMadeAndSymlinkRefused(t *testing.T) {
	base := t.TempDir()
	acquireFree(t, filepath.Join(base, "a", "b"), "in a missing folder")

	target := filepath.Join(base, "elsewhere")
	os.WriteFile(target, []byte("keep"), 0o644)
	if err := os.Symlink(target, filepath.Join(base, "y.lock")); err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(base, "y.lock"); !errors.Is(err, unix.ELOOP) {
		t.Fatalf("Acquire through a symlink: %v", err)
	}
	if got, _ := os.ReadFile(target); string(got) != "keep" {
		t.Fatalf("symlink target changed: %q", got)
	}
}

// holder reads the holder's pid from the kernel's lock table: the FLOCK
// line of the lock file's device and inode, not a waiter's line, not
// another file's.
func TestHolderFromLockTable(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "x.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	dev := func(ino uint64) string {
		return fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), ino)
	}
	table := "1: POSIX  ADVISORY  WRITE 11 " + dev(st.Ino) + " 0 EOF\n" +
		"2: FLOCK  ADVISORY  WRITE 22 " + dev(st.Ino+1) + " 0 EOF\n" +
		"3: FLOCK  ADVISORY  WRITE 33 " + dev(st.Ino) + " 0 EOF\n" +
		"3: -> FLOCK  ADVISORY  WRITE 44 " + dev(st.Ino) + " 0 EOF\n"
	locks := filepath.Join(dir, "locks")
	os.WriteFile(locks, []byte(table), 0o644)
	if pid := holder(f, locks); pid != 33 {
		t.Fatalf("holder %d, want 33 from\n%s", pid, table)
	}
	if pid := holder(f, filepath.Join(dir, "none")); pid != 0 {
		t.Fatalf("holder without a table: %d", pid)
	}
}
