package haproxy

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

// process is one HAProxy master, started by this agent or adopted from a
// previous agent run.
type process struct {
	pid     int
	started time.Time
	exited  chan struct{} // closed when the master is gone
	status  string        // how it ended; set before exited is closed
}

func (p *process) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// describeExit renders a child's end for the log.
func describeExit(ps *os.ProcessState, err error) string {
	if ps == nil {
		return fmt.Sprintf("wait failed: %v", err)
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "killed by signal " + ws.Signal().String()
	}
	return "exit status " + strconv.Itoa(ps.ExitCode())
}

// watchChild reaps a master this agent started.
func watchChild(cmd *exec.Cmd) *process {
	p := &process{pid: cmd.Process.Pid, started: time.Now(), exited: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.status = describeExit(cmd.ProcessState, err)
		close(p.exited)
	}()
	return p
}

// watchAdopted follows a master started by an earlier agent run. It is not
// this process's child, so it cannot be waited for; a pidfd tells when it
// ends without the risk of pid reuse, with /proc polling as the fallback
// on kernels without pidfd_open.
func watchAdopted(pid int, done <-chan struct{}) *process {
	p := &process{pid: pid, started: time.Now(), exited: make(chan struct{})}
	fd, err := unix.PidfdOpen(pid, 0)
	go func() {
		defer close(p.exited)
		p.status = "exited (not a child of this agent: exit status unknown)"
		if err == nil {
			defer unix.Close(fd)
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			for {
				n, perr := unix.Poll(fds, 500)
				if n > 0 || perr != nil && !errors.Is(perr, unix.EINTR) {
					return
				}
				select {
				case <-done:
					p.status = "no longer watched"
					return
				default:
				}
			}
		}
		for {
			if unix.Kill(pid, 0) != nil {
				return
			}
			select {
			case <-done:
				p.status = "no longer watched"
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return p
}

// cmdline returns the argument vector of pid.
func cmdline(procDir string, pid int) ([]string, error) {
	data, err := os.ReadFile(procDir + "/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return nil, err
	}
	return strings.Split(string(bytes.TrimRight(data, "\x00")), "\x00"), nil
}

// argAfter reports whether args hold flag followed by a value that
// satisfies match.
func argAfter(args []string, flag string, match func(string) bool) bool {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag && match(args[i+1]) {
			return true
		}
	}
	return false
}
