package cloud

import (
	"errors"
	"slices"
)

// Network.

type portQuery struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	NetworkID string `json:"network_id"`
	DeviceID  string `json:"device_id"`
}

type lbCall struct {
	LoadBalancer lbArgs `json:"load_balancer"`
}

type vipCall struct {
	VIP vipArgs `json:"vip"`
}

type aapCall struct {
	VIP     vipArgs     `json:"vip"`
	Amphora amphoraArgs `json:"amphora"`
}

type amphoraCall struct {
	Amphora amphoraArgs `json:"amphora"`
}

type computeCall struct {
	ComputeID string `json:"compute_id"`
}

func (f *Fabric) getNetwork(a idArgs) (any, error) {
	for _, n := range f.networks {
		if n.ID == a.ID || (a.ID == "" && n.Name == a.Name) {
			return map[string]any{"id": n.ID, "name": n.Name, "mtu": n.MTU, "subnets": n.Subnets,
				"port_security_enabled": true}, nil
		}
	}
	return nil, notFound("network", a.ID+a.Name)
}

func (f *Fabric) getSubnet(a idArgs) (any, error) {
	for _, s := range f.subnets {
		if s.ID == a.ID || (a.ID == "" && s.Name == a.Name) {
			return s, nil
		}
	}
	return nil, notFound("subnet", a.ID+a.Name)
}

func (f *Fabric) getPort(a portQuery) (any, error) {
	for _, p := range f.ports {
		switch {
		case a.ID != "" && p.ID == a.ID,
			a.ID == "" && a.Name != "" && p.Name == a.Name,
			a.ID == "" && a.Name == "" && p.NetworkID == a.NetworkID && p.DeviceID == a.DeviceID:
			return p, nil
		}
	}
	return nil, notFound("port", a.ID+a.Name+a.DeviceID)
}

type vipArgs struct {
	IPAddress string `json:"ip_address"`
	SubnetID  string `json:"subnet_id"`
	NetworkID string `json:"network_id"`
	PortID    string `json:"port_id"`
}

type amphoraArgs struct {
	ID         string `json:"id"`
	ComputeID  string `json:"compute_id"`
	VRRPPortID string `json:"vrrp_port_id"`
	HAPortID   string `json:"ha_port_id"`
}

type lbArgs struct {
	ID  string   `json:"id"`
	VIP *vipArgs `json:"vip"`
}

// allocateVIP makes the VIP port as Neutron's driver does: on the
// requested subnet (or the network's first), with the requested address
// if any. The API and then the worker call it; once the load balancer
// has a port the call returns that port again.
func (f *Fabric) allocateVIP(a lbCall) (any, error) {
	v := a.LoadBalancer.VIP
	if v == nil {
		return nil, errors.New("allocate_vip: the load balancer has no VIP")
	}
	if p, ok := f.ports[v.PortID]; ok {
		return vipOf(p), nil
	}
	if v.PortID != "" {
		return nil, notFound("port", v.PortID)
	}
	networkID := v.NetworkID
	if v.SubnetID != "" {
		s, ok := f.subnets[v.SubnetID]
		if !ok {
			return nil, notFound("subnet", v.SubnetID)
		}
		networkID = s.NetworkID
	}
	var want []ipRequest
	if v.SubnetID != "" || v.IPAddress != "" {
		want = append(want, ipRequest{SubnetID: v.SubnetID, IPAddress: v.IPAddress})
	}
	p, err := f.newPort(networkID, "octavia-lb-"+a.LoadBalancer.ID, want...)
	if err != nil {
		return nil, err
	}
	p.DeviceID, p.DeviceOwner = "lb-"+a.LoadBalancer.ID, "Octavia"
	return vipOf(p), nil
}

func vipOf(p *Port) map[string]any {
	return map[string]any{"ip_address": p.FixedIPs[0].IPAddress, "subnet_id": p.FixedIPs[0].SubnetID,
		"network_id": p.NetworkID, "port_id": p.ID, "octavia_owned": true}
}

// deallocateVIP deletes the VIP port and, as Neutron's driver does, the
// amphorae's VRRP ports: the ports holding the VIP as an allowed address.
func (f *Fabric) deallocateVIP(a vipCall) (any, error) {
	delete(f.ports, a.VIP.PortID)
	for id, p := range f.ports {
		if a.VIP.IPAddress != "" && slices.Contains(p.AllowedAddresses, a.VIP.IPAddress) {
			delete(f.ports, id)
		}
	}
	return map[string]any{}, nil
}

// plugAAPPort gives the amphora a VRRP port on the VIP's network with the
// VIP as its allowed address, and has the hypervisor hot-plug it into
// the amphora's server, as Neutron's driver has Nova attach it.
func (f *Fabric) plugAAPPort(a aapCall) (any, error) {
	f.mu.Lock()
	s, err := f.server(a.Amphora.ComputeID)
	if err != nil {
		f.mu.Unlock()
		return nil, err
	}
	var p *Port
	for _, q := range s.Ports {
		if q.NetworkID == a.VIP.NetworkID {
			p = q // plugged already: Octavia retries the task
		}
	}
	if p != nil {
		f.mu.Unlock()
		return aapAnswer(p, a.VIP), nil
	}
	// Neutron's driver asks for the VRRP port's address on the VIP's
	// subnet only, so a dual-stack VIP network gives it one address.
	var want []ipRequest
	if a.VIP.SubnetID != "" {
		want = append(want, ipRequest{SubnetID: a.VIP.SubnetID})
	}
	if p, err = f.newPort(a.VIP.NetworkID, "octavia-lb-vrrp-"+a.Amphora.ID, want...); err != nil {
		f.mu.Unlock()
		return nil, err
	}
	p.DeviceID, p.DeviceOwner = s.ID, "compute:nova"
	p.AllowedAddresses = []string{a.VIP.IPAddress}
	bridge := f.networks[p.NetworkID].Bridge
	f.mu.Unlock()
	if err := f.hypervisor.Attach(s, p, bridge); err != nil {
		f.mu.Lock()
		delete(f.ports, p.ID)
		f.mu.Unlock()
		return nil, err
	}
	f.mu.Lock()
	s.Ports = append(s.Ports, p)
	f.mu.Unlock()
	return aapAnswer(p, a.VIP), nil
}

func aapAnswer(p *Port, vip vipArgs) map[string]string {
	return map[string]string{"vrrp_ip": p.FixedIPs[0].IPAddress, "ha_ip": vip.IPAddress,
		"vrrp_port_id": p.ID, "ha_port_id": vip.PortID}
}

func (f *Fabric) unplugAAPPort(a amphoraCall) (any, error) {
	p, ok := f.ports[a.Amphora.VRRPPortID]
	if !ok {
		return map[string]any{}, nil // gone already: unplugging is idempotent
	}
	if s, err := f.server(a.Amphora.ComputeID); err == nil {
		s.Ports = without(s.Ports, p)
	}
	delete(f.ports, p.ID)
	return map[string]any{}, nil
}

func without(ports []*Port, p *Port) []*Port {
	var out []*Port
	for _, q := range ports {
		if q != p {
			out = append(out, q)
		}
	}
	return out
}

type interfaceJSON struct {
	ComputeID string    `json:"compute_id"`
	NetworkID string    `json:"network_id"`
	PortID    string    `json:"port_id"`
	FixedIPs  []FixedIP `json:"fixed_ips"`
}

func (f *Fabric) pluggedNetworks(a computeCall) (any, error) {
	s, err := f.server(a.ComputeID)
	if err != nil {
		return nil, err
	}
	out := []interfaceJSON{}
	for _, p := range s.Ports {
		out = append(out, interfaceJSON{ComputeID: s.ID, NetworkID: p.NetworkID, PortID: p.ID, FixedIPs: p.FixedIPs})
	}
	return out, nil
}

type unplugNetworkCall struct {
	ComputeID string `json:"compute_id"`
	NetworkID string `json:"network_id"`
}

// unplugNetwork detaches and deletes the server's ports on the network,
// as Neutron's driver does.
func (f *Fabric) unplugNetwork(a unplugNetworkCall) (any, error) {
	f.mu.Lock()
	s, err := f.server(a.ComputeID)
	var ports []*Port
	if err == nil {
		for _, p := range s.Ports {
			if p.NetworkID == a.NetworkID {
				ports = append(ports, p)
			}
		}
	}
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if len(ports) == 0 {
		return nil, notFound("port of server "+s.ID+" on network", a.NetworkID)
	}
	for _, p := range ports {
		if err := f.detach(s, p); err != nil {
			return nil, err
		}
		f.mu.Lock()
		delete(f.ports, p.ID)
		f.mu.Unlock()
	}
	return map[string]any{}, nil
}

type fixedIPCall struct {
	PortID    string  `json:"port_id"`
	SubnetID  string  `json:"subnet_id"`
	IPAddress *string `json:"ip_address"`
}

// plugFixedIP adds an address from the subnet (one on the port's
// network) to the port.
func (f *Fabric) plugFixedIP(a fixedIPCall) (any, error) {
	p, ok := f.ports[a.PortID]
	if !ok {
		return nil, notFound("port", a.PortID)
	}
	if _, ok := f.subnets[a.SubnetID]; !ok {
		return nil, notFound("subnet", a.SubnetID)
	}
	ip, err := f.fixedIP(f.networks[p.NetworkID], ipRequest{SubnetID: a.SubnetID, IPAddress: deref(a.IPAddress)})
	if err != nil {
		return nil, err
	}
	p.FixedIPs = append(p.FixedIPs, ip)
	return p, nil
}

// unplugFixedIP removes the port's addresses on the subnet.
func (f *Fabric) unplugFixedIP(a fixedIPCall) (any, error) {
	p, ok := f.ports[a.PortID]
	if !ok {
		return nil, notFound("port", a.PortID)
	}
	var kept []FixedIP
	for _, ip := range p.FixedIPs {
		if ip.SubnetID != a.SubnetID {
			kept = append(kept, ip)
		}
	}
	p.FixedIPs = kept
	return p, nil
}

func (f *Fabric) deletePort(a idArgs) (any, error) {
	if _, ok := f.ports[a.ID]; !ok {
		return nil, notFound("port", a.ID)
	}
	delete(f.ports, a.ID)
	return map[string]any{}, nil
}
