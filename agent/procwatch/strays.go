package procwatch

import (
	"os"
	"strconv"
	"strings"
	"syscall"

	"go.uber.org/zap"
)

// endStrays kills every process of this daemon that nobody supervises,
// before a new one starts: one that was still starting, without its pid
// file, when the agent restarted, or one whose pid file was lost or names
// another process now. (One the pid file names is adopted, however busy:
// see Held.Adopt.) Left alive it would run its old config beside the new
// process: HAProxy binds with SO_REUSEPORT, so both would take
// connections; two keepalived would run one listener twice. A process's
// own children (HAProxy's workers, keepalived's checkers) end with it, as
// the kill reaches its process group.
func (d *Daemon) endStrays() {
	s := &d.spec
	entries, err := os.ReadDir(s.ProcDir)
	if err != nil {
		return
	}
	ours := map[int]bool{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if args, err := Cmdline(s.ProcDir, pid); err == nil && s.Ours(args) {
			ours[pid] = true
		}
	}
	for pid := range ours {
		if d.proc.Alive() && pid == d.proc.Pid || ours[parentPid(s.ProcDir, pid)] {
			continue
		}
		// A test's ProcDir may list made-up processes: only a real one
		// whose own command line is this daemon's is ever killed.
		if args, err := Cmdline("/proc", pid); err != nil || !s.Ours(args) {
			continue
		}
		s.Log.Warn("ending a "+s.Name+" no agent supervises before starting a new one", zap.Int("pid", pid))
		p := WatchAdopted(pid, d.done)
		syscall.Kill(-pid, syscall.SIGKILL)
		syscall.Kill(pid, syscall.SIGKILL) // in case it leads no process group
		waitExit(p, killWait)
	}
}

// parentPid is pid's parent as procDir/<pid>/stat tells, 0 if unknown.
func parentPid(procDir string, pid int) int {
	data, err := os.ReadFile(procDir + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: the fields
	// after its closing parenthesis are state, then the parent's pid.
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}
