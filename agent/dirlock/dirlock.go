// Package dirlock lets one process at a time work in a folder: it holds
// an exclusive flock(2) on a lock file inside the folder for as long as
// it lives.
//
// The kernel drops the lock when the process ends, however it ends, so a
// lock is never stale. The lock file is opened close-on-exec: children
// the process starts (HAProxy, keepalived, which outlive it) do not
// inherit the open file and so do not hold the lock after it is gone.
// The file is 0600, so that no other user can open it and hold a shared
// lock that would keep the owner out.
package dirlock

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Lock is a held lock; Release (or the end of the process) gives it up.
type Lock struct {
	f *os.File
}

// HeldError says that another process holds the folder's lock.
type HeldError struct {
	Dir  string // the folder
	Path string // its lock file
	Pid  int    // the holder, 0 when not known
}

func (e *HeldError) Error() string {
	who := "another process"
	if e.Pid > 0 {
		who = "process " + strconv.Itoa(e.Pid)
	}
	return fmt.Sprintf("%s is in use: %s holds the lock %s", e.Dir, who, e.Path)
}

// Acquire takes the lock of dir, a file called name inside it, without
// waiting: when another process holds it, the error is a *HeldError and
// nothing was changed. dir and the lock file are created when missing;
// once the lock is held, the file is rewritten to hold this process's
// pid, for people to read.
func Acquire(dir, name string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name)
	// os.OpenFile sets O_CLOEXEC; O_NOFOLLOW keeps a planted symlink from
	// making the lock (and the pid written into it) land elsewhere.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &HeldError{Dir: dir, Path: path, Pid: holder(f, "/proc/locks")}
		}
		return nil, &os.PathError{Op: "flock", Path: path, Err: err}
	}
	// A file left wider open (made by hand) is closed to other users now.
	f.Chmod(0o600)
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// Release gives the lock up.
func (l *Lock) Release() error { return l.f.Close() }

// holder finds the pid that holds a flock on f in the kernel's lock table
// (procLocks, normally /proc/locks), 0 when it is not there. Lines look
// like "3: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; a process
// waiting for a lock has "->" before FLOCK and is not the holder.
func holder(f *os.File, procLocks string) int {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return 0
	}
	inode := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	table, err := os.ReadFile(procLocks)
	if err != nil {
		return 0
	}
	for line := range bytes.Lines(table) {
		fields := strings.Fields(string(line))
		if len(fields) < 6 || fields[1] != "FLOCK" || fields[5] != inode {
			continue
		}
		if pid, err := strconv.Atoi(fields[4]); err == nil && pid > 0 {
			return pid
		}
	}
	return 0
}
