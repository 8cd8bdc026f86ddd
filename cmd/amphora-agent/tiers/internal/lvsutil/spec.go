package lvsutil

import (
	"encoding/json"
	"testing"
)

// Listener is one UDP or SCTP listener for the controller script's
// --lvs-spec (tiers/testdata/interop/haproxy_controller_client.py): Octavia's
// LVS templater renders it with its default pool, members and monitor.
type Listener struct {
	ID       string   `json:"id"`
	Protocol string   `json:"protocol"`
	Port     int      `json:"port"`
	PoolID   string   `json:"pool_id"`
	Monitor  *Monitor `json:"monitor"`
	Members  []Member `json:"members"`
}

// Monitor is a UDP-CONNECT (UDP) or SCTP health monitor.
type Monitor struct {
	ID      string `json:"id"`
	Delay   int    `json:"delay"`
	Timeout int    `json:"timeout"`
	Fall    int    `json:"fall"`
}

type Member struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Port    int    `json:"port"`
	Weight  int    `json:"weight"`
	Enabled bool   `json:"enabled"`
}

func SpecArg(t *testing.T, ls ...Listener) string {
	t.Helper()
	data, err := json.Marshal(ls)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
