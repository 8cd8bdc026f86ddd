package cloud

import (
	"encoding/base64"
	"fmt"
	"slices"
)

// Compute.

type getAmphoraCall struct {
	ID                  string  `json:"id"`
	ManagementNetworkID *string `json:"management_network_id"`
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

// ipsOf is the fixed_ips request for an optional address.
func ipsOf(ip string) []ipRequest {
	if ip == "" {
		return nil
	}
	return []ipRequest{{IPAddress: ip}}
}
