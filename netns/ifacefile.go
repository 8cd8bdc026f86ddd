package netns

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/amphora-agent/amphora-agent/agent/fsutil"
)

// Interface types of InterfaceFile.IfType.
const (
	IfTypeLo      = "lo"
	IfTypeVIP     = "vip"
	IfTypeBackend = "backend"
)

// VIPInterface is the name the VIP port always gets inside the namespace.
const VIPInterface = "eth1"

// InterfaceFile is one <name>.json file of the network directory: the
// persistent description of an interface that `interface up` applies and
// restore replays after a reboot. The format is upstream's (keys in this
// order; 11.0.0 files lack if_type and is_sriov), so files survive an
// agent replacement on a running amphora in both directions.
type InterfaceFile struct {
	Name      string    `json:"name"`
	IfType    string    `json:"if_type,omitempty"`
	Addresses []Address `json:"addresses"`
	Routes    []Route   `json:"routes"`
	Rules     []Rule    `json:"rules"`
	Scripts   Scripts   `json:"scripts"`
	IsSRIOV   bool      `json:"is_sriov"`
	MTU       int       `json:"mtu,omitempty"`
}

// Address is a static address, or a request for DHCP / SLAAC.
type Address struct {
	Address   string `json:"address,omitempty"`
	Prefixlen *int   `json:"prefixlen,omitempty"`
	// OctaviaOwned false marks an address another tool (keepalived, for a
	// VIP in ACTIVE_STANDBY) adds and removes; absent means true.
	OctaviaOwned *bool `json:"octavia_owned,omitempty"`
	DHCP         bool  `json:"dhcp,omitempty"`
	IPv6Auto     bool  `json:"ipv6auto,omitempty"`
}

// Owned tells whether `interface up` adds (and keeps) the address.
func (a Address) Owned() bool { return a.OctaviaOwned == nil || *a.OctaviaOwned }

// Route is a route through the interface; Table 0 means main (254).
type Route struct {
	Dst     string   `json:"dst"`
	Gateway string   `json:"gateway,omitempty"`
	Prefsrc string   `json:"prefsrc,omitempty"`
	Scope   string   `json:"scope,omitempty"`
	Flags   []string `json:"flags,omitempty"`
	Table   int      `json:"table,omitempty"`
}

// Rule is a source policy rule ("from <src>/<src_len> lookup <table>").
type Rule struct {
	Src    string `json:"src"`
	SrcLen int    `json:"src_len"`
	Table  int    `json:"table,omitempty"`
}

// Scripts are commands run after the interface is up / before it is down.
type Scripts struct {
	Up   []Command `json:"up"`
	Down []Command `json:"down"`
}

// Command is one script line, split on white space when run.
type Command struct {
	Command string `json:"command"`
}

func intp(v int) *int    { return &v }
func boolp(v bool) *bool { return &v }

// Encode renders the file as written to disk.
func (f *InterfaceFile) Encode() ([]byte, error) {
	c := *f
	if c.Addresses == nil {
		c.Addresses = []Address{}
	}
	if c.Routes == nil {
		c.Routes = []Route{}
	}
	if c.Rules == nil {
		c.Rules = []Rule{}
	}
	if c.Scripts.Up == nil {
		c.Scripts.Up = []Command{}
	}
	if c.Scripts.Down == nil {
		c.Scripts.Down = []Command{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(c); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// interfaceFilePath is <dir>/<name>.json.
func interfaceFilePath(dir, name string) string { return filepath.Join(dir, name+".json") }

// WriteInterfaceFile writes f as <dir>/<name>.json (0644, atomically).
func WriteInterfaceFile(dir string, f *InterfaceFile) error {
	data, err := f.Encode()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return fsutil.WriteFile(interfaceFilePath(dir, f.Name), data, 0o644)
}

// ReadInterfaceFile reads <dir>/<name>.json.
func ReadInterfaceFile(dir, name string) (*InterfaceFile, error) {
	return readInterfaceFile(interfaceFilePath(dir, name))
}

func readInterfaceFile(path string) (*InterfaceFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := decodeInterfaceFile(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

func decodeInterfaceFile(data []byte) (*InterfaceFile, error) {
	var f InterfaceFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, err
	}
	if f.Name == "" {
		return nil, errors.New("no interface name")
	}
	return &f, nil
}

// ReadInterfaceFiles reads every *.json file of dir, sorted by name. A
// missing directory has no files. Unreadable files are reported in the
// error; the readable ones are still returned.
func ReadInterfaceFiles(dir string) ([]*InterfaceFile, error) {
	entries, err := fsutil.ReadDirOrEmpty(dir)
	if err != nil {
		return nil, err
	}
	var (
		out  []*InterfaceFile
		errs []error
	)
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		f, err := readInterfaceFile(filepath.Join(dir, e.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, errors.Join(errs...)
}

// LoFile is the loopback description the agent writes at start-up, as
// upstream does.
func LoFile() *InterfaceFile {
	return &InterfaceFile{
		Name:      "lo",
		IfType:    IfTypeLo,
		Addresses: []Address{{Address: "127.0.0.1", Prefixlen: intp(8)}},
	}
}

// vipSpec is one validated VIP: the primary or an additional one.
type vipSpec struct {
	addr       netip.Addr
	subnet     netip.Prefix
	gateway    string
	hostRoutes []HostRoute
}

// fixedIPSpec is one validated fixed IP of a port.
type fixedIPSpec struct {
	address    string // as sent
	addr       netip.Addr
	subnet     netip.Prefix
	gateway    string
	hostRoutes []HostRoute
}

// vipFileInput is what the VIP interface file is rendered from.
type vipFileInput struct {
	name          string
	mtu           int
	vips          []vipSpec
	vrrp          netip.Addr // zero when the controller sent none
	vrrpPrefixlen int
	fixedIPs      []fixedIPSpec
	activeStandby bool
	sriov         bool
	masquerade    string
}

func defaultDst(a netip.Addr) string {
	if a.Is6() {
		return "::/0"
	}
	return "0.0.0.0/0"
}

func hostLen(a netip.Addr) int { return a.BitLen() }

// expandedPrefix is a network in upstream's "exploded" notation.
func expandedPrefix(p netip.Prefix) string {
	p = p.Masked()
	return p.Addr().StringExpanded() + fmt.Sprintf("/%d", p.Bits())
}

func hostRouteEntries(hrs []HostRoute, table int) []Route {
	var out []Route
	for _, hr := range hrs {
		out = append(out, Route{Dst: hr.Destination, Gateway: hr.Nexthop, Flags: []string{"onlink"}, Table: table})
	}
	return out
}

// renderVIPFile builds the VIP interface file. In ACTIVE_STANDBY the VIPs
// belong to keepalived (octavia_owned false) and the source routing
// (table 1 routes and rules) is left to keepalived's configuration.
func renderVIPFile(in vipFileInput) *InterfaceFile {
	f := &InterfaceFile{Name: in.name, IfType: IfTypeVIP, MTU: in.mtu, IsSRIOV: in.sriov}
	var has4, has6 bool
	for _, v := range in.vips {
		has4 = has4 || v.addr.Is4()
		has6 = has6 || v.addr.Is6()
	}
	if in.vrrp.IsValid() {
		f.Addresses = append(f.Addresses, Address{Address: in.vrrp.StringExpanded(), Prefixlen: intp(in.vrrpPrefixlen)})
	} else {
		if has4 {
			f.Addresses = append(f.Addresses, Address{DHCP: true})
		}
		if has6 {
			f.Addresses = append(f.Addresses, Address{IPv6Auto: true})
		}
	}
	versions := map[int]bool{}
	for _, v := range in.vips {
		versions[ipVersion(v.addr)] = true
		if v.gateway != "" {
			f.Routes = append(f.Routes, Route{Dst: defaultDst(v.addr), Gateway: v.gateway, Flags: []string{"onlink"}})
			if !in.activeStandby {
				f.Routes = append(f.Routes, Route{Dst: defaultDst(v.addr), Gateway: v.gateway, Flags: []string{"onlink"}, Table: 1})
			}
		}
		f.Addresses = append(f.Addresses, Address{
			Address: v.addr.StringExpanded(), Prefixlen: intp(hostLen(v.addr)), OctaviaOwned: boolp(!in.activeStandby),
		})
		net := expandedPrefix(netip.PrefixFrom(v.addr, v.subnet.Bits()))
		f.Routes = append(f.Routes, Route{Dst: net, Scope: "link"})
		if !in.activeStandby {
			f.Routes = append(f.Routes, Route{Dst: net, Prefsrc: v.addr.StringExpanded(), Scope: "link", Table: 1})
			f.Rules = append(f.Rules, Rule{Src: v.addr.StringExpanded(), SrcLen: hostLen(v.addr), Table: 1})
		}
		f.Routes = append(f.Routes, hostRouteEntries(v.hostRoutes, 0)...)
		f.Routes = append(f.Routes, hostRouteEntries(v.hostRoutes, 1)...)
	}
	for _, fip := range in.fixedIPs {
		versions[ipVersion(fip.addr)] = true
		f.Addresses = append(f.Addresses, Address{Address: fip.address, Prefixlen: intp(fip.subnet.Bits())})
		if fip.gateway != "" {
			f.Routes = append(f.Routes, Route{Dst: defaultDst(fip.addr), Gateway: fip.gateway, Flags: []string{"onlink"}})
			if !in.activeStandby {
				f.Routes = append(f.Routes, Route{Dst: defaultDst(fip.addr), Gateway: fip.gateway, Flags: []string{"onlink"}, Table: 1})
			}
		}
		f.Routes = append(f.Routes, hostRouteEntries(fip.hostRoutes, 0)...)
	}
	f.Scripts = masqueradeScripts(in.masquerade, in.name, versions, in.sriov)
	return f
}

// renderPortFile builds a member (backend) port's file: static fixed IPs
// with their host routes, or DHCP and SLAAC when the port has none.
func renderPortFile(name string, mtu int, fixed []fixedIPSpec, sriov bool, masquerade string) *InterfaceFile {
	f := &InterfaceFile{Name: name, IfType: IfTypeBackend, MTU: mtu, IsSRIOV: sriov}
	versions := map[int]bool{}
	if len(fixed) == 0 {
		versions[4], versions[6] = true, true
		f.Addresses = append(f.Addresses, Address{DHCP: true, IPv6Auto: true})
	}
	for _, fip := range fixed {
		versions[ipVersion(fip.addr)] = true
		f.Addresses = append(f.Addresses, Address{Address: fip.address, Prefixlen: intp(fip.subnet.Bits())})
		f.Routes = append(f.Routes, hostRouteEntries(fip.hostRoutes, 0)...)
	}
	f.Scripts = masqueradeScripts(masquerade, name, versions, sriov)
	return f
}

func ipVersion(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}

// masqueradeScripts are the LVS masquerade script calls, IPv4 first.
func masqueradeScripts(script, name string, versions map[int]bool, sriov bool) Scripts {
	var s Scripts
	suffix := ""
	if sriov {
		suffix = " sriov"
	}
	for _, v := range []int{4, 6} {
		if !versions[v] {
			continue
		}
		fam := fmt.Sprintf("ipv%d", v)
		s.Up = append(s.Up, Command{Command: fmt.Sprintf("%s add %s %s%s", script, fam, name, suffix)})
		s.Down = append(s.Down, Command{Command: fmt.Sprintf("%s delete %s %s%s", script, fam, name, suffix)})
	}
	return s
}
