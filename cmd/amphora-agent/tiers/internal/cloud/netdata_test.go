package cloud

import (
	"encoding/json"
	"testing"
)

// TestNetworkData: a server built on the management network (DHCP) gets
// a network_data.json with its port's link (MAC, MTU, the port as VIF)
// and an ipv4_dhcp network on it; a port on a subnet without DHCP is
// described with its static address, netmask and default route.
func TestNetworkData(t *testing.T) {
	f := NewFabric(PaperHypervisor{})
	mgmt, mgmtSub, _ := f.AddNetwork("mgmt", "198.51.100.0/25", "", "198.51.100.10", "")
	mgmtSub.EnableDHCP = true
	vipNet, _, _ := f.AddNetwork("vip", "203.0.113.0/24", "203.0.113.1", "203.0.113.10", "")
	f.mu.Lock()
	vrrp, err := f.newPort(vipNet.ID, "vrrp")
	f.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	built, err := f.build(buildArgs{Name: "amphora-1", NetworkIDs: []string{mgmt.ID}, PortIDs: []string{vrrp.ID}})
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	s := f.servers[built.(map[string]string)["id"]]
	f.mu.Unlock()
	var nd networkData
	if err := json.Unmarshal(s.NetworkData, &nd); err != nil {
		t.Fatalf("%v: %s", err, s.NetworkData)
	}
	mgmtPort := s.Ports[0]
	if len(nd.Links) != 2 || nd.Links[0].MAC != mgmtPort.MACAddress || nd.Links[0].VIFID != mgmtPort.ID ||
		nd.Links[0].MTU != 1500 || nd.Links[0].ID != "tap"+mgmtPort.ID[:11] {
		t.Errorf("links %+v, want the management port's first", nd.Links)
	}
	if len(nd.Networks) != 2 {
		t.Fatalf("networks %+v, want 2", nd.Networks)
	}
	if n := nd.Networks[0]; n.Type != "ipv4_dhcp" || n.Link != nd.Links[0].ID || n.NetworkID != mgmt.ID || n.IPAddress != "" {
		t.Errorf("management network %+v, want ipv4_dhcp on the first link", n)
	}
	if n := nd.Networks[1]; n.Type != "ipv4" || n.IPAddress != "203.0.113.10" || n.Netmask != "255.255.255.0" ||
		len(n.Routes) != 1 || n.Routes[0].Gateway != "203.0.113.1" || n.Routes[0].Network != "0.0.0.0" {
		t.Errorf("VIP network %+v, want the static address with its default route", n)
	}
}
