//go:build interop || vm

package tiers_test

import (
	"encoding/json"
	"testing"
)

// The LVS listener spec of the controller's driver (--lvs-spec), which
// only the interop and VM tiers send; the helpers the system tier shares
// with them are in lvs_util_test.go.

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
