//go:build interop || vm

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amphora-agent/amphora-agent/agent/fsutil"
)

// netCall is what controller_network.py records per driver call.
type netCall struct {
	Returned any     `json:"returned"`
	Raised   *string `json:"raised"`
	Error    string  `json:"error"`
	Seconds  float64 `json:"seconds"`
}

// TestInteropNetworkPlug: the controller's amphora driver plugs the VIP
// port (IPv4 VIP with a host route and an IPv6 additional VIP) and a
// member port with the request bodies it builds itself, re-plugs both
// (409 tolerated, update in place), plugs the VRRP port as a member
// (vip_net_info), and asks which interface holds each address. The NICs
// are veth ends hot-plugged in the default namespace.
func TestInteropNetworkPlug(t *testing.T) {
	requireOctavia(t)
	script := testdataScript(t, "network", "controller_network.py")

	r := newNetTopology(t)
	env := r.env
	env.Extra = fmt.Sprintf("\n[amphora_agent]\nnetwork_namespace = %s\nlvs_masquerade_script = /bin/true\n", r.amp.Name)
	env.Start()

	spec := map[string]any{
		"amphora_id": env.AmphoraID, "client_cert": env.ClientCert, "server_ca": env.CAFile, "port": env.Port,
		"topology": "SINGLE",
		"vip":      netVIP, "vrrp_ip": netVRRP, "vip_mac": r.vipNIC.A.MAC, "vip_mtu": 1450,
		"vip_subnet": map[string]any{"id": "vip-subnet", "network_id": "vip-net", "cidr": "203.0.113.0/24",
			"gateway": "203.0.113.1", "ip_version": 4,
			"host_routes": []map[string]string{{"nexthop": "203.0.113.5", "destination": "192.0.2.0/24"}}},
		"additional_vips": []map[string]any{{"ip_address": netVIP6, "subnet": map[string]any{
			"id": "vip-subnet6", "network_id": "vip-net", "cidr": "2001:db8:1::/64", "gateway": "2001:db8:1::1",
			"ip_version": 6, "host_routes": []any{}}}},
		"member_subnet": map[string]any{"id": "member-subnet", "network_id": "member-net", "cidr": "198.51.100.0/24",
			"gateway": nil, "ip_version": 4, "host_routes": []any{}},
		"member_mac": r.memNIC.A.MAC, "member_ip": netMemberIP, "member_mtu": 1400,
		"absent_mac": "fa:16:3e:00:00:02", "unknown_ip": "192.0.2.77",
	}
	work := t.TempDir()
	specFile := filepath.Join(work, "spec.json")
	data, _ := json.Marshal(spec)
	if err := fsutil.WriteFile(specFile, data, 0o600); err != nil {
		t.Fatal(err)
	}

	stdout, stderr, _ := runControllerScript(t, env, script, "--spec", specFile, "--workdir", work)
	var report map[string]netCall
	if err := json.Unmarshal(stdout, &report); err != nil {
		t.Fatalf("controller script printed no report: %v\n%s\n%s", err, stdout, stderr)
	}
	if testing.Verbose() {
		t.Logf("controller log:\n%s", stderr)
	}
	t.Logf("agent access log:\n%s", requestLines(env))

	for _, name := range []string{"post_vip_plug", "post_vip_plug_again", "post_network_plug", "post_network_plug_again", "post_network_plug_vrrp_port"} {
		if c, ok := report[name]; !ok || c.Raised != nil {
			t.Errorf("%s raised %s: %s", name, deref(c.Raised), c.Error)
		}
	}
	for name, want := range map[string]any{
		"get_interface_from_ip_vip": "eth1", "get_interface_from_ip_vrrp": "eth1",
		"get_interface_from_ip_member": "eth2", "get_interface_from_ip_unknown": nil,
	} {
		c := report[name]
		if c.Raised != nil || c.Returned != want {
			t.Errorf("%s = %v (raised %s %s), want %v", name, c.Returned, deref(c.Raised), c.Error, want)
		}
	}
	// The agent's 404 for a NIC not there yet is the one the client retries
	// on, until its attempts (3 here) run out.
	absent := report["post_network_plug_absent"]
	if absent.Raised == nil || !strings.HasSuffix(*absent.Raised, "TimeOutException") {
		t.Errorf("plug of an absent port raised %s (%s), want TimeOutException after retries", deref(absent.Raised), absent.Error)
	}
	if n := env.Count("\trequest\t", pathField("/1.0/plug/network"), `"status": 404`); n < 2 {
		t.Errorf("agent saw %d plug/network 404s, want the client's retries", n)
	}
	if n := env.Count("\trequest\t", pathField("/1.0/plug/vip/203.0.113.10"), `"status": 409`); n != 1 {
		t.Errorf("agent answered %d plug/vip with 409, want 1 (the re-plug)", n)
	}

	eth1 := r.ip(t, "addr", "show", "dev", "eth1")
	for _, want := range []string{"mtu 1450", "inet 203.0.113.4/24", "inet 203.0.113.10/32"} {
		if !strings.Contains(eth1, want) {
			t.Errorf("eth1 lacks %q:\n%s", want, eth1)
		}
	}
	// The driver's vip_net_info (_build_net_info) always carries
	// "additional_vips": [], so re-plugging the VRRP port as a member
	// leaves only the primary VIP on eth1: the agent applies the body it
	// gets. (The system test covers additional VIPs through plug/vip.)
	if strings.Contains(eth1, "2001:db8:1::10") {
		t.Errorf("eth1 still has the additional VIP the last request dropped:\n%s", eth1)
	}
	if eth2 := r.ip(t, "addr", "show", "dev", "eth2"); !strings.Contains(eth2, "inet 198.51.100.20/24") || !strings.Contains(eth2, "mtu 1400") {
		t.Errorf("eth2:\n%s", eth2)
	}
	if routes := r.ip(t, "route", "show", "table", "1"); !strings.Contains(routes, "192.0.2.0/24 via 203.0.113.5 dev eth1") {
		t.Errorf("table 1 lacks the host route:\n%s", routes)
	}
	if _, err := os.Stat(env.Path("interfaces", "eth2.json")); err != nil {
		t.Errorf("eth2.json: %v", err)
	}
	if t.Failed() {
		t.Logf("controller log:\n%s\nagent output:\n%s", stderr, env.Output())
	}
}
