//go:build system || interop || vm

package tiers_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// lvsListener is one UDP or SCTP listener for the controller script's
// --lvs-spec (testdata/interop/haproxy_controller_client.py): Octavia's
// LVS templater renders it with its default pool, members and monitor.
type lvsListener struct {
	ID       string      `json:"id"`
	Protocol string      `json:"protocol"`
	Port     int         `json:"port"`
	PoolID   string      `json:"pool_id"`
	Monitor  *lvsMonitor `json:"monitor"`
	Members  []lvsMember `json:"members"`
}

// lvsMonitor is a UDP-CONNECT (UDP) or SCTP health monitor.
type lvsMonitor struct {
	ID      string `json:"id"`
	Delay   int    `json:"delay"`
	Timeout int    `json:"timeout"`
	Fall    int    `json:"fall"`
}

type lvsMember struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Port    int    `json:"port"`
	Weight  int    `json:"weight"`
	Enabled bool   `json:"enabled"`
}

func lvsSpecArg(t *testing.T, ls ...lvsListener) string {
	t.Helper()
	data, err := json.Marshal(ls)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// lvsCreateResult is what the lvs-create phase returns: the keepalived
// configs the driver uploaded, by listener id.
type lvsCreateResult struct {
	LVSConfigs map[string]string `json:"lvs_configs"`
}

// lvsPid is the live keepalived of an LVS listener, or 0.
func lvsPid(dir, id string) int {
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

// killLVSKeepalived stops the listeners' keepalived left behind by a
// failed test: they outlive the agent by design.
func killLVSKeepalived(t *testing.T, dir string) {
	matches, _ := filepath.Glob(filepath.Join(dir, "octavia-keepalivedlvs-*.pid"))
	for _, p := range matches {
		if strings.Count(filepath.Base(p), ".") != 1 {
			continue
		}
		id := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), "octavia-keepalivedlvs-"), ".pid")
		if pid := lvsPid(dir, id); pid != 0 {
			t.Logf("killing keepalived %d of listener %s", pid, id)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
