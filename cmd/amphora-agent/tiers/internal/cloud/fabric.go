package cloud

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"sync"
)

// Fabric is the cloud the control plane drives: a small model of Neutron
// (networks, subnets, ports with MACs and addresses) and of Nova (servers
// with their ports and config-drive files). Octavia reaches it through
// the project's Python drivers (drivers/amphora_test_cloud), which call
// the handlers fabric_http.go lists (fabric_compute.go for Nova,
// fabric_network.go for Neutron); what really boots a server is the
// Hypervisor, so all lifetimes stay in Go.
type Fabric struct {
	mu         sync.Mutex
	networks   map[string]*Network
	subnets    map[string]*Subnet
	ports      map[string]*Port
	servers    map[string]*Server
	groups     map[string]*ServerGroup
	hypervisor Hypervisor
	calls      []string
}

// Hypervisor boots and removes what the compute driver asks for. Boot
// returns once the server runs (or failed); the fabric calls it outside
// its lock, from a goroutine of its own, as Nova builds asynchronously.
// Attach plugs a port into a running server, its host side on bridge;
// Detach unplugs it.
type Hypervisor interface {
	Boot(s *Server) error
	Attach(s *Server, p *Port, bridge string) error
	Detach(s *Server, p *Port) error
	Delete(s *Server) error
}

// PaperHypervisor boots nothing: servers become ACTIVE at once. With
// Octavia's no-op amphora driver it runs the flows without any VM.
type PaperHypervisor struct{}

func (PaperHypervisor) Boot(*Server) error                  { return nil }
func (PaperHypervisor) Attach(*Server, *Port, string) error { return nil }
func (PaperHypervisor) Detach(*Server, *Port) error         { return nil }
func (PaperHypervisor) Delete(*Server) error                { return nil }

// Network is a Neutron network.
type Network struct {
	ID      string   `json:"id"`
	Name    string   `json:"name"`
	MTU     int      `json:"mtu"`
	Subnets []string `json:"subnets"`
	// Bridge is the Linux bridge (in the controller's namespace) that
	// carries it; empty for a network that exists only on paper.
	Bridge string `json:"-"`
}

// Subnet is a Neutron subnet. Its allocation pool runs from firstFree to
// its last address; addresses are handed out in order and a released one
// is handed out again only once the pool's end is reached, so a new port
// rarely inherits a gone port's address (and its neighbours' ARP entries).
type Subnet struct {
	ID         string      `json:"id"`
	Name       string      `json:"name"`
	NetworkID  string      `json:"network_id"`
	CIDR       string      `json:"cidr"`
	IPVersion  int         `json:"ip_version"`
	GatewayIP  string      `json:"gateway_ip,omitempty"`
	HostRoutes []HostRoute `json:"host_routes"`
	// EnableDHCP: a DHCP server hands out the ports' addresses (the
	// management network's dnsmasq); network_data.json then says so.
	EnableDHCP bool `json:"enable_dhcp"`
	// IPv6RAMode and IPv6AddressMode are always null, as Neutron answers
	// for a subnet made without them (and for every IPv4 subnet): the
	// fabric hands out each address itself, SLAAC and DHCPv6 are not
	// modelled.
	IPv6RAMode      *string `json:"ipv6_ra_mode"`
	IPv6AddressMode *string `json:"ipv6_address_mode"`

	prefix netip.Prefix
	pool   netip.Addr // the allocation pool's first address
	next   netip.Addr
}

// HostRoute is one of a subnet's host routes.
type HostRoute struct {
	Destination string `json:"destination"`
	Nexthop     string `json:"nexthop"`
}

// FixedIP is one address of a port.
type FixedIP struct {
	SubnetID  string `json:"subnet_id"`
	IPAddress string `json:"ip_address"`
}

// Port is a Neutron port.
type Port struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	NetworkID   string    `json:"network_id"`
	DeviceID    string    `json:"device_id"`
	DeviceOwner string    `json:"device_owner"`
	MACAddress  string    `json:"mac_address"`
	FixedIPs    []FixedIP `json:"fixed_ips"`
	AdminUp     bool      `json:"admin_state_up"`
	// AllowedAddresses are the allowed-address-pairs Octavia asks for
	// (the VIP on a VRRP port); recorded, not enforced.
	AllowedAddresses []string `json:"-"`
	// NovaMade marks a port Nova created for a server (on a network it
	// was given): Nova deletes it with the server.
	NovaMade bool `json:"-"`
}

// Server is a Nova server.
type Server struct {
	ID               string
	Name             string
	Status           string // BUILD, ACTIVE, ERROR, DELETED
	Fault            string
	Flavor           string
	ImageTag         string
	ServerGroupID    string
	AvailabilityZone string
	UserData         string
	// NetworkData is the config drive's network_data.json.
	NetworkData []byte
	// Files is the config drive Octavia asked for: target path → content.
	Files map[string][]byte
	// Ports in the order they were attached; the first is the
	// management port.
	Ports []*Port
}

// NewFabric makes an empty cloud whose servers boot on h.
func NewFabric(h Hypervisor) *Fabric {
	return &Fabric{networks: map[string]*Network{}, subnets: map[string]*Subnet{}, ports: map[string]*Port{},
		servers: map[string]*Server{}, groups: map[string]*ServerGroup{}, hypervisor: h}
}

// errNotFound marks a lookup of something the model does not hold; the
// drivers turn it into Octavia's NotFound exceptions.
var errNotFound = errors.New("not found")

// errNotModelled marks a request the model does not implement: the
// flow that made it fails with this message in its log.
var errNotModelled = errors.New("not modelled by the test cloud")

func notFound(kind, id string) error { return fmt.Errorf("%s %s: %w", kind, id, errNotFound) }

// AddNetwork creates a network with one subnet; addresses are handed out
// from firstFree on. bridge names the Linux bridge carrying it ("" for a
// network on paper).
func (f *Fabric) AddNetwork(name, cidr, gateway, firstFree, bridge string) (*Network, *Subnet, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := &Network{ID: newUUID(), Name: name, MTU: 1500, Bridge: bridge}
	s, err := f.addSubnet(n, name+"-subnet", cidr, gateway, firstFree)
	if err != nil {
		return nil, nil, err
	}
	f.networks[n.ID] = n
	return n, s, nil
}

// AddSubnet adds a subnet to a network, as a second subnet of another
// IP version makes a dual-stack Neutron network.
func (f *Fabric) AddSubnet(networkID, name, cidr, gateway, firstFree string) (*Subnet, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.networks[networkID]
	if !ok {
		return nil, notFound("network", networkID)
	}
	return f.addSubnet(n, name, cidr, gateway, firstFree)
}

func (f *Fabric) addSubnet(n *Network, name, cidr, gateway, firstFree string) (*Subnet, error) {
	prefix, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, err
	}
	next, err := netip.ParseAddr(firstFree)
	if err != nil || !prefix.Contains(next) {
		return nil, fmt.Errorf("first free address %q is not in %s", firstFree, cidr)
	}
	version := 4
	if prefix.Addr().Is6() {
		version = 6
	}
	s := &Subnet{ID: newUUID(), Name: name, NetworkID: n.ID, CIDR: prefix.Masked().String(),
		IPVersion: version, GatewayIP: gateway, HostRoutes: []HostRoute{}, prefix: prefix.Masked(), pool: next, next: next}
	n.Subnets = append(n.Subnets, s.ID)
	f.subnets[s.ID] = s
	return s, nil
}

// lastOf is an IPv4 prefix's broadcast address.
func lastOf(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := 32 - p.Bits()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v |= (1 << host) - 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// ipRequest is one entry of a port's fixed_ips in a create request: a
// subnet, an address, or both.
type ipRequest struct {
	SubnetID  string
	IPAddress string
}

// newPort makes a port on network with a MAC in Neutron's fa:16:3e range
// and the addresses asked for. Without a request it takes what Neutron's
// IPAM gives a port on the network: one address from the first IPv4
// subnet and one from the first IPv6 subnet. The caller holds f.mu.
func (f *Fabric) newPort(networkID, name string, want ...ipRequest) (*Port, error) {
	n, ok := f.networks[networkID]
	if !ok {
		return nil, notFound("network", networkID)
	}
	if len(n.Subnets) == 0 {
		return nil, fmt.Errorf("network %s has no subnet", networkID)
	}
	if len(want) == 0 {
		for _, version := range []int{4, 6} {
			for _, id := range n.Subnets {
				if f.subnets[id].IPVersion == version {
					want = append(want, ipRequest{SubnetID: id})
					break
				}
			}
		}
	}
	return f.portOn(n, name, want)
}

// fixedIP resolves one requested address on network n as Neutron does:
// the subnet named, or the one holding the address; the address asked
// for (written canonically), or the subnet's next free one.
func (f *Fabric) fixedIP(n *Network, w ipRequest) (FixedIP, error) {
	var addr netip.Addr
	if w.IPAddress != "" {
		var err error
		if addr, err = netip.ParseAddr(w.IPAddress); err != nil {
			return FixedIP{}, fmt.Errorf("fixed IP %q: %v", w.IPAddress, err)
		}
	}
	var sub *Subnet
	for _, id := range n.Subnets {
		s := f.subnets[id]
		if (w.SubnetID != "" && id == w.SubnetID) || (w.SubnetID == "" && addr.IsValid() && s.prefix.Contains(addr)) {
			sub = s
		}
	}
	switch {
	case sub == nil && w.SubnetID != "":
		return FixedIP{}, fmt.Errorf("subnet %s is not on network %s", w.SubnetID, n.ID)
	case sub == nil:
		return FixedIP{}, fmt.Errorf("no subnet of network %s holds %s", n.ID, w.IPAddress)
	case addr.IsValid() && !sub.prefix.Contains(addr):
		return FixedIP{}, fmt.Errorf("%s is not in subnet %s (%s)", w.IPAddress, sub.ID, sub.CIDR)
	}
	ip, err := f.claim(sub, w.IPAddress)
	return FixedIP{SubnetID: sub.ID, IPAddress: ip}, err
}

// record notes a driver call for Calls.
func (f *Fabric) record(method string) {
	f.mu.Lock()
	f.calls = append(f.calls, method)
	f.mu.Unlock()
}

// Calls lists the driver calls so far, in order ("compute/build", ...).
func (f *Fabric) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// Servers lists the servers that exist (not DELETED), by name.
func (f *Fabric) Servers() []Server {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Server
	for _, s := range f.servers {
		if s.Status != "DELETED" {
			out = append(out, *s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// PortCount is how many ports exist.
func (f *Fabric) PortCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.ports)
}

func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	return formatUUID(b[:], 4)
}

// formatUUID writes b's first 16 bytes as a UUID of the given version.
func formatUUID(b []byte, version byte) string {
	b[6] = b[6]&0x0f | version<<4
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
