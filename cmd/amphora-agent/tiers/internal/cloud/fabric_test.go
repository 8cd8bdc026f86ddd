package cloud

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// call posts args to the fabric as the Python drivers do and decodes the
// answer into out; it returns the HTTP status.
func call(t *testing.T, c *http.Client, method string, args, out any) int {
	t.Helper()
	data, _ := json.Marshal(args)
	resp, err := c.Post("http://fabric/"+method, "application/json", strings.NewReader(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode
}

// serveFabric serves f on a unix socket until the test ends and returns
// a client of it.
func serveFabric(t *testing.T, f *Fabric) *http.Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "f.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go f.Serve(l)
	var d net.Dialer
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, "unix", sock)
	}}}
}

// TestFabricCreateFlowCalls walks the calls Octavia's create and delete
// flows make (as the cloud tier's driver log shows them) through the
// fabric's wire: the VIP comes from the VIP subnet and is idempotent once
// the load balancer has a port, the server's first port is on the
// management network, the VRRP port carries the VIP, a member network is
// plugged and unplugged, and deletes leave no port behind.
func TestFabricCreateFlowCalls(t *testing.T) {
	f := NewFabric(PaperHypervisor{})
	mgmt, _, err := f.AddNetwork("mgmt", "198.51.100.0/24", "", "198.51.100.10", "")
	if err != nil {
		t.Fatal(err)
	}
	_, vipSubnet, err := f.AddNetwork("vip", "203.0.113.0/24", "203.0.113.1", "203.0.113.10", "")
	if err != nil {
		t.Fatal(err)
	}
	c := serveFabric(t, f)

	var vip map[string]any
	lb := map[string]any{"id": "lb1", "vip": map[string]any{"subnet_id": vipSubnet.ID}}
	if code := call(t, c, "network/allocate_vip", map[string]any{"load_balancer": lb}, &vip); code != 200 {
		t.Fatalf("allocate_vip: %d %v", code, vip)
	}
	if vip["ip_address"] != "203.0.113.10" || vip["subnet_id"] != vipSubnet.ID {
		t.Fatalf("vip = %v", vip)
	}
	var again map[string]any
	lb["vip"] = map[string]any{"subnet_id": vipSubnet.ID, "port_id": vip["port_id"]}
	call(t, c, "network/allocate_vip", map[string]any{"load_balancer": lb}, &again)
	if again["port_id"] != vip["port_id"] || again["ip_address"] != vip["ip_address"] {
		t.Fatalf("second allocate_vip made another VIP: %v, first %v", again, vip)
	}

	var built map[string]string
	call(t, c, "compute/build", map[string]any{"name": "amphora-1", "network_ids": []string{mgmt.ID}, "image_tag": "amphora",
		"config_drive_files": map[string]string{"/etc/octavia/amphora-agent.conf": "W0RFRkFVTFRd"}}, &built)
	var amp map[string]any
	deadline := time.Now().Add(5 * time.Second)
	for amp["status"] != "ACTIVE" && time.Now().Before(deadline) {
		call(t, c, "compute/get_amphora", map[string]any{"id": built["id"], "management_network_id": mgmt.ID}, &amp)
		time.Sleep(10 * time.Millisecond)
	}
	if amp["status"] != "ACTIVE" || amp["lb_network_ip"] != "198.51.100.10" {
		t.Fatalf("get_amphora = %v", amp)
	}
	// Nova reports the image by its UUID, which Octavia's amphora API
	// insists on (a tag there makes GET /v2/octavia/amphorae a 400).
	if id, _ := amp["image_id"].(string); !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(id) {
		t.Errorf("get_amphora image_id %q, want a UUID", id)
	}
	if s := f.Servers(); len(s) != 1 || string(s[0].Files["/etc/octavia/amphora-agent.conf"]) != "[DEFAULT]" {
		t.Fatalf("servers = %+v", s)
	}

	var aap map[string]string
	call(t, c, "network/plug_aap_port", map[string]any{"vip": vip, "amphora": map[string]any{"id": "a1", "compute_id": built["id"]}}, &aap)
	if aap["ha_ip"] != "203.0.113.10" || aap["vrrp_ip"] != "203.0.113.11" || aap["ha_port_id"] != vip["port_id"] {
		t.Fatalf("plug_aap_port = %v", aap)
	}
	var plugged []map[string]any
	call(t, c, "network/get_plugged_networks", map[string]any{"compute_id": built["id"]}, &plugged)
	if len(plugged) != 2 || plugged[0]["network_id"] != mgmt.ID {
		t.Fatalf("plugged = %v", plugged)
	}

	// A member network, as the member flow's network delta plugs it.
	members, _, err := f.AddNetwork("members", "198.51.100.128/25", "198.51.100.129", "198.51.100.140", "")
	if err != nil {
		t.Fatal(err)
	}
	var nic map[string]any
	call(t, c, "compute/attach_network_or_port", map[string]any{"id": built["id"], "network_id": members.ID}, &nic)
	call(t, c, "network/get_plugged_networks", map[string]any{"compute_id": built["id"]}, &plugged)
	if len(plugged) != 3 || nic["network_id"] != members.ID || plugged[2]["port_id"] != nic["port_id"] {
		t.Fatalf("after plugging the member network: %v (attach answered %v)", plugged, nic)
	}
	call(t, c, "network/unplug_network", map[string]any{"compute_id": built["id"], "network_id": members.ID}, nil)
	call(t, c, "network/get_plugged_networks", map[string]any{"compute_id": built["id"]}, &plugged)
	if len(plugged) != 2 {
		t.Fatalf("after unplugging the member network: %v", plugged)
	}

	call(t, c, "network/unplug_aap_port", map[string]any{"vip": vip, "amphora": map[string]any{"id": "a1",
		"compute_id": built["id"], "vrrp_port_id": aap["vrrp_port_id"]}}, nil)
	call(t, c, "network/deallocate_vip", map[string]any{"vip": vip}, nil)
	call(t, c, "compute/delete", map[string]any{"id": built["id"]}, nil)
	if n := f.PortCount(); n != 0 {
		t.Errorf("%d ports left after the delete flow", n)
	}
	if code := call(t, c, "compute/get_amphora", map[string]any{"id": built["id"]}, nil); code != 404 {
		t.Errorf("get_amphora of a deleted server: %d, want 404", code)
	}
	if code := call(t, c, "network/not_a_driver_call", map[string]any{}, nil); code != 501 {
		t.Errorf("a call the model lacks: %d, want 501", code)
	}
}

// TestFabricCascadeDeletePorts follows the calls of a load balancer's
// cascade delete, which unplugs nothing first: deallocate_vip deletes the
// VIP port and the VRRP port holding the VIP (as Neutron's driver does),
// and the server's delete takes the ports Nova made for it (management
// and an attached member network); a port the caller made and attached
// stays, unbound.
func TestFabricCascadeDeletePorts(t *testing.T) {
	f := NewFabric(PaperHypervisor{})
	mgmt, _, _ := f.AddNetwork("mgmt", "198.51.100.0/25", "", "198.51.100.10", "")
	_, vipSubnet, _ := f.AddNetwork("vip", "203.0.113.0/24", "203.0.113.1", "203.0.113.10", "")
	members, _, _ := f.AddNetwork("members", "198.51.100.128/25", "198.51.100.129", "198.51.100.140", "")
	vip, err := f.allocateVIP(lbCall{LoadBalancer: lbArgs{ID: "lb1", VIP: &vipArgs{SubnetID: vipSubnet.ID}}})
	if err != nil {
		t.Fatal(err)
	}
	v := vip.(map[string]any)
	va := vipArgs{IPAddress: v["ip_address"].(string), SubnetID: vipSubnet.ID, NetworkID: v["network_id"].(string), PortID: v["port_id"].(string)}
	built, err := f.build(buildArgs{Name: "amphora-1", NetworkIDs: []string{mgmt.ID}})
	if err != nil {
		t.Fatal(err)
	}
	id := built.(map[string]string)["id"]
	if _, err := f.plugAAPPort(aapCall{VIP: va, Amphora: amphoraArgs{ID: "a1", ComputeID: id}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.attach(attachCall{ID: id, NetworkID: &members.ID}); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	own, err := f.newPort(members.ID, "users-own")
	f.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.attach(attachCall{ID: id, PortID: &own.ID}); err != nil {
		t.Fatal(err)
	}
	if n := f.PortCount(); n != 5 {
		t.Fatalf("%d ports before the delete, want 5 (VIP, management, VRRP, member network, own)", n)
	}
	f.mu.Lock()
	f.deallocateVIP(vipCall{VIP: va})
	f.mu.Unlock()
	if _, err := f.deleteServer(idArgs{ID: id}); err != nil {
		t.Fatal(err)
	}
	if n := f.PortCount(); n != 1 || own.DeviceID != "" {
		t.Errorf("%d ports left after the cascade delete, want only the caller's own, unbound (device %q)", n, own.DeviceID)
	}
}

// TestFabricIPv6Subnets: a dual-stack VIP network (an IPv6 subnet added
// to it) and an IPv6-only member network answer as Neutron does for
// subnets made without IPv6 modes: get_subnet says ip_version 6 with
// ipv6_ra_mode and ipv6_address_mode null; a VIP asked for on the IPv6
// subnet and the VRRP port plugged for it hold one IPv6 address each (not
// one of each family); a port made on the network without a request gets
// one address per family; plugging the member network gives an IPv6
// address; an address asked for is written canonically.
func TestFabricIPv6Subnets(t *testing.T) {
	f := NewFabric(PaperHypervisor{})
	mgmt, _, _ := f.AddNetwork("mgmt", "198.51.100.0/25", "", "198.51.100.10", "")
	vipNet, vip4, _ := f.AddNetwork("vip", "203.0.113.0/24", "203.0.113.1", "203.0.113.10", "")
	vip6, err := f.AddSubnet(vipNet.ID, "vip-v6", "2001:db8:0:203::/64", "2001:db8:0:203::1", "2001:db8:0:203::10")
	if err != nil {
		t.Fatal(err)
	}
	members6, member6, _ := f.AddNetwork("members6", "2001:db8:0:198::/64", "2001:db8:0:198::1", "2001:db8:0:198::100", "")
	if _, err := f.AddSubnet(vipNet.ID, "bad", "2001:db8:0:204::/64", "", "2001:db8:0:205::1"); err == nil {
		t.Error("a first free address outside the subnet was accepted")
	}
	c := serveFabric(t, f)

	var sub map[string]any
	if code := call(t, c, "network/get_subnet", map[string]any{"id": vip6.ID}, &sub); code != 200 {
		t.Fatalf("get_subnet: %d %v", code, sub)
	}
	for key, want := range map[string]any{"ip_version": 6.0, "cidr": "2001:db8:0:203::/64", "gateway_ip": "2001:db8:0:203::1",
		"network_id": vipNet.ID, "ipv6_ra_mode": nil, "ipv6_address_mode": nil} {
		if got, ok := sub[key]; !ok || got != want {
			t.Errorf("get_subnet %s = %v (present %v), want %v", key, got, ok, want)
		}
	}
	if routes, ok := sub["host_routes"].([]any); !ok || len(routes) != 0 {
		t.Errorf("get_subnet host_routes = %#v, want an empty list", sub["host_routes"])
	}
	var network map[string]any
	call(t, c, "network/get_network", map[string]any{"id": vipNet.ID}, &network)
	if s, _ := network["subnets"].([]any); len(s) != 2 || s[0] != vip4.ID || s[1] != vip6.ID {
		t.Errorf("get_network subnets = %v, want the IPv4 and the IPv6 subnet", network["subnets"])
	}

	var vip map[string]any
	lb := map[string]any{"id": "lb6", "vip": map[string]any{"subnet_id": vip6.ID}}
	if code := call(t, c, "network/allocate_vip", map[string]any{"load_balancer": lb}, &vip); code != 200 {
		t.Fatalf("allocate_vip: %d %v", code, vip)
	}
	if vip["ip_address"] != "2001:db8:0:203::10" || vip["subnet_id"] != vip6.ID || vip["network_id"] != vipNet.ID {
		t.Fatalf("vip = %v", vip)
	}
	var vipPort Port
	call(t, c, "network/get_port", map[string]any{"id": vip["port_id"]}, &vipPort)
	if len(vipPort.FixedIPs) != 1 || !strings.HasPrefix(vipPort.MACAddress, "fa:16:3e:") {
		t.Errorf("VIP port %+v, want one fixed IP and a MAC of Neutron's", vipPort)
	}

	var built map[string]string
	call(t, c, "compute/build", map[string]any{"name": "amphora-6", "network_ids": []string{mgmt.ID}}, &built)
	var aap map[string]string
	call(t, c, "network/plug_aap_port", map[string]any{"vip": vip, "amphora": map[string]any{"id": "a6", "compute_id": built["id"]}}, &aap)
	if aap["vrrp_ip"] != "2001:db8:0:203::11" || aap["ha_ip"] != "2001:db8:0:203::10" {
		t.Fatalf("plug_aap_port = %v", aap)
	}
	var vrrp Port
	call(t, c, "network/get_port", map[string]any{"id": aap["vrrp_port_id"]}, &vrrp)
	if len(vrrp.FixedIPs) != 1 || vrrp.FixedIPs[0].SubnetID != vip6.ID {
		t.Errorf("VRRP port's fixed IPs %+v, want only the one on the IPv6 VIP subnet", vrrp.FixedIPs)
	}

	var nic interfaceJSON
	call(t, c, "compute/attach_network_or_port", map[string]any{"id": built["id"], "network_id": members6.ID}, &nic)
	if len(nic.FixedIPs) != 1 || nic.FixedIPs[0] != (FixedIP{SubnetID: member6.ID, IPAddress: "2001:db8:0:198::100"}) {
		t.Errorf("member network plugged with %+v, want one address from the IPv6 member subnet", nic.FixedIPs)
	}

	f.mu.Lock()
	dual, err := f.newPort(vipNet.ID, "dual")
	f.mu.Unlock()
	if err != nil || len(dual.FixedIPs) != 2 || dual.FixedIPs[0].SubnetID != vip4.ID || dual.FixedIPs[1].SubnetID != vip6.ID {
		t.Errorf("a port on the dual-stack network without a request: %+v, %v; want one IPv4 and one IPv6 address", dual, err)
	}
	var fixed Port
	call(t, c, "network/plug_fixed_ip", map[string]any{"port_id": nic.PortID, "subnet_id": member6.ID,
		"ip_address": "2001:0db8:0:198:0:0:0:00aa"}, &fixed)
	if n := len(fixed.FixedIPs); n != 2 || fixed.FixedIPs[1].IPAddress != "2001:db8:0:198::aa" {
		t.Errorf("plug_fixed_ip: %+v, want the address written canonically", fixed.FixedIPs)
	}
	if code := call(t, c, "network/plug_fixed_ip", map[string]any{"port_id": nic.PortID, "subnet_id": vip6.ID}, nil); code != 400 {
		t.Errorf("plug_fixed_ip from a subnet of another network: %d, want 400", code)
	}
}
