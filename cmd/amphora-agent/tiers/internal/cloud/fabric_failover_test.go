package cloud

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"testing"
)

// portJSON is a port as the drivers read it, with what Neutron derives.
type portJSON struct {
	Port
	Status string `json:"status"`
	Pairs  []struct {
		IPAddress  string `json:"ip_address"`
		MACAddress string `json:"mac_address"`
	} `json:"allowed_address_pairs"`
}

func getPortJSON(t *testing.T, c *http.Client, id string) (portJSON, int) {
	t.Helper()
	var p portJSON
	code := call(t, c, "network/get_port", map[string]any{"id": id}, &p)
	return p, code
}

// TestFabricActiveStandbyFailoverCalls walks the calls of an
// ACTIVE_STANDBY create (server group, two servers in it, a VRRP port
// each with the VIP as allowed address) and of an amphora failover (the
// VIP base port made by create_port and attached by Nova, the failed
// amphora's base port set admin down, its server deleted, its base port
// deleted), as Octavia 11's amphorav2 flows make them, through the wire.
func TestFabricActiveStandbyFailoverCalls(t *testing.T) {
	f := NewFabric(PaperHypervisor{})
	mgmt, _, _ := f.AddNetwork("mgmt", "198.51.100.0/25", "", "198.51.100.10", "")
	vipNet, vipSubnet, _ := f.AddNetwork("vip", "203.0.113.0/24", "203.0.113.1", "203.0.113.10", "")
	c := serveFabric(t, f)

	var group map[string]string
	call(t, c, "compute/create_server_group", map[string]any{"name": "octavia-lb-lb1", "policy": "anti-affinity"}, &group)
	var vip map[string]any
	call(t, c, "network/allocate_vip", map[string]any{"load_balancer": map[string]any{"id": "lb1",
		"vip": map[string]any{"subnet_id": vipSubnet.ID}}}, &vip)
	build := func(name string) string {
		t.Helper()
		var built map[string]string
		if code := call(t, c, "compute/build", map[string]any{"name": name, "network_ids": []string{mgmt.ID},
			"server_group_id": group["id"]}, &built); code != 200 {
			t.Fatalf("build %s: %d", name, code)
		}
		return built["id"]
	}
	master, backup := build("amphora-master"), build("amphora-backup")
	if code := call(t, c, "compute/build", map[string]any{"name": "x", "network_ids": []string{mgmt.ID},
		"server_group_id": "no-such-group"}, nil); code != 404 {
		t.Errorf("build in a server group that does not exist: %d, want 404", code)
	}
	groups := f.ServerGroups()
	if len(groups) != 1 || groups[0].Policy != "anti-affinity" || !slices.Equal(groups[0].Members, []string{master, backup}) {
		t.Fatalf("server groups = %+v, want one anti-affinity group holding %s and %s", groups, master, backup)
	}

	vrrp := map[string]string{}
	for _, id := range []string{master, backup} {
		var aap map[string]string
		call(t, c, "network/plug_aap_port", map[string]any{"vip": vip, "amphora": map[string]any{"id": "amp-" + id, "compute_id": id}}, &aap)
		p, _ := getPortJSON(t, c, aap["vrrp_port_id"])
		if p.NetworkID != vipNet.ID || p.DeviceID != id || p.Status != "ACTIVE" || len(p.Pairs) != 1 ||
			p.Pairs[0].IPAddress != vip["ip_address"] || p.Pairs[0].MACAddress != p.MACAddress {
			t.Fatalf("VRRP port of %s: %+v (VIP %v)", id, p, vip["ip_address"])
		}
		vrrp[id] = p.ID
	}

	// The failover of the backup: a base port for the new amphora first.
	var base portJSON
	if code := call(t, c, "network/create_port", map[string]any{"network_id": vipNet.ID, "name": "octavia-lb-vrrp-new",
		"fixed_ips": []map[string]string{{"subnet_id": vipSubnet.ID}}, "secondary_ips": []any{vip["ip_address"]},
		"admin_state_up": true}, &base); code != 200 {
		t.Fatalf("create_port: %d", code)
	}
	if base.DeviceOwner != "Octavia" || base.Status != "DOWN" || !base.AdminUp || len(base.FixedIPs) != 1 ||
		base.FixedIPs[0].SubnetID != vipSubnet.ID || base.FixedIPs[0].IPAddress != "203.0.113.13" ||
		len(base.Pairs) != 1 || base.Pairs[0].IPAddress != vip["ip_address"] {
		t.Fatalf("base port = %+v", base)
	}
	replacement := build("amphora-new")
	call(t, c, "compute/attach_network_or_port", map[string]any{"id": replacement, "port_id": base.ID}, nil)
	if p, _ := getPortJSON(t, c, base.ID); p.DeviceID != replacement || p.Status != "ACTIVE" {
		t.Fatalf("base port after the attach: %+v", p)
	}
	if code := call(t, c, "network/set_port_admin_state_up", map[string]any{"id": vrrp[backup], "state": false}, nil); code != 200 {
		t.Fatalf("set_port_admin_state_up: %d", code)
	}
	if p, _ := getPortJSON(t, c, vrrp[backup]); p.AdminUp || p.Status != "DOWN" {
		t.Fatalf("VRRP port after admin down: %+v", p)
	}
	if code := call(t, c, "network/set_port_admin_state_up", map[string]any{"id": "gone", "state": false}, nil); code != 404 {
		t.Errorf("admin state of a port that does not exist: %d, want 404", code)
	}

	// Nova deletes the management port it made and keeps, unbound, the
	// VRRP port it was given; the flow then deletes that one.
	var before []map[string]any
	call(t, c, "network/get_plugged_networks", map[string]any{"compute_id": backup}, &before)
	call(t, c, "compute/delete", map[string]any{"id": backup}, nil)
	if _, code := getPortJSON(t, c, before[0]["port_id"].(string)); code != 404 {
		t.Errorf("the deleted server's management port: %d, want 404", code)
	}
	if p, code := getPortJSON(t, c, vrrp[backup]); code != 200 || p.DeviceID != "" || p.Status != "DOWN" {
		t.Errorf("the deleted server's VRRP port: %d %+v, want kept and unbound", code, p)
	}
	call(t, c, "network/delete_port", map[string]any{"id": vrrp[backup]}, nil)
	if _, code := getPortJSON(t, c, vrrp[backup]); code != 404 {
		t.Errorf("VRRP port after delete_port: %d", code)
	}
	if g := f.ServerGroups(); len(g) != 1 || !slices.Equal(g[0].Members, []string{master, replacement}) {
		t.Errorf("server group after the failover: %+v", g)
	}

	var avail struct {
		Total   json.Number `json:"total_ips"`
		Used    int         `json:"used_ips"`
		Subnets []struct {
			SubnetID string      `json:"subnet_id"`
			Total    json.Number `json:"total_ips"`
			Used     int         `json:"used_ips"`
		} `json:"subnets"`
	}
	call(t, c, "network/get_network_ip_availability", map[string]any{"id": vipNet.ID}, &avail)
	// 203.0.113.10-254; held: the VIP, the master's VRRP port, the base port.
	if avail.Total != "245" || avail.Used != 3 || len(avail.Subnets) != 1 || avail.Subnets[0].SubnetID != vipSubnet.ID ||
		avail.Subnets[0].Total != "245" || avail.Subnets[0].Used != 3 {
		t.Errorf("IP availability = %+v", avail)
	}
	call(t, c, "compute/delete_server_group", map[string]any{"id": group["id"]}, nil)
	if g := f.ServerGroups(); len(g) != 0 {
		t.Errorf("server groups after the delete: %+v", g)
	}
}

// TestFabricAddressPool: addresses come in order from the pool's start,
// a released one is handed out again only when the pool's end is
// reached, an address a port holds is refused, and the IP availability
// counts the pool (IPv4 without the broadcast; an IPv6 /64's pool is
// larger than an int64).
func TestFabricAddressPool(t *testing.T) {
	f := NewFabric(PaperHypervisor{})
	n, s, _ := f.AddNetwork("small", "203.0.113.0/29", "203.0.113.1", "203.0.113.2", "")
	n2, _, _ := f.AddNetwork("wide", "198.51.100.0/24", "", "198.51.100.10", "")
	_, s6, err := f.AddNetwork("v6", "2001:db8:0:1::/64", "2001:db8:0:1::1", "2001:db8:0:1::10", "")
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var ports []*Port
	for range 5 {
		p, err := f.newPort(n.ID, "p")
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, p)
	}
	if got := ports[4].FixedIPs[0].IPAddress; got != "203.0.113.6" {
		t.Fatalf("fifth address %s, want 203.0.113.6", got)
	}
	if _, err := f.newPort(n.ID, "p"); err == nil {
		t.Fatal("a sixth port on a full /29 pool got an address")
	}
	delete(f.ports, ports[1].ID)
	p, err := f.newPort(n.ID, "p")
	if err != nil || p.FixedIPs[0].IPAddress != "203.0.113.3" {
		t.Fatalf("after releasing .3 the full pool gave %v, %v; want .3", p, err)
	}
	if _, err := f.newPort(n.ID, "p", ipRequest{IPAddress: "203.0.113.4"}); err == nil {
		t.Error("an address a port holds was handed out again")
	}
	if _, err := f.createPort(createPortCall{NetworkID: n.ID, FixedIPs: []FixedIP{{SubnetID: s.ID, IPAddress: "198.51.100.5"}}}); err == nil {
		t.Error("create_port took an address outside the subnet")
	}
	if got := s.poolSize().String(); got != "5" {
		t.Errorf("pool size %s, want 5", got)
	}
	if got := len(f.usedIPs(s)); got != 5 {
		t.Errorf("%d addresses held after the refused requests, want 5 (nothing half-made kept)", got)
	}

	// Fresh addresses come before released ones.
	a, _ := f.newPort(n2.ID, "a")
	f.newPort(n2.ID, "b")
	delete(f.ports, a.ID)
	if c, _ := f.newPort(n2.ID, "c"); c.FixedIPs[0].IPAddress != "198.51.100.12" {
		t.Errorf("next address %s, want 198.51.100.12 (not the released .10)", c.FixedIPs[0].IPAddress)
	}

	if got := s6.poolSize().String(); got != "18446744073709551600" {
		t.Errorf("IPv6 pool size %s, want 2^64-16", got)
	}
}

// TestFabricImageIDIsUUID: get_amphora reports the image by a UUID, one
// per tag, as Nova does; Octavia's amphora API refuses any other image_id.
func TestFabricImageIDIsUUID(t *testing.T) {
	f := NewFabric(PaperHypervisor{})
	mgmt, _, _ := f.AddNetwork("mgmt", "198.51.100.0/25", "", "198.51.100.10", "")
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	ids := map[string]string{}
	for _, tag := range []string{"amphora", "amphora", "other"} {
		built, err := f.build(buildArgs{Name: "a", ImageTag: tag, NetworkIDs: []string{mgmt.ID}})
		if err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		amp, err := f.getAmphora(getAmphoraCall{ID: built.(map[string]string)["id"]})
		f.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		id := amp.(map[string]any)["image_id"].(string)
		if !uuid.MatchString(id) || ids[tag] != "" && ids[tag] != id {
			t.Errorf("image_id for tag %q: %q (before %q), want one UUID per tag", tag, id, ids[tag])
		}
		ids[tag] = id
	}
	if ids["amphora"] == ids["other"] {
		t.Errorf("two tags share image_id %s", ids["other"])
	}
}
