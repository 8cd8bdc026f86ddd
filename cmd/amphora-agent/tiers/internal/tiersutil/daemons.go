package tiersutil

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// DaemonsOf lists the processes named comm (main processes and their
// children) that run the config at cfgPath, found by scanning /proc, not
// through any pid file.
func DaemonsOf(comm, cfgPath string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		name, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || strings.TrimSpace(string(name)) != comm {
			continue
		}
		args, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && strings.Contains(string(args), "\x00-f\x00"+cfgPath+"\x00") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// KillDaemonsOf kills, when the test ends, whatever runs cfgPath (only
// this test's: the path is on its own tmpfs). Call it after onTmpfs and
// before the agent starts, so it runs after the agent stopped (nothing
// restarts what it kills) and before the unmount, even when the test
// fails half way.
func KillDaemonsOf(t *testing.T, comm, cfgPath string) {
	t.Cleanup(func() {
		for _, pid := range DaemonsOf(comm, cfgPath) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}
