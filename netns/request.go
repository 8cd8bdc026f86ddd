package netns

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/amphora-agent/amphora-agent/agent/fault"
)

// Framework-shaped 400 descriptions, as upstream words them.
const (
	descInvalidSubnet = "Invalid subnet information"
	descInvalidPort   = "Invalid port information"
	descInvalidRules  = "Invalid rules information"
)

// HostRoute is a subnet host route as the controller sends it.
type HostRoute struct {
	Destination string `json:"destination"`
	Nexthop     string `json:"nexthop"`
}

// AdditionalVIP is one more VIP on the VIP port. The controller sends it
// with the same fields as a fixed IP of a plugged port.
type AdditionalVIP = FixedIP

// VIPRequest is the body of POST /1.0/plug/vip/{vip}.
type VIPRequest struct {
	SubnetCIDR     string          `json:"subnet_cidr"`
	Gateway        *string         `json:"gateway"`
	MACAddress     string          `json:"mac_address"`
	MTU            *int            `json:"mtu"`
	VRRPIP         *string         `json:"vrrp_ip"`
	HostRoutes     []HostRoute     `json:"host_routes"`
	AdditionalVIPs []AdditionalVIP `json:"additional_vips"`
	IsSRIOV        *bool           `json:"is_sriov"`
}

// FixedIP is one fixed IP of a plugged port.
type FixedIP struct {
	IPAddress  string      `json:"ip_address"`
	SubnetCIDR string      `json:"subnet_cidr"`
	Gateway    *string     `json:"gateway"`
	HostRoutes []HostRoute `json:"host_routes"`
}

// VIPNetInfo is sent with plug/network when the port is the amphora's
// own VRRP port (a subnet added to the VIP port).
type VIPNetInfo struct {
	VIPRequest
	VIP string `json:"vip"`
}

// NetworkRequest is the body of POST /1.0/plug/network.
type NetworkRequest struct {
	MACAddress string      `json:"mac_address"`
	FixedIPs   []FixedIP   `json:"fixed_ips"`
	MTU        *int        `json:"mtu"`
	IsSRIOV    *bool       `json:"is_sriov"`
	VIPNetInfo *VIPNetInfo `json:"vip_net_info"`
}

// decodeObject parses body as a JSON object that has every key of
// required, then into v. Anything else is the endpoint's framework 400.
func decodeObject(body []byte, v any, desc string, required ...string) error {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(body, &keys); err != nil || keys == nil {
		return fault.BadRequest(desc)
	}
	for _, k := range required {
		if _, ok := keys[k]; !ok {
			return fault.BadRequest(desc)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return fault.BadRequest(desc)
	}
	return nil
}

// DecodeVIPRequest parses a plug/vip body.
func DecodeVIPRequest(body []byte) (*VIPRequest, error) {
	var r VIPRequest
	if err := decodeObject(body, &r, descInvalidSubnet, "subnet_cidr", "gateway", "mac_address"); err != nil {
		return nil, err
	}
	return &r, nil
}

// DecodeNetworkRequest parses a plug/network body.
func DecodeNetworkRequest(body []byte) (*NetworkRequest, error) {
	var r NetworkRequest
	if err := decodeObject(body, &r, descInvalidPort, "mac_address"); err != nil {
		return nil, err
	}
	return &r, nil
}

// pyAddrError words an address parse failure as upstream's (Python's).
func pyAddrError(s string) string {
	return fmt.Sprintf("'%s' does not appear to be an IPv4 or IPv6 address", s)
}

func parseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%s", pyAddrError(s))
	}
	return a.Unmap(), nil
}

// parseNetwork parses a network as Python's ip_network(strict=False)
// does: a prefix, or a bare address as a host network. Host bits are kept
// for the caller to judge; an IPv4-mapped network stays IPv6.
func parseNetwork(s string) (netip.Prefix, error) {
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		p, err = netip.ParsePrefix(s)
		if err != nil || p.Addr().Zone() != "" {
			return p, fmt.Errorf("'%s' does not appear to be an IPv4 or IPv6 network", s)
		}
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return p, fmt.Errorf("'%s' does not appear to be an IPv4 or IPv6 network", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// parseStrictNetwork is parseNetwork refusing host bits, as Python's
// ip_network does by default.
func parseStrictNetwork(s string) (netip.Prefix, error) {
	p, err := parseNetwork(s)
	if err != nil {
		return p, err
	}
	if p.Masked() != p {
		return p, fmt.Errorf("%s has host bits set", s)
	}
	return p, nil
}

// hostRouteFix is a host route destination sent with host bits set and
// the network applied in its place.
type hostRouteFix struct {
	Field   string // the destination's place in the request body
	Sent    string
	Applied netip.Prefix
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// validateVIPs checks the primary VIP and the additional ones as upstream
// does before touching anything: each address, and each subnet as a strict
// network. The message is "Invalid VIP: <reason>". It also returns the
// host route destinations it corrected.
func validateVIPs(vip string, r *VIPRequest) ([]vipSpec, []hostRouteFix, error) {
	all := []AdditionalVIP{{IPAddress: vip, SubnetCIDR: r.SubnetCIDR, Gateway: r.Gateway, HostRoutes: r.HostRoutes}}
	all = append(all, r.AdditionalVIPs...)
	out := make([]vipSpec, 0, len(all))
	var fixes []hostRouteFix
	for i, v := range all {
		a, err := parseAddr(v.IPAddress)
		if err != nil {
			return nil, nil, fault.Invalid("Invalid VIP: " + err.Error())
		}
		p, err := parseStrictNetwork(v.SubnetCIDR)
		if err != nil {
			return nil, nil, fault.Invalid("Invalid VIP: " + err.Error())
		}
		if !p.Contains(a) {
			return nil, nil, fault.Invalid(fmt.Sprintf("Invalid VIP: %s is not in subnet %s", v.IPAddress, v.SubnetCIDR))
		}
		at := ""
		if i > 0 {
			at = fmt.Sprintf("additional_vips[%d].", i-1)
		}
		routes, corrected, err := validateHostRoutes(v.HostRoutes, p, at)
		if err != nil {
			return nil, nil, fault.Invalid("Invalid VIP: " + err.Error())
		}
		fixes = append(fixes, corrected...)
		out = append(out, vipSpec{addr: a, subnet: p, gateway: str(v.Gateway), hostRoutes: routes})
	}
	return out, fixes, nil
}

// validateHostRoutes checks each route as upstream's bring-up needs it,
// which fails the plug on anything else: a destination network and a next
// hop address, both of the subnet's family. A destination with host bits
// set, which Neutron accepts, comes back as its network (upstream hands
// it to the kernel, which refuses it) and is listed in the fixes, named
// with at before its field. Errors name the field without at.
func validateHostRoutes(routes []HostRoute, subnet netip.Prefix, at string) ([]HostRoute, []hostRouteFix, error) {
	out := make([]HostRoute, 0, len(routes))
	var fixes []hostRouteFix
	for i, hr := range routes {
		dst, err := parseNetwork(hr.Destination)
		if err != nil {
			return nil, nil, fmt.Errorf("host_routes[%d].destination: %v", i, err)
		}
		hop, err := parseAddr(hr.Nexthop)
		if err != nil {
			return nil, nil, fmt.Errorf("host_routes[%d].nexthop: %v", i, err)
		}
		if dst.Addr().Is4() != subnet.Addr().Is4() {
			return nil, nil, fmt.Errorf("host_routes[%d].destination: %s is not of the family of subnet %s", i, hr.Destination, subnet)
		}
		// Neutron takes an IPv4-mapped next hop (::ffff:192.0.2.1) as IPv6;
		// it is accepted, and skipped with a warning where it is applied.
		hopIs4 := hop.Is4()
		if raw, err := netip.ParseAddr(hr.Nexthop); err == nil && raw.Is4In6() {
			hopIs4 = false
		}
		if hopIs4 != subnet.Addr().Is4() {
			return nil, nil, fmt.Errorf("host_routes[%d].nexthop: %s is not of the family of subnet %s", i, hr.Nexthop, subnet)
		}
		if dst.Masked() != dst {
			fixes = append(fixes, hostRouteFix{Field: fmt.Sprintf("%shost_routes[%d].destination", at, i), Sent: hr.Destination, Applied: dst.Masked()})
			hr.Destination = dst.Masked().String()
		}
		out = append(out, hr)
	}
	return out, fixes, nil
}

// validateVRRP checks vrrp_ip; its prefix length is the primary subnet's.
func validateVRRP(r *VIPRequest, primary netip.Prefix) (netip.Addr, int, error) {
	if r.VRRPIP == nil || *r.VRRPIP == "" {
		return netip.Addr{}, 0, nil
	}
	a, err := parseAddr(*r.VRRPIP)
	if err != nil {
		return netip.Addr{}, 0, fault.Invalid("Invalid VRRP Address: " + err.Error())
	}
	// It takes the primary subnet's prefix length, so it must be of that
	// family (an IPv6 address with /24 would be a different network).
	if a.Is4() != primary.Addr().Is4() {
		return netip.Addr{}, 0, fault.Invalid(fmt.Sprintf("Invalid VRRP Address: vrrp_ip %s is not of the family of subnet_cidr %s", *r.VRRPIP, primary))
	}
	return a, primary.Bits(), nil
}

// validateFixedIPs checks every fixed IP address ("Invalid network port")
// and its subnet, and returns the host route destinations it corrected.
func validateFixedIPs(fixed []FixedIP) ([]fixedIPSpec, []hostRouteFix, error) {
	out := make([]fixedIPSpec, 0, len(fixed))
	var fixes []hostRouteFix
	for i, f := range fixed {
		a, err := parseAddr(f.IPAddress)
		if err != nil {
			return nil, nil, fault.Invalid("Invalid network port")
		}
		p, err := parseStrictNetwork(f.SubnetCIDR)
		if err != nil || p.Addr().Is4() != a.Is4() {
			return nil, nil, fault.Invalid("Invalid network port")
		}
		at := fmt.Sprintf("fixed_ips[%d].", i)
		routes, corrected, err := validateHostRoutes(f.HostRoutes, p, at)
		if err != nil {
			return nil, nil, fault.Invalid("Invalid network port", at+err.Error())
		}
		fixes = append(fixes, corrected...)
		out = append(out, fixedIPSpec{address: f.IPAddress, addr: a, subnet: p, gateway: str(f.Gateway), hostRoutes: routes})
	}
	return out, fixes, nil
}
