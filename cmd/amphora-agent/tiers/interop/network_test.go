//go:build interop

package interop_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amphora-agent/amphora-agent/agent/fsutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/ctrlutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/tiersutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
)

// netTopology is tiersutil's topology with this tier's methods on it.
type netTopology struct{ tiersutil.NetTopology }

func newNetTopology(t *testing.T) netTopology {
	t.Helper()
	return netTopology{tiersutil.NewNetTopology(t)}
}

// TestInteropNetworkPlug: the controller's amphora driver plugs the VIP
// port (IPv4 VIP with a host route and an IPv6 additional VIP) and a
// member port with the request bodies it builds itself, re-plugs both
// (409 tolerated, update in place), plugs the VRRP port as a member
// (vip_net_info), and asks which interface holds each address. The NICs
// are veth ends hot-plugged in the default namespace.
func TestInteropNetworkPlug(t *testing.T) {
	ctrlutil.RequireOctavia(t)
	r := newNetTopology(t)
	env := r.Env
	env.Extra = fmt.Sprintf("\n[amphora_agent]\nnetwork_namespace = %s\nlvs_masquerade_script = /bin/true\n", r.Amp.Name)
	env.Start()

	spec := r.controllerSpec()
	spec["vip_subnet"].(map[string]any)["host_routes"] = []map[string]string{{"nexthop": "203.0.113.5", "destination": "192.0.2.0/24"}}
	spec["additional_vips"] = []map[string]any{{"ip_address": tiersutil.NetVIP6, "subnet": map[string]any{
		"id": "vip-subnet6", "network_id": "vip-net", "cidr": "2001:db8:1::/64", "gateway": "2001:db8:1::1",
		"ip_version": 6, "host_routes": []any{}}}}
	spec["absent_mac"] = "fa:16:3e:00:00:02"
	report, stderr := r.runNetworkController(t, spec)

	for _, name := range []string{"post_vip_plug", "post_vip_plug_again", "post_network_plug", "post_network_plug_again", "post_network_plug_vrrp_port"} {
		if c, ok := report[name]; !ok || c.Raised != nil {
			t.Errorf("%s raised %s: %s", name, ctrlutil.Deref(c.Raised), c.Error)
		}
	}
	for name, want := range map[string]any{
		"get_interface_from_ip_vip": "eth1", "get_interface_from_ip_vrrp": "eth1",
		"get_interface_from_ip_member": "eth2", "get_interface_from_ip_unknown": nil,
	} {
		c := report[name]
		if c.Raised != nil || c.Returned != want {
			t.Errorf("%s = %v (raised %s %s), want %v", name, c.Returned, ctrlutil.Deref(c.Raised), c.Error, want)
		}
	}
	// The agent's 404 for a NIC not there yet is the one the client retries
	// on, until its attempts (3 here) run out.
	absent := report["post_network_plug_absent"]
	if absent.Raised == nil || !strings.HasSuffix(*absent.Raised, "TimeOutException") {
		t.Errorf("plug of an absent port raised %s (%s), want TimeOutException after retries", ctrlutil.Deref(absent.Raised), absent.Error)
	}
	if n := env.Count("\trequest\t", pathField("/1.0/plug/network"), `"status": 404`); n < 2 {
		t.Errorf("agent saw %d plug/network 404s, want the client's retries", n)
	}
	if n := env.Count("\trequest\t", pathField("/1.0/plug/vip/203.0.113.10"), `"status": 409`); n != 1 {
		t.Errorf("agent answered %d plug/vip with 409, want 1 (the re-plug)", n)
	}

	eth1 := r.IP(t, "addr", "show", "dev", "eth1")
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
	if eth2 := r.IP(t, "addr", "show", "dev", "eth2"); !strings.Contains(eth2, "inet 198.51.100.20/24") || !strings.Contains(eth2, "mtu 1400") {
		t.Errorf("eth2:\n%s", eth2)
	}
	if routes := r.IP(t, "route", "show", "table", "1"); !strings.Contains(routes, "192.0.2.0/24 via 203.0.113.5 dev eth1") {
		t.Errorf("table 1 lacks the host route:\n%s", routes)
	}
	if _, err := os.Stat(env.Path("interfaces", "eth2.json")); err != nil {
		t.Errorf("eth2.json: %v", err)
	}
	if t.Failed() {
		t.Logf("controller log:\n%s\nagent output:\n%s", stderr, env.Output())
	}
}

// TestInteropNetworkHostRoutes: subnets whose host routes Neutron
// accepts but the kernel cannot take as sent. The VIP subnet has a
// destination with host bits set (192.0.2.77/26), a next hop the kernel
// refuses (the subnet's broadcast address) and one off the subnet (added
// on-link, as upstream does); the member subnet has a destination with
// host bits set and a next hop that is the amphora's own address. The
// controller's driver plugs both ports, re-plugs them and plugs the VRRP
// port as a member: every call succeeds (upstream's agent answers 202
// too), the networks of the corrected routes and the good routes are in
// place, the refused ones are skipped with a warning, and a load balancer
// serves through the VIP. `interface down|up`, on files as this agent
// and as upstream's write them, and an agent restart keep it so.
func TestInteropNetworkHostRoutes(t *testing.T) {
	ctrlutil.RequireOctavia(t)
	r := newNetTopology(t)
	r.Member.ServeHTTP(t, ":80", topo.MemberHandler("member-1"))
	env := r.Env
	env.Extra = fmt.Sprintf("\n[amphora_agent]\nnetwork_namespace = %s\nlvs_masquerade_script = /bin/true\n", r.Amp.Name)
	env.Start()

	spec := r.controllerSpec()
	spec["vip_subnet"].(map[string]any)["host_routes"] = []map[string]string{
		{"nexthop": "203.0.113.5", "destination": "192.0.2.77/26"},
		{"nexthop": "203.0.113.255", "destination": "192.0.2.0/26"},
		{"nexthop": "198.51.100.99", "destination": "192.0.2.128/26"},
	}
	spec["member_subnet"].(map[string]any)["host_routes"] = []map[string]string{
		{"nexthop": "198.51.100.254", "destination": "192.0.2.200/26"},
		{"nexthop": tiersutil.NetMemberIP, "destination": "192.0.2.32/27"},
	}
	report, stderr := r.runNetworkController(t, spec)
	for _, name := range []string{"post_vip_plug", "post_vip_plug_again", "post_network_plug", "post_network_plug_again", "post_network_plug_vrrp_port"} {
		if c, ok := report[name]; !ok || c.Raised != nil {
			t.Errorf("%s raised %s: %s", name, ctrlutil.Deref(c.Raised), c.Error)
		}
	}
	if n := env.Count("\trequest\t", pathField("/1.0/plug/vip/"+tiersutil.NetVIP), `"status": 202`); n != 1 {
		t.Errorf("agent answered %d plug/vip with 202, want 1\n%s", n, requestLines(env))
	}
	if n := env.Count("\trequest\t", pathField("/1.0/plug/network"), `"status": 202`); n != 3 {
		t.Errorf("agent answered %d plug/network with 202, want 3\n%s", n, requestLines(env))
	}
	if t.Failed() {
		t.Fatalf("controller log:\n%s\nagent output:\n%s", stderr, env.Output())
	}
	for _, want := range [][]string{
		{"host route destination has host bits set", `"field": "host_routes[0].destination"`, `"sent": "192.0.2.77/26"`, `"applied": "192.0.2.64/26"`},
		{"host route destination has host bits set", `"field": "fixed_ips[0].host_routes[0].destination"`, `"sent": "192.0.2.200/26"`, `"applied": "192.0.2.192/26"`},
		{"the kernel refused a route; skipped", "203.0.113.255"},
		{"the kernel refused a route; skipped", `"gateway":"` + tiersutil.NetMemberIP + `"`},
	} {
		if env.Count(want...) == 0 {
			t.Errorf("agent logged no line with %q\n%s", want, env.Output())
		}
	}

	r.LoadBalancer(t) // HAProxy is killed when the test ends
	r.checkHostRoutes(t, "after the plugs")

	// `amphora-agent interface down|up`, as the image's amphora-interface
	// runs it: the VIP port from the file this agent wrote, the member
	// port from the file as upstream's agent writes it (host bits kept).
	eth2 := env.Path("interfaces", "eth2.json")
	data, err := os.ReadFile(eth2)
	if err != nil || !strings.Contains(string(data), `"192.0.2.192/26"`) {
		t.Fatalf("eth2.json (%v):\n%s", err, data)
	}
	if err := fsutil.WriteFile(eth2, []byte(strings.Replace(string(data), `"192.0.2.192/26"`, `"192.0.2.200/26"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"eth1", "eth2"} {
		for _, action := range []string{"down", "up"} {
			if out, err := exec.Command(testenv.Binary(t), "interface", "--config-file", env.ConfigPath, action, name).CombinedOutput(); err != nil {
				t.Fatalf("interface %s %s: %v\n%s", action, name, err, out)
			}
		}
	}
	r.checkHostRoutes(t, "after interface down and up")

	// The start-up restore applies every file again.
	env.Stop()
	env.Start()
	r.checkHostRoutes(t, "after an agent restart")
	if t.Failed() {
		t.Logf("controller log:\n%s\nagent output:\n%s", stderr, env.Output())
	}
}

// checkHostRoutes checks the static routes TestInteropNetworkHostRoutes
// expects in the amphora's namespace and that the VIP serves.
func (r *netTopology) checkHostRoutes(t *testing.T, when string) {
	t.Helper()
	main := r.IP(t, "-4", "route", "show", "table", "main", "proto", "static")
	table1 := r.IP(t, "-4", "route", "show", "table", "1", "proto", "static")
	for _, c := range []struct{ table, text, route string }{
		{"main", main, "192.0.2.64/26 via 203.0.113.5 dev eth1 onlink"},
		{"1", table1, "192.0.2.64/26 via 203.0.113.5 dev eth1 onlink"},
		{"main", main, "192.0.2.128/26 via 198.51.100.99 dev eth1 onlink"},
		{"1", table1, "192.0.2.128/26 via 198.51.100.99 dev eth1 onlink"},
		{"main", main, "192.0.2.192/26 via 198.51.100.254 dev eth2 onlink"},
	} {
		if !strings.Contains(c.text, c.route) {
			t.Errorf("%s: table %s lacks %q:\n%s", when, c.table, c.route, c.text)
		}
	}
	all := r.IP(t, "-4", "route", "show", "table", "all")
	for _, refused := range []string{"192.0.2.0/26", "192.0.2.32/27", "via 203.0.113.255", "via " + tiersutil.NetMemberIP + " "} {
		if strings.Contains(all, refused) {
			t.Errorf("%s: the namespace has a route with %q:\n%s", when, refused, all)
		}
	}
	if got := r.Get(t, "http://"+tiersutil.NetVIP+":80/"); got != "member-1" {
		t.Errorf("%s: the VIP answered %q", when, got)
	}
}

// controllerSpec is the input of controller_network.py for this topology:
// the VIP port on the client network (SINGLE topology, no host routes, no
// additional VIP) and the member port on the member network.
func (r *netTopology) controllerSpec() map[string]any {
	env := r.Env
	return map[string]any{
		"amphora_id": env.AmphoraID, "client_cert": env.ClientCert, "server_ca": env.CAFile, "port": env.Port,
		"topology": "SINGLE",
		"vip":      tiersutil.NetVIP, "vrrp_ip": tiersutil.NetVRRP, "vip_mac": r.VIPNIC.A.MAC, "vip_mtu": 1450,
		"vip_subnet": map[string]any{"id": "vip-subnet", "network_id": "vip-net", "cidr": "203.0.113.0/24",
			"gateway": "203.0.113.1", "ip_version": 4, "host_routes": []any{}},
		"additional_vips": []any{},
		"member_subnet": map[string]any{"id": "member-subnet", "network_id": "member-net", "cidr": "198.51.100.0/24",
			"gateway": nil, "ip_version": 4, "host_routes": []any{}},
		"member_mac": r.MemNIC.A.MAC, "member_ip": tiersutil.NetMemberIP, "member_mtu": 1400,
		"unknown_ip": "192.0.2.77",
	}
}

// runNetworkController runs controller_network.py with spec against the
// running agent and returns its report of each driver call and the
// controller's log.
func (r *netTopology) runNetworkController(t *testing.T, spec map[string]any) (map[string]ctrlutil.NetCall, string) {
	t.Helper()
	script := ctrlutil.TestdataScript(t, "network", "controller_network.py")
	work := t.TempDir()
	specFile := filepath.Join(work, "spec.json")
	data, _ := json.Marshal(spec)
	if err := fsutil.WriteFile(specFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, _ := ctrlutil.RunControllerScript(t, r.Env, script, "--spec", specFile, "--workdir", work)
	var report map[string]ctrlutil.NetCall
	if err := json.Unmarshal(stdout, &report); err != nil {
		t.Fatalf("controller script printed no report: %v\n%s\n%s", err, stdout, stderr)
	}
	if testing.Verbose() {
		t.Logf("controller log:\n%s", stderr)
	}
	t.Logf("agent access log:\n%s", requestLines(r.Env))
	return report, stderr
}
