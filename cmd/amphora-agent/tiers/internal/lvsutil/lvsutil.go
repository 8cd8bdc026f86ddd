// Package lvsutil is what the system, interop and VM tiers share about
// UDP and SCTP (LVS) listeners: the keepalived each one runs, and the
// listener spec the controller scripts take (--lvs-spec).
package lvsutil

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Pid is the live keepalived of an LVS listener, or 0.
func Pid(dir, id string) int {
	data, err := os.ReadFile(filepath.Join(dir, "octavia-keepalivedlvs-"+id+".pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || syscall.Kill(pid, 0) != nil {
		return 0
	}
	return pid
}

// KillKeepalived stops the listeners' keepalived left behind by a
// failed test: they outlive the agent by design.
func KillKeepalived(t *testing.T, dir string) {
	matches, _ := filepath.Glob(filepath.Join(dir, "octavia-keepalivedlvs-*.pid"))
	for _, p := range matches {
		if strings.Count(filepath.Base(p), ".") != 1 {
			continue
		}
		id := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), "octavia-keepalivedlvs-"), ".pid")
		if pid := Pid(dir, id); pid != 0 {
			t.Logf("killing keepalived %d of listener %s", pid, id)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
