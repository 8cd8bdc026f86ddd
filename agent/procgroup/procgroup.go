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
	"runtime"
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

// StartWithBinds is a start function for Run: it starts cmd in a mount
// namespace of its own, private to it, where each Bind is mounted in
// order; the rest of the system sees none of them, and they vanish with
// the command. Needs CAP_SYS_ADMIN.
func StartWithBinds(binds []Bind) func(*exec.Cmd) error {
	return func(cmd *exec.Cmd) error {
		errc := make(chan error, 1)
		go func() {
			// The child is forked from this thread, so it inherits the
			// thread's mount namespace. The thread stays locked: the
			// runtime retires it with this goroutine instead of reusing
			// it in the wrong namespace.
			runtime.LockOSThread()
			errc <- startInPrivateMounts(cmd, binds)
		}()
		return <-errc
	}
}

func startInPrivateMounts(cmd *exec.Cmd, binds []Bind) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("private mount namespace: %w", err)
	}
	// Without this, mounts would propagate back to a shared root (systemd
	// makes / shared).
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("private mount namespace: %w", err)
	}
	for _, b := range binds {
		if err := unix.Mount(b.Source, b.Target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind mount %s on %s: %w", b.Source, b.Target, err)
		}
	}
	return cmd.Start()
}
