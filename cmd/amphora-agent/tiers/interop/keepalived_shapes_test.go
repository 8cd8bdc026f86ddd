//go:build interop

package interop_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/amphora-agent/amphora-agent/agent/fsutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/ctrlutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/lvsutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
	"github.com/amphora-agent/amphora-agent/netns"
)

// The keepalived configs the controller can send, one per shape, each
// rendered by Octavia's own templaters through the real driver
// (tiers/testdata/interop/keepalived_shapes.py) and uploaded to one agent that
// validates with the real `keepalived -t` in its namespace. Upstream stores
// every one unchecked, so the agent must accept every one.
//
// Left out, because the controller never sends them: PING, HTTPS and
// TLS-HELLO monitors on UDP/SCTP pools (the API refuses them), HTTP and
// APP cookie persistence there (refused too), and PROXY-protocol pools
// (not LVS). An HTTP monitor with a method other than GET renders no
// check, which the "HEAD" shapes cover.
const (
	shapeLB      = "5a4e3c2b-1d0f-4e9a-8b7c-6d5e4f3a2b1c"
	shapeVRRPIP  = "203.0.113.4"
	shapePeerIP  = "203.0.113.5"
	shapeVIP     = "203.0.113.10"
	shapeVRRPIP6 = "2001:db8:a::4"
	shapePeerIP6 = "2001:db8:a::5"
	shapeVIP6    = "2001:db8:a::10"
)

type shapeSubnet struct {
	ID         string            `json:"id"`
	CIDR       string            `json:"cidr"`
	Gateway    *string           `json:"gateway_ip"`
	HostRoutes []netns.HostRoute `json:"host_routes"`
}

type shapeAddVIP struct {
	IP     string      `json:"ip_address"`
	Subnet shapeSubnet `json:"subnet"`
}

type shapePeer struct {
	ID       string `json:"id"`
	Status   string `json:"status"`
	VRRPIP   string `json:"vrrp_ip"`
	Role     string `json:"role"`
	Priority int    `json:"priority"`
}

// shapeVRRP is one ACTIVE_STANDBY amphora's VRRP config as
// AmphoraVRRPUpdate renders it.
type shapeVRRP struct {
	LBID           string         `json:"lb_id"`
	VIP            string         `json:"vip"`
	VIPSubnet      shapeSubnet    `json:"vip_subnet"`
	AdditionalVIPs []shapeAddVIP  `json:"additional_vips"`
	VRRPIP         string         `json:"vrrp_ip"`
	Role           string         `json:"role"`
	Priority       int            `json:"priority"`
	Interface      string         `json:"interface"`
	AuthPass       string         `json:"auth_pass"`
	AdvertInt      int            `json:"advert_int"`
	Peers          []shapePeer    `json:"peers"`
	Conf           map[string]int `json:"conf,omitempty"` // [keepalived_vrrp] options
}

// shapeMonitor is an lvsutil.Monitor of any type, as the API takes it.
type shapeMonitor struct {
	lvsutil.Monitor
	Type               string `json:"type"`
	Rise               int    `json:"rise"`
	Enabled            bool   `json:"enabled"`
	HTTPMethod         string `json:"http_method,omitempty"`
	URLPath            string `json:"url_path,omitempty"`
	ExpectedCodes      string `json:"expected_codes,omitempty"`
	ProvisioningStatus string `json:"provisioning_status,omitempty"`
}

type shapePersistence struct {
	Timeout     int    `json:"timeout,omitempty"`
	Granularity string `json:"granularity,omitempty"`
}

type shapeMember struct {
	lvsutil.Member
	Backup             bool   `json:"backup"`
	SubnetID           string `json:"subnet_id"`
	MonitorAddress     string `json:"monitor_address,omitempty"`
	MonitorPort        int    `json:"monitor_port,omitempty"`
	ProvisioningStatus string `json:"provisioning_status,omitempty"`
}

type shapePool struct {
	ID                 string            `json:"id"`
	LBAlgorithm        string            `json:"lb_algorithm"`
	Enabled            bool              `json:"enabled"`
	ProvisioningStatus string            `json:"provisioning_status,omitempty"`
	Monitor            *shapeMonitor     `json:"monitor"`
	Persistence        *shapePersistence `json:"session_persistence"`
	Members            []shapeMember     `json:"members"`
}

// shapeLVS is one UDP or SCTP listener as update_amphora_listeners
// renders it.
type shapeLVS struct {
	LBID            string     `json:"lb_id"`
	ID              string     `json:"id"`
	Protocol        string     `json:"protocol"`
	Port            int        `json:"port"`
	Enabled         bool       `json:"enabled"`
	LBEnabled       bool       `json:"lb_enabled"`
	ConnectionLimit int        `json:"connection_limit"`
	VIP             string     `json:"vip"`
	AdditionalVIPs  []string   `json:"additional_vips"`
	Pool            *shapePool `json:"pool"`
}

func strp(s string) *string { return &s }

// vrrp4 is the MASTER of an IPv4 load balancer whose BACKUP peer is up,
// on a VIP subnet with a gateway and no host routes; edit changes it.
func vrrp4(edit ...func(*shapeVRRP)) *shapeVRRP {
	s := &shapeVRRP{
		LBID: shapeLB, VIP: shapeVIP,
		VIPSubnet: shapeSubnet{ID: "vip-subnet", CIDR: "203.0.113.0/24", Gateway: strp("203.0.113.1")},
		VRRPIP:    shapeVRRPIP, Role: "MASTER", Priority: 100, Interface: "eth1", AuthPass: "5a4e3c2", AdvertInt: 1,
		Peers: []shapePeer{{ID: "b1b2b3b4-0000-4000-8000-000000000001", Status: "ALLOCATED", VRRPIP: shapePeerIP, Role: "BACKUP", Priority: 90}},
	}
	for _, e := range edit {
		e(s)
	}
	return s
}

// vrrp6 is vrrp4 on an IPv6 VIP subnet.
func vrrp6(edit ...func(*shapeVRRP)) *shapeVRRP {
	return vrrp4(append([]func(*shapeVRRP){func(s *shapeVRRP) {
		s.VIP, s.VRRPIP, s.Peers[0].VRRPIP = shapeVIP6, shapeVRRPIP6, shapePeerIP6
		s.VIPSubnet = shapeSubnet{ID: "vip-subnet6", CIDR: "2001:db8:a::/64", Gateway: strp("2001:db8:a::1")}
	}}, edit...)...)
}

// members returns n enabled members of weight 1 on the member subnet
// (not the VIP's), from 198.51.100.21 (or 2001:db8:b::21 when v6).
func members(n int, v6 bool) []shapeMember {
	var ms []shapeMember
	for i := range n {
		addr := fmt.Sprintf("198.51.100.%d", 21+i)
		if v6 {
			addr = fmt.Sprintf("2001:db8:b::%d", 21+i)
		}
		ms = append(ms, shapeMember{Member: lvsutil.Member{ID: fmt.Sprintf("e1e2e3e4-0000-4000-8000-%012d", 100*boolInt(v6)+i),
			Address: addr, Port: 5353, Weight: 1, Enabled: true}, SubnetID: "member-subnet"})
	}
	return ms
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// udp is a UDP listener on the IPv4 VIP, enabled, without connection
// limit, whose round-robin pool has two members and no monitor; edit
// changes it.
func udp(edit ...func(*shapeLVS)) *shapeLVS {
	l := &shapeLVS{LBID: shapeLB, Protocol: "UDP", Port: 5353, Enabled: true, LBEnabled: true, ConnectionLimit: -1, VIP: shapeVIP,
		Pool: &shapePool{ID: "d1d2d3d4-0000-4000-8000-000000000001", LBAlgorithm: "ROUND_ROBIN", Enabled: true, Members: members(2, false)}}
	for _, e := range edit {
		e(l)
	}
	return l
}

// sctp is udp for SCTP.
func sctp(edit ...func(*shapeLVS)) *shapeLVS {
	return udp(append([]func(*shapeLVS){func(l *shapeLVS) { l.Protocol, l.Port = "SCTP", 3868 }}, edit...)...)
}

// monitor adds an enabled health monitor of the type (HTTP ones GET /).
func monitor(typ string) func(*shapeLVS) {
	return func(l *shapeLVS) {
		m := &shapeMonitor{Monitor: lvsutil.Monitor{ID: "f1f2f3f4-0000-4000-8000-000000000001", Delay: 5, Timeout: 3, Fall: 3}, Type: typ, Rise: 2, Enabled: true}
		if typ == "HTTP" {
			m.HTTPMethod, m.URLPath, m.ExpectedCodes = "GET", "/", "200"
		}
		l.Pool.Monitor = m
	}
}

// ipv6 moves the VIP and the members to IPv6.
func ipv6(l *shapeLVS) { l.VIP, l.Pool.Members = shapeVIP6, members(2, true) }

// dualStack adds an IPv6 VIP and an IPv6 member.
func dualStack(l *shapeLVS) {
	l.AdditionalVIPs = []string{shapeVIP6}
	l.Pool.Members = append(l.Pool.Members, members(1, true)...)
}

func sourceIP(p *shapePersistence) func(*shapeLVS) {
	return func(l *shapeLVS) { l.Pool.Persistence = p }
}

// keepalivedShapes is what is covered: every VRRP and LVS config shape
// the controller can produce, by name.
var keepalivedShapes = []struct {
	name string
	vrrp *shapeVRRP
	lvs  *shapeLVS
}{
	{name: "vrrp/ipv4", vrrp: vrrp4()},
	{name: "vrrp/ipv4 backup", vrrp: vrrp4(func(s *shapeVRRP) {
		s.Role, s.Priority, s.Peers[0].Role, s.Peers[0].Priority = "BACKUP", 90, "MASTER", 100
	})},
	{name: "vrrp/ipv4 subnet without gateway", vrrp: vrrp4(func(s *shapeVRRP) { s.VIPSubnet.Gateway = nil })},
	{name: "vrrp/ipv4 host routes", vrrp: vrrp4(func(s *shapeVRRP) {
		s.VIPSubnet.HostRoutes = []netns.HostRoute{
			{Destination: "192.0.2.0/24", Nexthop: "203.0.113.7"},
			{Destination: "198.51.100.77/24", Nexthop: "203.0.113.8"}, // host bits set: Neutron accepts it
			{Destination: "0.0.0.0/0", Nexthop: "203.0.113.9"},
		}
	})},
	{name: "vrrp/ipv4 additional vips", vrrp: vrrp4(func(s *shapeVRRP) {
		s.AdditionalVIPs = []shapeAddVIP{
			{IP: "198.51.100.10", Subnet: shapeSubnet{ID: "add-subnet-1", CIDR: "198.51.100.0/24", Gateway: strp("198.51.100.1")}},
			{IP: "192.0.2.10", Subnet: shapeSubnet{ID: "add-subnet-2", CIDR: "192.0.2.0/24",
				HostRoutes: []netns.HostRoute{{Destination: "192.0.2.128/25", Nexthop: "192.0.2.1"}}}},
		}
	})},
	{name: "vrrp/ipv6", vrrp: vrrp6(func(s *shapeVRRP) {
		s.VIPSubnet.HostRoutes = []netns.HostRoute{{Destination: "2001:db8:f::/48", Nexthop: "2001:db8:a::7"}}
	})},
	{name: "vrrp/ipv6 subnet without gateway", vrrp: vrrp6(func(s *shapeVRRP) { s.VIPSubnet.Gateway = nil })},
	{name: "vrrp/dual-stack ipv4 primary", vrrp: vrrp4(func(s *shapeVRRP) {
		s.AdditionalVIPs = []shapeAddVIP{{IP: shapeVIP6, Subnet: shapeSubnet{ID: "vip-subnet6", CIDR: "2001:db8:a::/64", Gateway: strp("2001:db8:a::1")}}}
	})},
	{name: "vrrp/dual-stack ipv6 primary", vrrp: vrrp6(func(s *shapeVRRP) {
		s.AdditionalVIPs = []shapeAddVIP{{IP: shapeVIP, Subnet: shapeSubnet{ID: "vip-subnet", CIDR: "203.0.113.0/24", Gateway: strp("203.0.113.1")}}}
	})},
	{name: "vrrp/peer not allocated (failover)", vrrp: vrrp4(func(s *shapeVRRP) { s.Peers[0].Status = "ERROR" })},
	{name: "vrrp/operator-tuned timers", vrrp: vrrp4(func(s *shapeVRRP) {
		s.AdvertInt = 3
		s.Conf = map[string]int{"vrrp_check_interval": 10, "vrrp_fail_count": 3, "vrrp_success_count": 3,
			"vrrp_garp_refresh_interval": 10, "vrrp_garp_refresh_count": 5}
	})},

	{name: "udp/no monitor", lvs: udp()},
	{name: "udp/UDP-CONNECT", lvs: udp(monitor("UDP-CONNECT"))},
	{name: "udp/HTTP GET", lvs: udp(monitor("HTTP"))},
	{name: "udp/HTTP GET code range and query", lvs: udp(monitor("HTTP"), func(l *shapeLVS) {
		l.Pool.Monitor.ExpectedCodes, l.Pool.Monitor.URLPath = "200-202", "/healthz?full=1&x=2"
	})},
	{name: "udp/HTTP code list", lvs: udp(monitor("HTTP"), func(l *shapeLVS) { l.Pool.Monitor.ExpectedCodes = "200,204" })},
	{name: "udp/HTTP HEAD", lvs: udp(monitor("HTTP"), func(l *shapeLVS) { l.Pool.Monitor.HTTPMethod = "HEAD" })},
	{name: "udp/TCP", lvs: udp(monitor("TCP"))},
	{name: "udp/monitor disabled", lvs: udp(monitor("UDP-CONNECT"), func(l *shapeLVS) { l.Pool.Monitor.Enabled = false })},
	{name: "udp/monitor being deleted", lvs: udp(monitor("UDP-CONNECT"), func(l *shapeLVS) { l.Pool.Monitor.ProvisioningStatus = "PENDING_DELETE" })},
	{name: "udp/monitor address and port", lvs: udp(monitor("UDP-CONNECT"), func(l *shapeLVS) {
		l.Pool.Members[0].MonitorAddress, l.Pool.Members[0].MonitorPort = "198.51.100.99", 5354
	})},
	{name: "udp/no pool", lvs: udp(func(l *shapeLVS) { l.Pool = nil })},
	{name: "udp/pool being deleted", lvs: udp(func(l *shapeLVS) { l.Pool.ProvisioningStatus = "PENDING_DELETE" })},
	{name: "udp/pool without members", lvs: udp(func(l *shapeLVS) { l.Pool.Members = nil })},
	{name: "udp/pool without members, UDP-CONNECT", lvs: udp(monitor("UDP-CONNECT"), func(l *shapeLVS) { l.Pool.Members = nil })},
	{name: "udp/pool disabled", lvs: udp(func(l *shapeLVS) { l.Pool.Enabled = false })},
	{name: "udp/listener disabled", lvs: udp(func(l *shapeLVS) { l.Enabled = false })},
	{name: "udp/load balancer disabled", lvs: udp(func(l *shapeLVS) { l.LBEnabled = false })},
	{name: "udp/disabled member", lvs: udp(func(l *shapeLVS) { l.Pool.Members[1].Enabled = false })},
	{name: "udp/all members disabled", lvs: udp(monitor("UDP-CONNECT"), func(l *shapeLVS) {
		l.Pool.Members[0].Enabled, l.Pool.Members[1].Enabled = false, false
	})},
	{name: "udp/last member being deleted", lvs: udp(func(l *shapeLVS) {
		l.Pool.Members = l.Pool.Members[:1]
		l.Pool.Members[0].ProvisioningStatus = "PENDING_DELETE"
	})},
	{name: "udp/weight 0", lvs: udp(monitor("UDP-CONNECT"), func(l *shapeLVS) { l.Pool.Members[0].Weight = 0 })},
	{name: "udp/all weights 0", lvs: udp(func(l *shapeLVS) { l.Pool.Members[0].Weight, l.Pool.Members[1].Weight = 0, 0 })},
	{name: "udp/backup member", lvs: udp(func(l *shapeLVS) { l.Pool.Members[1].Backup = true })},
	{name: "udp/members on the vip subnet and others", lvs: udp(func(l *shapeLVS) {
		l.Pool.Members[0].Address, l.Pool.Members[0].SubnetID = "203.0.113.21", "vip-subnet"
		l.Pool.Members[1].Address, l.Pool.Members[1].SubnetID = "192.0.2.21", "other-subnet"
	})},
	{name: "udp/connection limit", lvs: udp(monitor("UDP-CONNECT"), func(l *shapeLVS) { l.ConnectionLimit = 1000 })},
	{name: "udp/LEAST_CONNECTIONS", lvs: udp(func(l *shapeLVS) { l.Pool.LBAlgorithm = "LEAST_CONNECTIONS" })},
	{name: "udp/SOURCE_IP", lvs: udp(func(l *shapeLVS) { l.Pool.LBAlgorithm = "SOURCE_IP" })},
	{name: "udp/SOURCE_IP_PORT", lvs: udp(func(l *shapeLVS) { l.Pool.LBAlgorithm = "SOURCE_IP_PORT" })},
	{name: "udp/source ip persistence", lvs: udp(sourceIP(&shapePersistence{}))},
	{name: "udp/source ip persistence tuned", lvs: udp(sourceIP(&shapePersistence{Timeout: 60, Granularity: "255.255.255.0"}))},
	{name: "udp/additional ipv4 vips", lvs: udp(func(l *shapeLVS) { l.AdditionalVIPs = []string{"198.51.100.10", "192.0.2.10"} })},
	{name: "udp/ipv6 member on an ipv4 vip", lvs: udp(func(l *shapeLVS) { l.Pool.Members = append(l.Pool.Members, members(1, true)...) })},
	{name: "udp/ipv6", lvs: udp(ipv6, monitor("UDP-CONNECT"))},
	{name: "udp/ipv6 source ip persistence", lvs: udp(ipv6, sourceIP(&shapePersistence{}))},
	{name: "udp/ipv6 source ip persistence ipv6 granularity", lvs: udp(ipv6, sourceIP(&shapePersistence{Granularity: "ffff:ffff:ffff:ffff::"}))},
	{name: "udp/dual-stack", lvs: udp(dualStack, monitor("UDP-CONNECT"))},
	{name: "udp/dual-stack ipv4 members only", lvs: udp(func(l *shapeLVS) { l.AdditionalVIPs = []string{shapeVIP6} })},
	{name: "udp/dual-stack source ip persistence", lvs: udp(dualStack, sourceIP(&shapePersistence{Timeout: 120}))},

	{name: "sctp/no monitor", lvs: sctp()},
	{name: "sctp/SCTP", lvs: sctp(monitor("SCTP"))},
	{name: "sctp/HTTP GET", lvs: sctp(monitor("HTTP"))},
	{name: "sctp/HTTP HEAD", lvs: sctp(monitor("HTTP"), func(l *shapeLVS) { l.Pool.Monitor.HTTPMethod = "HEAD" })},
	{name: "sctp/TCP", lvs: sctp(monitor("TCP"))},
	{name: "sctp/UDP-CONNECT", lvs: sctp(monitor("UDP-CONNECT"))},
	{name: "sctp/monitor disabled", lvs: sctp(monitor("SCTP"), func(l *shapeLVS) { l.Pool.Monitor.Enabled = false })},
	{name: "sctp/disabled member", lvs: sctp(monitor("SCTP"), func(l *shapeLVS) { l.Pool.Members[1].Enabled = false })},
	{name: "sctp/pool without members", lvs: sctp(monitor("SCTP"), func(l *shapeLVS) { l.Pool.Members = nil })},
	{name: "sctp/weight 0", lvs: sctp(func(l *shapeLVS) { l.Pool.Members[0].Weight = 0 })},
	{name: "sctp/connection limit", lvs: sctp(monitor("SCTP"), func(l *shapeLVS) { l.ConnectionLimit = 500 })},
	{name: "sctp/source ip persistence", lvs: sctp(sourceIP(&shapePersistence{}))},
	{name: "sctp/ipv6", lvs: sctp(ipv6, monitor("SCTP"))},
	{name: "sctp/ipv6 source ip persistence", lvs: sctp(ipv6, sourceIP(&shapePersistence{}))},
	{name: "sctp/dual-stack", lvs: sctp(dualStack, monitor("SCTP"))},
}

// shapeResult is what keepalived_shapes.py reports per upload.
type shapeResult struct {
	Kind   string  `json:"kind"`
	Name   string  `json:"name"`
	Config *string `json:"config"`
	Status int     `json:"status"`
	Body   string  `json:"body"`
	Raised *string `json:"raised"`
}

// Every shape is accepted (200 {"message": "OK"}, as upstream) and stored
// as sent. So that the proof cannot pass with a check that never ran, the
// same agent refuses, through the same client calls, a VRRP and an LVS
// config cut before their last closing brace (400, keepalived's words) and
// keeps what it had.
func TestInteropKeepalivedShapes(t *testing.T) {
	ctrlutil.RequireOctavia(t)
	topo.RequireRoot(t)
	ns := topo.NewNamespace(t, "kas")
	peer := topo.NewNamespace(t, "kasp")
	// eth1 as plug_vip leaves it: the VRRP configs name it and keepalived -t
	// refuses an interface it cannot find.
	topo.Link(t, ns, "eth1", []string{shapeVRRPIP + "/24", shapeVRRPIP6 + "/64"}, peer, "eth1", []string{shapePeerIP + "/24", shapePeerIP6 + "/64"})
	env := testenv.New(t)
	env.Extra = "[amphora_agent]\nnetwork_namespace = " + ns.Name + "\n[controller_worker]\nloadbalancer_topology = ACTIVE_STANDBY\n"
	base := env.Path("lib")
	// Nothing here starts keepalived; should a regression do so, it must
	// not outlive the test.
	t.Cleanup(func() { lvsutil.KillKeepalived(t, filepath.Join(base, "lvs")) })
	env.Start()

	var spec []map[string]any
	add := func(kind, name string, shape any) {
		data, err := json.Marshal(shape)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		m["kind"], m["name"] = kind, name
		spec = append(spec, m)
	}
	listenerIDs := map[string]string{}
	var lastVRRP string
	for i, s := range keepalivedShapes {
		switch {
		case s.vrrp != nil:
			add("vrrp", s.name, s.vrrp)
			lastVRRP = s.name
		case s.lvs != nil:
			l := *s.lvs
			l.ID = fmt.Sprintf("c5c5c5c5-0000-4000-8000-%012d", i)
			listenerIDs[s.name] = l.ID
			add("lvs", s.name, l)
		}
	}
	// Configs cut before their last closing brace, each in place of the
	// shape it was cut from: a VRRP one and a UDP-CONNECT one (their check
	// scripts make keepalived -t exit with 6, which hides other faults),
	// and one without a script (exit status 5).
	truncated := map[string]string{"truncated/vrrp": lastVRRP, "truncated/udp UDP-CONNECT": "udp/UDP-CONNECT", "truncated/udp no monitor": "udp/no monitor"}
	for _, cut := range slices.Sorted(maps.Keys(truncated)) {
		of := truncated[cut]
		if id, ok := listenerIDs[of]; ok {
			add("truncated", cut, map[string]string{"of": of, "of_kind": "lvs", "listener_id": id})
		} else {
			add("truncated", cut, map[string]string{"of": of, "of_kind": "vrrp"})
		}
	}

	work := t.TempDir()
	specFile := filepath.Join(work, "shapes.json")
	data, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := fsutil.WriteFile(specFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, took := ctrlutil.RunControllerScript(t, env, ctrlutil.TestdataScript(t, "interop", "keepalived_shapes.py"),
		"--amphora-id", env.AmphoraID, "--port", fmt.Sprint(env.Port),
		"--client-cert", env.ClientCert, "--server-ca", env.CAFile, "--workdir", work,
		"--base-path", base, "--namespace", ns.Name, "--spec", specFile)
	var report struct {
		Results []shapeResult `json:"results"`
	}
	if err := json.Unmarshal(stdout, &report); err != nil || len(report.Results) != len(spec) {
		t.Fatalf("controller script: %d results for %d shapes (%v)\n%s\n%s", len(report.Results), len(spec), err, stdout, stderr)
	}
	t.Logf("controller rendered and uploaded %d configs in %v", len(spec), took.Round(1e6))
	results := map[string]shapeResult{}
	for _, r := range report.Results {
		results[r.Name] = r
	}
	stored := func(t *testing.T, path, want string) {
		t.Helper()
		if got, err := os.ReadFile(path); err != nil || string(got) != want {
			t.Errorf("%s holds %q (%v), want what was sent", path, got, err)
		}
	}
	vrrpConf := filepath.Join(base, "vrrp", "octavia-keepalived.conf")

	for _, s := range keepalivedShapes {
		t.Run(s.name, func(t *testing.T) {
			r := results[s.name]
			if r.Config == nil {
				t.Fatalf("the templater rendered nothing: %s", ctrlutil.Deref(r.Raised))
			}
			if r.Raised != nil || r.Status != 200 || r.Body != `{"message":"OK"}` {
				t.Errorf("refused: %d %s (the driver raised %s)\nconfig:\n%s", r.Status, r.Body, ctrlutil.Deref(r.Raised), *r.Config)
			}
			if s.lvs != nil {
				stored(t, filepath.Join(base, "lvs", "octavia-keepalivedlvs-"+listenerIDs[s.name]+".conf"), *r.Config)
			}
		})
	}
	// The VRRP config stored is the last one accepted.
	if r := results[lastVRRP]; r.Config != nil {
		stored(t, vrrpConf, *r.Config)
	}

	for _, cut := range slices.Sorted(maps.Keys(truncated)) {
		t.Run(cut, func(t *testing.T) {
			r := results[cut]
			if r.Status != 400 || r.Raised == nil || !strings.HasPrefix(*r.Raised, "octavia.amphorae.drivers.haproxy.exceptions.InvalidRequest") ||
				!strings.Contains(r.Body, "missing '}'") {
				t.Errorf("a config cut short: %d %s (raised %s), want 400 with keepalived's words", r.Status, r.Body, ctrlutil.Deref(r.Raised))
			}
			of := truncated[cut]
			path := vrrpConf
			if id, ok := listenerIDs[of]; ok {
				path = filepath.Join(base, "lvs", "octavia-keepalivedlvs-"+id+".conf")
			}
			if kept := results[of].Config; kept != nil {
				stored(t, path, *kept)
			}
		})
	}
	if t.Failed() {
		t.Logf("controller log:\n%s\nagent output:\n%s", stderr, env.Output())
	}
}
