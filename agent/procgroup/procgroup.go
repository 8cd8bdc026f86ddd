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
	"os"
	"os/exec"
	"syscall"
	"time"
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
