package cloud

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
)

// The config drive's network_data.json as Nova writes it for a server's
// ports: a link per port (its MAC and MTU), a network per address
// (ipv4_dhcp/ipv6_dhcp where the subnet has DHCP, else the static address
// with its netmask and the default route through the gateway).

type ndLink struct {
	ID    string `json:"id"`
	VIFID string `json:"vif_id"`
	Type  string `json:"type"`
	MTU   int    `json:"mtu"`
	MAC   string `json:"ethernet_mac_address"`
}

type ndRoute struct {
	Network string `json:"network"`
	Netmask string `json:"netmask"`
	Gateway string `json:"gateway"`
}

type ndNetwork struct {
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	Link      string    `json:"link"`
	NetworkID string    `json:"network_id"`
	IPAddress string    `json:"ip_address,omitempty"`
	Netmask   string    `json:"netmask,omitempty"`
	Routes    []ndRoute `json:"routes,omitempty"`
	Services  []any     `json:"services"`
}

type networkData struct {
	Links    []ndLink    `json:"links"`
	Networks []ndNetwork `json:"networks"`
	Services []any       `json:"services"`
}

// networkDataOf describes the server's ports (the caller holds f.mu).
func (f *Fabric) networkDataOf(s *Server) ([]byte, error) {
	nd := networkData{Links: []ndLink{}, Networks: []ndNetwork{}, Services: []any{}}
	for _, p := range s.Ports {
		n := f.networks[p.NetworkID]
		if n == nil {
			return nil, notFound("network", p.NetworkID)
		}
		// Nova names a link after the port's tap device.
		link := ndLink{ID: "tap" + p.ID[:11], VIFID: p.ID, Type: "bridge", MTU: n.MTU, MAC: p.MACAddress}
		nd.Links = append(nd.Links, link)
		for _, ip := range p.FixedIPs {
			sub := f.subnets[ip.SubnetID]
			if sub == nil {
				return nil, notFound("subnet", ip.SubnetID)
			}
			e := ndNetwork{ID: fmt.Sprintf("network%d", len(nd.Networks)), Link: link.ID, NetworkID: n.ID, Services: []any{}}
			family := "ipv4"
			if sub.IPVersion == 6 {
				family = "ipv6"
			}
			if sub.EnableDHCP {
				e.Type = family + "_dhcp"
			} else {
				e.Type = family
				e.IPAddress = ip.IPAddress
				e.Netmask = netmaskOf(sub.prefix)
				if sub.GatewayIP != "" {
					dflt := "0.0.0.0"
					if sub.IPVersion == 6 {
						dflt = "::"
					}
					e.Routes = []ndRoute{{Network: dflt, Netmask: dflt, Gateway: sub.GatewayIP}}
				}
			}
			nd.Networks = append(nd.Networks, e)
		}
	}
	return json.Marshal(nd)
}

// netmaskOf writes a prefix's mask as Nova does: dotted for IPv4, an
// address for IPv6.
func netmaskOf(p netip.Prefix) string {
	bits := 32
	if p.Addr().Is6() {
		bits = 128
	}
	return net.IP(net.CIDRMask(p.Bits(), bits)).String()
}
