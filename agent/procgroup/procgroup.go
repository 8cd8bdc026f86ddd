// Package procgroup runs an external command to completion under a
// deadline that holds even when the command starts children: the command
// leads its own process group, the whole group is killed when the context
// ends, and nobody waits for output that an escaped descendant keeps open.
//
// Every command the agent runs to completion (haproxy -c, keepalived -t,
// nft, ip, interface scripts, package version lookups) goes through it.
// Long-running daemons (HAProxy, keepalived) are supervised elsewhere.
package procgroup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// WaitDelay is how long Wait keeps reading output after the command
// exited or its deadline passed. A command that exits closes its pipes at
// once; only a descendant that outlives it keeps them open.
const WaitDelay = time.Second

// Command is exec.CommandContext, set up so that ending ctx kills the
// command and everything it started (its process group), not just the
// command itself: a shell or a lua-load script that forks a long child
// would otherwise hold the caller, and the pipes, until that child exits.
// Callers may set Stdout, Stderr, Env and Dir; they must keep SysProcAttr.
func Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = WaitDelay
	return cmd
}

// Run starts cmd (made by Command) with start, or cmd.Start when start is
// nil (netns.StartIn starts it inside a namespace), waits for it, and then
// kills what is left of its process group: a command run to completion
// leaves nothing behind. A daemon started on purpose (dhclient) is not
// hit: it calls setsid, leaving the group, before it lets go of the
// output, and Wait returns only once the output is let go of.
//
// When the command exited successfully but descendants still held its
// output WaitDelay later, the command's own success stands.
func Run(cmd *exec.Cmd, start func(*exec.Cmd) error) error {
	if start == nil {
		start = (*exec.Cmd).Start
	}
	if err := start(cmd); err != nil {
		return err
	}
	err := cmd.Wait()
	killGroup(cmd)
	if errors.Is(err, exec.ErrWaitDelay) {
		return nil
	}
	return err
}

// killGroup sends SIGKILL to cmd's process group. The group id is the
// leader's pid, which the kernel does not hand out again while any member
// of the group lives; once none does, pids are allocated cyclically, so
// the number is not reused in the moment it takes to get here.
func killGroup(cmd *exec.Cmd) error {
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// CombinedOutput is Run with stdout and stderr collected together.
func CombinedOutput(cmd *exec.Cmd, start func(*exec.Cmd) error) ([]byte, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := Run(cmd, start)
	return out.Bytes(), err
}

// As makes cmd (made by Command) run as cred's user and group, with
// exactly cred's supplementary groups (none when empty), keeping the
// process group set-up.
func As(cmd *exec.Cmd, cred *syscall.Credential) {
	cmd.SysProcAttr.Credential = cred
}

// Bind mounts Source over Target for one command only.
type Bind struct{ Source, Target string }

// View is the file system one command sees: the system's, with Covers
// hidden and Binds mounted on top, in a mount namespace of its own.
type View struct {
	// Covers are folders the command's user may not enter. Each is hidden
	// behind an empty tmpfs that anyone may enter, in which only the way
	// to the Binds' targets beneath it is made: those targets become
	// reachable and nothing else of the folder shows. No cover lies
	// beneath another.
	Covers []string
	// Binds are mounted in order, after the covers. A target beneath a
	// cover is made first (a folder or an empty file, as its source is).
	Binds []Bind
}

// ViewFor returns the view in which cred's user reaches every bind's
// target whatever the modes of the folders above it, without loosening
// any mode: the topmost folder on a target's way that the user may not
// enter (by its mode bits) becomes a cover. A path bound onto itself is
// kept only beneath a cover, where it would not show otherwise, and
// unless it is a folder the user may not enter (useless to the command,
// and it would close the way to targets beneath it again). Binds are
// ordered by the depth of their targets, so that a target beneath
// another one's is mounted on top of it.
func ViewFor(cred *syscall.Credential, binds []Bind) View {
	var v View
	for _, b := range binds {
		b = Bind{Source: filepath.Clean(b.Source), Target: filepath.Clean(b.Target)}
		cover := closedAbove(cred, b.Target)
		if b.Source == b.Target {
			if cover == "" {
				continue
			}
			if fi, err := os.Stat(b.Source); err != nil || fi.IsDir() && !mayEnter(cred, fi) {
				continue
			}
		}
		if cover != "" && !slices.Contains(v.Covers, cover) {
			v.Covers = append(v.Covers, cover)
		}
		v.Binds = append(v.Binds, b)
	}
	slices.SortStableFunc(v.Binds, func(a, b Bind) int {
		return strings.Count(a.Target, "/") - strings.Count(b.Target, "/")
	})
	return v
}

// closedAbove returns the topmost folder strictly above path that cred's
// user may not enter, "" when there is none (or "/" is one: nothing can
// cover it).
func closedAbove(cred *syscall.Credential, path string) string {
	if !filepath.IsAbs(path) || path == "/" {
		return ""
	}
	var above []string // the nearest first
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		above = append(above, d)
		if d == "/" {
			break
		}
	}
	for i := len(above) - 1; i >= 0; i-- {
		fi, err := os.Stat(above[i])
		if err != nil {
			return ""
		}
		if !mayEnter(cred, fi) {
			if above[i] == "/" {
				return ""
			}
			return above[i]
		}
	}
	return ""
}

// mayEnter tells whether cred's user may search the folder fi as the
// kernel decides by mode bits: the owner's bits for its owner, else the
// group's for a member, else the others'. ACLs are not read.
func mayEnter(cred *syscall.Credential, fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	m := fi.Mode().Perm()
	switch {
	case st.Uid == cred.Uid:
		return m&0o100 != 0
	case st.Gid == cred.Gid || slices.Contains(cred.Groups, st.Gid):
		return m&0o010 != 0
	}
	return m&0o001 != 0
}

// StartInView is a start function for Run: it starts cmd in a mount
// namespace of its own, private to it, set up as v says; the rest of the
// system sees nothing of it, and it vanishes with the command. Needs
// CAP_SYS_ADMIN.
func StartInView(v View) func(*exec.Cmd) error {
	return func(cmd *exec.Cmd) error {
		errc := make(chan error, 1)
		go func() {
			// The child is forked from this thread, so it inherits the
			// thread's mount namespace. The thread stays locked: the
			// runtime retires it with this goroutine instead of reusing
			// it in the wrong namespace.
			runtime.LockOSThread()
			errc <- startInPrivateMounts(cmd, v)
		}()
		return <-errc
	}
}

func startInPrivateMounts(cmd *exec.Cmd, v View) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("private mount namespace: %w", err)
	}
	// Without this, mounts would propagate back to a shared root (systemd
	// makes / shared).
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("private mount namespace: %w", err)
	}
	// Each source is opened before anything is mounted (a cover may hide
	// it), and after the unshare (the kernel binds only from mounts of the
	// caller's namespace), and mounted through its descriptor.
	sources := make([]int, 0, len(v.Binds))
	defer func() {
		for _, fd := range sources {
			unix.Close(fd)
		}
	}()
	for _, b := range v.Binds {
		fd, err := unix.Open(b.Source, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("bind source %s: %w", b.Source, err)
		}
		sources = append(sources, fd)
	}
	for _, c := range v.Covers {
		// Placeholders only: a small size and nothing to run or open as a
		// device on it.
		if err := unix.Mount("tmpfs", c, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=1m"); err != nil {
			return fmt.Errorf("cover %s: %w", c, err)
		}
	}
	for i, b := range v.Binds {
		if err := placeholder(v.Covers, b.Target, sources[i]); err != nil {
			return err
		}
	}
	for i, b := range v.Binds {
		if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", sources[i]), b.Target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind mount %s on %s: %w", b.Source, b.Target, err)
		}
	}
	return cmd.Start()
}

// placeholder makes target, and the folders above it, inside the cover
// it lies beneath (none: nothing to make): a folder if source is one,
// else an empty file. The folders are 0755 whatever the umask.
func placeholder(covers []string, target string, source int) error {
	i := slices.IndexFunc(covers, func(c string) bool { return strings.HasPrefix(target, c+"/") })
	if i < 0 {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(source, &st); err != nil {
		return err
	}
	dir := covers[i]
	for _, elem := range strings.Split(strings.TrimPrefix(target, dir+"/"), "/") {
		dir = filepath.Join(dir, elem)
		last := dir == target
		if last && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			fd, err := unix.Open(dir, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
			if err != nil {
				return fmt.Errorf("placeholder %s: %w", dir, err)
			}
			unix.Close(fd)
			break
		}
		if err := unix.Mkdir(dir, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("placeholder %s: %w", dir, err)
		}
		if err := unix.Chmod(dir, 0o755); err != nil {
			return fmt.Errorf("placeholder %s: %w", dir, err)
		}
	}
	return nil
}
