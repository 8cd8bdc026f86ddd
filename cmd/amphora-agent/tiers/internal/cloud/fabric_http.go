package cloud

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
)

// The drivers' wire: POST /<service>/<method> with a JSON object of the
// Python call's arguments; 200 with the JSON answer, 404 for errNotFound,
// 501 for errNotModelled, 400 for anything else, each with {"error": ...}.

type handler func(f *Fabric, body json.RawMessage) (any, error)

var handlers = map[string]handler{
	"compute/build":                      unlocked((*Fabric).build),
	"compute/delete":                     unlocked((*Fabric).deleteServer),
	"compute/status":                     locked((*Fabric).status),
	"compute/get_amphora":                locked((*Fabric).getAmphora),
	"compute/create_server_group":        locked((*Fabric).createServerGroup),
	"compute/delete_server_group":        locked((*Fabric).deleteServerGroup),
	"compute/validate_flavor":            locked(accept),
	"compute/validate_availability_zone": locked(accept),
	"network/get_network":                locked((*Fabric).getNetwork),
	"network/get_subnet":                 locked((*Fabric).getSubnet),
	"network/get_port":                   locked((*Fabric).getPort),
	"network/allocate_vip":               locked((*Fabric).allocateVIP),
	"network/deallocate_vip":             locked((*Fabric).deallocateVIP),
	"network/plug_aap_port":              unlocked((*Fabric).plugAAPPort),
	"network/unplug_aap_port":            locked((*Fabric).unplugAAPPort),
	"network/get_plugged_networks":       locked((*Fabric).pluggedNetworks),
	"compute/attach_network_or_port":     unlocked((*Fabric).attach),
	"compute/detach_port":                unlocked((*Fabric).detachPort),
	"network/unplug_network":             unlocked((*Fabric).unplugNetwork),
	"network/plug_fixed_ip":              locked((*Fabric).plugFixedIP),
	"network/unplug_fixed_ip":            locked((*Fabric).unplugFixedIP),
	"network/delete_port":                locked((*Fabric).deletePort),
}

// locked decodes a call's arguments into A and runs fn holding the
// fabric's lock.
func locked[A any](fn func(*Fabric, A) (any, error)) handler {
	return func(f *Fabric, body json.RawMessage) (any, error) {
		var a A
		if err := json.Unmarshal(body, &a); err != nil {
			return nil, err
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		return fn(f, a)
	}
}

// unlocked is locked for handlers that call the hypervisor, which must
// not run under the lock.
func unlocked[A any](fn func(*Fabric, A) (any, error)) handler {
	return func(f *Fabric, body json.RawMessage) (any, error) {
		var a A
		if err := json.Unmarshal(body, &a); err != nil {
			return nil, err
		}
		return fn(f, a)
	}
}

// accept answers calls that only need to succeed (flavors and zones are
// recorded by the call log, never refused).
func accept(*Fabric, idArgs) (any, error) { return map[string]any{}, nil }

// Serve answers the drivers on a unix socket at path until l is closed.
func (f *Fabric) Serve(l net.Listener) error {
	return http.Serve(l, http.HandlerFunc(f.serveHTTP))
}

func (f *Fabric) serveHTTP(w http.ResponseWriter, r *http.Request) {
	method := strings.TrimPrefix(r.URL.Path, "/")
	f.record(method)
	var body json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeError(w, fmt.Errorf("%s: decoding the arguments: %v", method, err))
		return
	}
	h, ok := handlers[method]
	if !ok {
		writeError(w, fmt.Errorf("%s: %w", method, errNotModelled))
		return
	}
	answer, err := h(f, body)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(answer)
}

func writeError(w http.ResponseWriter, err error) {
	code := http.StatusBadRequest
	switch {
	case errors.Is(err, errNotFound):
		code = http.StatusNotFound
	case errors.Is(err, errNotModelled):
		code = http.StatusNotImplemented
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}

type idArgs struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// Compute.

type getAmphoraCall struct {
	ID                  string  `json:"id"`
	ManagementNetworkID *string `json:"management_network_id"`
}

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

type buildArgs struct {
	Name             string            `json:"name"`
	Flavor           string            `json:"flavor"`
	ImageTag         string            `json:"image_tag"`
	NetworkIDs       []string          `json:"network_ids"`
	PortIDs          []string          `json:"port_ids"`
	ConfigDriveFiles map[string]string `json:"config_drive_files"` // base64
	UserData         *string           `json:"user_data"`
	ServerGroupID    *string           `json:"server_group_id"`
	AvailabilityZone *string           `json:"availability_zone"`
}

func (f *Fabric) build(a buildArgs) (any, error) {
	s := &Server{ID: newUUID(), Name: a.Name, Status: "BUILD", Flavor: a.Flavor, ImageTag: a.ImageTag,
		ServerGroupID: deref(a.ServerGroupID), AvailabilityZone: deref(a.AvailabilityZone),
		UserData: deref(a.UserData), Files: map[string][]byte{}}
	for path, b64 := range a.ConfigDriveFiles {
		data, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, fmt.Errorf("config drive file %s: %v", path, err)
		}
		s.Files[path] = data
	}
	f.mu.Lock()
	group, ok := f.groups[s.ServerGroupID]
	if s.ServerGroupID != "" && !ok {
		f.mu.Unlock()
		return nil, notFound("server group", s.ServerGroupID)
	}
	// Nova makes a port on each network and takes the ports it is given,
	// in this order; the first is the management port.
	for _, id := range a.NetworkIDs {
		p, err := f.newPort(id, "octavia-lb-mgmt-"+s.ID)
		if err != nil {
			f.mu.Unlock()
			return nil, err
		}
		p.NovaMade = true
		s.Ports = append(s.Ports, p)
	}
	for _, id := range a.PortIDs {
		p, ok := f.ports[id]
		if !ok {
			f.mu.Unlock()
			return nil, notFound("port", id)
		}
		s.Ports = append(s.Ports, p)
	}
	for _, p := range s.Ports {
		p.DeviceID, p.DeviceOwner = s.ID, "compute:nova"
	}
	nd, err := f.networkDataOf(s)
	if err != nil {
		f.mu.Unlock()
		return nil, err
	}
	s.NetworkData = nd
	f.servers[s.ID] = s
	if group != nil {
		group.Members = append(group.Members, s.ID)
	}
	f.mu.Unlock()
	go f.boot(s)
	return map[string]string{"id": s.ID}, nil
}

// boot runs the hypervisor and records the outcome as Nova would: ACTIVE,
// or ERROR with a fault the compute wait reports.
func (f *Fabric) boot(s *Server) {
	err := f.hypervisor.Boot(s)
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.Status != "BUILD" { // deleted while booting
		return
	}
	if err != nil {
		s.Status, s.Fault = "ERROR", err.Error()
		return
	}
	s.Status = "ACTIVE"
}

func (f *Fabric) server(id string) (*Server, error) {
	s, ok := f.servers[id]
	if !ok || s.Status == "DELETED" {
		return nil, notFound("server", id)
	}
	return s, nil
}

func (f *Fabric) deleteServer(a idArgs) (any, error) {
	f.mu.Lock()
	s, err := f.server(a.ID)
	if err == nil {
		s.Status = "DELETED"
		if g := f.groups[s.ServerGroupID]; g != nil {
			g.Members = slices.DeleteFunc(g.Members, func(id string) bool { return id == s.ID })
		}
		// Nova deletes the ports it made and detaches the others.
		for _, p := range s.Ports {
			if p.NovaMade {
				delete(f.ports, p.ID)
			} else {
				p.DeviceID, p.DeviceOwner = "", ""
			}
		}
	}
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return map[string]any{}, f.hypervisor.Delete(s)
}

func (f *Fabric) status(a idArgs) (any, error) {
	s, err := f.server(a.ID)
	if err != nil {
		return nil, err
	}
	return map[string]string{"status": s.Status}, nil
}

func (f *Fabric) getAmphora(a getAmphoraCall) (any, error) {
	s, err := f.server(a.ID)
	if err != nil {
		return nil, err
	}
	answer := map[string]any{"id": s.ID, "status": s.Status, "flavor": s.Flavor, "image_id": imageID(s.ImageTag),
		"availability_zone": s.AvailabilityZone}
	if s.Fault != "" {
		answer["fault"] = map[string]string{"message": s.Fault}
	}
	// Like Nova's driver: the first address on the management network
	// (or the first port's when no network is named).
	for _, p := range s.Ports {
		if a.ManagementNetworkID == nil || *a.ManagementNetworkID == "" || p.NetworkID == *a.ManagementNetworkID {
			answer["lb_network_ip"] = p.FixedIPs[0].IPAddress
			break
		}
	}
	return answer, nil
}

// Network.

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

type attachCall struct {
	ID        string  `json:"id"`
	NetworkID *string `json:"network_id"`
	IPAddress *string `json:"ip_address"`
	PortID    *string `json:"port_id"`
}

// attach is Nova's interface attach: the given port, or a new one on the
// network (with the address asked for), hot-plugged into the server.
func (f *Fabric) attach(a attachCall) (any, error) {
	f.mu.Lock()
	s, err := f.server(a.ID)
	if err != nil {
		f.mu.Unlock()
		return nil, err
	}
	var p *Port
	if id := deref(a.PortID); id != "" {
		if p = f.ports[id]; p == nil {
			f.mu.Unlock()
			return nil, notFound("port", id)
		}
	} else if p, err = f.newPort(deref(a.NetworkID), "octavia-member-"+s.ID, ipsOf(deref(a.IPAddress))...); err != nil {
		f.mu.Unlock()
		return nil, err
	} else {
		p.NovaMade = true
	}
	p.DeviceID, p.DeviceOwner = s.ID, "compute:nova"
	bridge := f.networks[p.NetworkID].Bridge
	f.mu.Unlock()
	if err := f.hypervisor.Attach(s, p, bridge); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s.Ports = append(s.Ports, p)
	return interfaceJSON{ComputeID: s.ID, NetworkID: p.NetworkID, PortID: p.ID, FixedIPs: p.FixedIPs}, nil
}

// detach unplugs a port from a server (it stays, unbound, as in Nova).
func (f *Fabric) detach(s *Server, p *Port) error {
	if err := f.hypervisor.Detach(s, p); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s.Ports = without(s.Ports, p)
	p.DeviceID, p.DeviceOwner = "", ""
	return nil
}

type detachCall struct {
	ID     string `json:"id"`
	PortID string `json:"port_id"`
}

func (f *Fabric) detachPort(a detachCall) (any, error) {
	f.mu.Lock()
	s, err := f.server(a.ID)
	p := f.ports[a.PortID]
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, notFound("port", a.PortID)
	}
	return map[string]any{}, f.detach(s, p)
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

// ipsOf is the fixed_ips request for an optional address.
func ipsOf(ip string) []ipRequest {
	if ip == "" {
		return nil
	}
	return []ipRequest{{IPAddress: ip}}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
