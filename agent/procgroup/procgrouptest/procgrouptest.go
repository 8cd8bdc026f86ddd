// Package procgrouptest holds test helpers for commands run through
// procgroup.
package procgrouptest

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// WaitGone fails the test unless process pid is gone, or a zombie, within
// a few seconds. It kills a process that is not, so that no test leaves
// one behind.
func WaitGone(t testing.TB, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return
		}
		// The state follows the command name, which is in parentheses.
		if s := string(stat); strings.HasPrefix(s[strings.LastIndexByte(s, ')')+1:], " Z") {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d still running: %s", pid, stat)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
