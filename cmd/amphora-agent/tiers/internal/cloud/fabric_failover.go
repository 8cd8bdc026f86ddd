package cloud

import (
	"crypto/sha1"
	"encoding/json"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
)

// What the failover flows need beyond create and delete: ports the flows
// make themselves (the VIP base port), their admin state, a network's IP
// availability (the API's VIP subnet choice) and server groups.

func init() {
	handlers["network/create_port"] = locked((*Fabric).createPort)
	handlers["network/set_port_admin_state_up"] = locked((*Fabric).setPortAdminStateUp)
	handlers["network/get_network_ip_availability"] = locked((*Fabric).networkIPAvailability)
}

// ServerGroup is a Nova server group. Its policy is recorded, not
// enforced: every server runs on the one host there is, where Nova would
// refuse a second anti-affinity member.
type ServerGroup struct {
	ID      string
	Name    string
	Policy  string
	Members []string // server ids, in build order
}

// imageID is the id Glance would give the image tagged tag: Nova reports
// a server's image by id, and Octavia's amphora API refuses to show an
// amphora whose image_id is not a UUID (400 on GET /v2/octavia/amphorae).
// Stable per tag, so the amphorae of one tag share it.
func imageID(tag string) string {
	b := sha1.Sum([]byte("amphora-test-image:" + tag))
	return formatUUID(b[:], 5)
}

type groupCall struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Policy string `json:"policy"`
}

func (f *Fabric) createServerGroup(a groupCall) (any, error) {
	g := &ServerGroup{ID: newUUID(), Name: a.Name, Policy: a.Policy}
	f.groups[g.ID] = g
	return map[string]string{"id": g.ID}, nil
}

func (f *Fabric) deleteServerGroup(a groupCall) (any, error) {
	if _, ok := f.groups[a.ID]; !ok {
		return nil, notFound("server group", a.ID)
	}
	delete(f.groups, a.ID)
	return map[string]any{}, nil
}

// MarshalJSON adds what Neutron derives: the status (ACTIVE once Nova
// bound the port to a server and its admin state is up, else DOWN) and
// the allowed-address pairs with the port's MAC.
func (p *Port) MarshalJSON() ([]byte, error) {
	type plain Port
	type pair struct {
		IPAddress  string `json:"ip_address"`
		MACAddress string `json:"mac_address"`
	}
	pairs := []pair{}
	for _, ip := range p.AllowedAddresses {
		pairs = append(pairs, pair{ip, p.MACAddress})
	}
	return json.Marshal(struct {
		*plain
		Status string `json:"status"`
		Pairs  []pair `json:"allowed_address_pairs"`
	}{(*plain)(p), p.Status(), pairs})
}

// Status is Neutron's status of the port: ACTIVE once Nova bound it to a
// server and its admin state is up, else DOWN.
func (p *Port) Status() string {
	if p.AdminUp && strings.HasPrefix(p.DeviceOwner, "compute:") {
		return "ACTIVE"
	}
	return "DOWN"
}

// portOn makes a port on n with one address per requested fixed IP (an
// empty address: the subnet's next free one). The caller holds f.mu.
func (f *Fabric) portOn(n *Network, name string, want []ipRequest) (*Port, error) {
	p := &Port{ID: newUUID(), Name: name, NetworkID: n.ID, MACAddress: topo.UniqueMAC(), AdminUp: true}
	for _, w := range want {
		ip, err := f.fixedIP(n, w)
		if err != nil {
			delete(f.ports, p.ID)
			return nil, err
		}
		// Held from here on, so a second address on the subnet differs.
		p.FixedIPs = append(p.FixedIPs, ip)
		f.ports[p.ID] = p
	}
	f.ports[p.ID] = p
	return p, nil
}

// claim returns ip when the subnet holds it and no port has it (Neutron
// answers 409 IpAddressAlreadyAllocated otherwise), or the next free
// address of the pool when ip is empty. The caller holds f.mu.
func (f *Fabric) claim(s *Subnet, ip string) (string, error) {
	if ip == "" {
		return f.allocate(s)
	}
	a, err := netip.ParseAddr(ip)
	if err != nil || !s.prefix.Contains(a) {
		return "", fmt.Errorf("IP address %s is not a valid IP for subnet %s (%s)", ip, s.ID, s.CIDR)
	}
	if f.usedIPs(s)[a] {
		return "", fmt.Errorf("IP address %s already allocated in subnet %s", a, s.ID)
	}
	return a.String(), nil
}

// allocate hands out the pool's next address no port holds, going on
// from the last one handed out and, at the pool's end, from its start.
// Each pass skips at most the held addresses, so it is bounded.
func (f *Fabric) allocate(s *Subnet) (string, error) {
	used := f.usedIPs(s)
	for _, from := range []netip.Addr{s.next, s.pool} {
		a := from
		for range len(used) + 1 {
			if !s.inPool(a) {
				break
			}
			if !used[a] {
				s.next = a.Next()
				return a.String(), nil
			}
			a = a.Next()
		}
	}
	return "", fmt.Errorf("subnet %s (%s) has no free address left", s.ID, s.CIDR)
}

// usedIPs is the set of the subnet's addresses ports hold.
func (f *Fabric) usedIPs(s *Subnet) map[netip.Addr]bool {
	used := map[netip.Addr]bool{}
	for _, p := range f.ports {
		for _, ip := range p.FixedIPs {
			if a, err := netip.ParseAddr(ip.IPAddress); err == nil && ip.SubnetID == s.ID {
				used[a] = true
			}
		}
	}
	return used
}

func (s *Subnet) inPool(a netip.Addr) bool {
	return a.IsValid() && s.prefix.Contains(a) && !a.Less(s.pool) && !(a.Is4() && a == lastOf(s.prefix))
}

// poolSize counts the pool's addresses (IPv4 without the broadcast).
func (s *Subnet) poolSize() *big.Int {
	last := new(big.Int).SetBytes(s.prefix.Masked().Addr().AsSlice())
	hostBits := s.prefix.Addr().BitLen() - s.prefix.Bits()
	last.Add(last, new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(hostBits)), big.NewInt(1)))
	if s.prefix.Addr().Is4() {
		last.Sub(last, big.NewInt(1))
	}
	n := last.Sub(last, new(big.Int).SetBytes(s.pool.AsSlice()))
	return n.Add(n, big.NewInt(1))
}

type createPortCall struct {
	NetworkID    string    `json:"network_id"`
	Name         *string   `json:"name"`
	FixedIPs     []FixedIP `json:"fixed_ips"` // an address is optional
	SecondaryIPs []string  `json:"secondary_ips"`
	AdminStateUp *bool     `json:"admin_state_up"`
}

// createPort is Neutron's port create as Octavia's driver asks for it:
// owned by Octavia, the secondary addresses (the VIP on a failover's base
// port) as allowed-address pairs, an address from each requested subnet
// (the network's first subnet when none is named). It stays unbound
// (DOWN) until Nova attaches it.
func (f *Fabric) createPort(a createPortCall) (any, error) {
	n, ok := f.networks[a.NetworkID]
	if !ok {
		return nil, notFound("network", a.NetworkID)
	}
	var want []ipRequest
	for _, ip := range a.FixedIPs {
		want = append(want, ipRequest(ip))
	}
	if len(want) == 0 && len(n.Subnets) > 0 {
		want = []ipRequest{{SubnetID: n.Subnets[0]}}
	}
	p, err := f.portOn(n, deref(a.Name), want)
	if err != nil {
		return nil, err
	}
	p.DeviceOwner = "Octavia"
	p.AdminUp = a.AdminStateUp == nil || *a.AdminStateUp
	p.AllowedAddresses = slices.Clone(a.SecondaryIPs)
	return p, nil
}

type adminStateCall struct {
	ID    string `json:"id"`
	State bool   `json:"state"`
}

func (f *Fabric) setPortAdminStateUp(a adminStateCall) (any, error) {
	p, ok := f.ports[a.ID]
	if !ok {
		return nil, notFound("port", a.ID)
	}
	p.AdminUp = a.State
	return p, nil
}

type subnetAvailability struct {
	SubnetID   string   `json:"subnet_id"`
	SubnetName string   `json:"subnet_name"`
	CIDR       string   `json:"cidr"`
	IPVersion  int      `json:"ip_version"`
	TotalIPs   *big.Int `json:"total_ips"`
	UsedIPs    int      `json:"used_ips"`
}

// networkIPAvailability is Neutron's network-ip-availability: per
// subnet, the allocation pool's size and the addresses ports hold.
func (f *Fabric) networkIPAvailability(a idArgs) (any, error) {
	n, ok := f.networks[a.ID]
	if !ok {
		return nil, notFound("network", a.ID)
	}
	total, used := new(big.Int), 0
	subnets := []subnetAvailability{}
	for _, id := range n.Subnets {
		s := f.subnets[id]
		sa := subnetAvailability{SubnetID: s.ID, SubnetName: s.Name, CIDR: s.CIDR, IPVersion: s.IPVersion,
			TotalIPs: s.poolSize(), UsedIPs: len(f.usedIPs(s))}
		total.Add(total, sa.TotalIPs)
		used += sa.UsedIPs
		subnets = append(subnets, sa)
	}
	return map[string]any{"network_id": n.ID, "network_name": n.Name, "total_ips": total, "used_ips": used,
		"subnets": subnets}, nil
}

// Ports lists copies of the ports that exist, by name then id.
func (f *Fabric) Ports() []Port {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Port
	for _, p := range f.ports {
		c := *p
		c.FixedIPs, c.AllowedAddresses = slices.Clone(p.FixedIPs), slices.Clone(p.AllowedAddresses)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Name < out[j].Name || out[i].Name == out[j].Name && out[i].ID < out[j].ID
	})
	return out
}

// ServerGroups lists copies of the server groups.
func (f *Fabric) ServerGroups() []ServerGroup {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []ServerGroup
	for _, g := range f.groups {
		c := *g
		c.Members = slices.Clone(g.Members)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
