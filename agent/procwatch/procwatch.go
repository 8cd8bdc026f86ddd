// Package procwatch is the one supervision core every daemon kind (each
// load balancer's HAProxy, the VRRP keepalived, each UDP or SCTP
// listener's keepalived) runs under, as a Daemon: start in its own session
// and process group with a rotated, capped output file (forwarded to the
// journal under systemd; never without room for the pid file), wait until
// ready (the kind's check and the pid file naming the new process), follow
// it through a pidfd (without confusing it with a recycled pid), respawn
// with backoff, retry a failed start, keep the desired state on disk,
// adopt by pid file and command line, stop and kill, and keep the output
// for error answers.
//
// Its lock has one door: every step on the process is a method of the Held
// that Daemon.With passes to a callback and voids after it, so no kind can
// run a step without the lock or forget to release it; a kind guards its
// own state about the process with the same lock. It imports only leaf
// helpers.
package procwatch

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Process is one supervised daemon, started by this agent or adopted from
// a previous agent run.
type Process struct {
	Pid     int
	Started time.Time
	// Exited is closed when the process is gone.
	Exited <-chan struct{}
	// Status tells how it ended; set before Exited is closed.
	Status string
}

// Alive reports whether the process still runs.
func (p *Process) Alive() bool {
	if p == nil || p.Exited == nil {
		return false
	}
	select {
	case <-p.Exited:
		return false
	default:
		return true
	}
}

// Failed stands for a start that failed: a process that never ran, for
// the restart pacing.
func Failed(status string) *Process {
	c := make(chan struct{})
	close(c)
	return &Process{Started: time.Now(), Exited: c, Status: status}
}

// DescribeExit renders a child's end for the log.
func DescribeExit(ps *os.ProcessState, err error) string {
	if ps == nil {
		return fmt.Sprintf("wait failed: %v", err)
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "killed by signal " + ws.Signal().String()
	}
	return "exit status " + strconv.Itoa(ps.ExitCode())
}

// WatchChild reaps a started child.
func WatchChild(cmd *exec.Cmd) *Process {
	exited := make(chan struct{})
	p := &Process{Pid: cmd.Process.Pid, Started: time.Now(), Exited: exited}
	go func() {
		err := cmd.Wait()
		p.Status = DescribeExit(cmd.ProcessState, err)
		close(exited)
	}()
	return p
}

// WatchAdopted follows a process started by an earlier agent run. It is
// not this process's child, so it cannot be waited for; a pidfd tells when
// it ends without the risk of pid reuse, with /proc polling as the
// fallback on kernels without pidfd_open. Closing done stops the watch.
func WatchAdopted(pid int, done <-chan struct{}) *Process {
	exited := make(chan struct{})
	p := &Process{Pid: pid, Started: time.Now(), Exited: exited}
	fd, err := unix.PidfdOpen(pid, 0)
	go func() {
		defer close(exited)
		p.Status = "exited (not a child of this agent: exit status unknown)"
		if err == nil {
			ended, werr := waitPidfd(fd, done)
			if werr == nil {
				if !ended {
					p.Status = "no longer watched"
				}
				return
			}
		}
		for {
			if unix.Kill(pid, 0) != nil {
				return
			}
			select {
			case <-done:
				p.Status = "no longer watched"
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return p
}

// waitPidfd waits until the pidfd turns readable (its process ended) or
// done closes, parked in Go's poller: no thread sits in a poll(2) for each
// adopted daemon, and nothing wakes until something happened. It owns and
// closes fd; an error means the poller could not take it.
func waitPidfd(fd int, done <-chan struct{}) (ended bool, err error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return false, err
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return false, err
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-done:
			f.SetReadDeadline(time.Unix(1, 0)) // wakes the wait below
		case <-stop:
		}
	}()
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	err = rc.Read(func(uintptr) bool {
		n, _ := unix.Poll(fds, 0)
		return n > 0
	})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return false, nil
	}
	return err == nil, err
}

// Cmdline returns the argument vector of pid as procDir (normally /proc)
// shows it.
func Cmdline(procDir string, pid int) ([]string, error) {
	data, err := os.ReadFile(procDir + "/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return nil, err
	}
	return strings.Split(string(bytes.TrimRight(data, "\x00")), "\x00"), nil
}

// ArgAfter reports whether args hold flag followed by a value that
// satisfies match.
func ArgAfter(args []string, flag string, match func(string) bool) bool {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag && match(args[i+1]) {
			return true
		}
	}
	return false
}
