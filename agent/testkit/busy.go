package testkit

import (
	"os/exec"
	"syscall"
	"testing"
)

// BusyLoops runs n shell loops that spin until the test ends, each in a
// process of its own: the CPU contention other programs make (the unit
// tier's packages side by side, a busy hypervisor), which the test's own
// goroutines do not see as theirs to share. Each loop also ends by itself
// after ten minutes, should the test process be killed before its cleanup;
// bash keeps that time itself, so the loop is one process the cleanup
// reaps, with no timer process whose orphan would outlive the test.
// It returns their pids.
func BusyLoops(t testing.TB, n int) []int {
	t.Helper()
	var pids []int
	for range n {
		cmd := exec.Command("bash", "-c", "while ((SECONDS < 600)); do :; done")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatalf("busy loop: %v", err)
		}
		pids = append(pids, cmd.Process.Pid)
		t.Cleanup(func() {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			cmd.Wait()
		})
	}
	return pids
}
