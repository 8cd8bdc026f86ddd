package topo

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"testing"
)

// LBOptions shapes LBTopology. The zero value gives two IPv4 members on
// port 80 in a freshly created amphora namespace.
type LBOptions struct {
	// AmphoraName creates the amphora namespace with exactly this name (from
	// UniqueName, so the agent under test can be configured with it before
	// or after). Amphora uses an existing namespace instead (e.g. from
	// AdoptNamespace once the agent created it). Neither: UniqueName("amp").
	AmphoraName string
	Amphora     *Namespace

	Members    int  // member namespaces, 1..64; 0 means 2
	MemberPort int  // port each member server listens on; 0 means 80
	IPv6       bool // also address every link from 2001:db8::/32
	MTU        int  // MTU of every link; 0 = 1500

	// NoVIP leaves the VIP off eth1 (for keepalived, or an agent, to add);
	// eth1 then carries 203.0.113.4/24 (and 2001:db8:1::4/64) only.
	NoVIP bool

	// MemberHandler, if set, replaces MemberHandler(name) for member i
	// (1-based) named "member-i".
	MemberHandler func(i int, name string) http.Handler
}

// LB is an amphora-shaped topology:
//
//	client ns                amphora ns                    member-i ns
//	eth0 203.0.113.100/24 -- eth1 203.0.113.10/24 (VIP)
//	                         eth(i+1) 198.51.100.(4i-3)/30 -- eth0 198.51.100.(4i-2)/30
//
// With IPv6 the client network is also 2001:db8:1::/64 (client ::100, VIP
// ::10) and member i's network 2001:db8:100:<i in hex>::/64 (amphora ::1,
// member ::2). Each member gets its own namespace and /30, so a member can
// be cut off (Server.Stop, or its link) without touching the others; the
// amphora namespace therefore has one interface per member, eth2, eth3, ...
// Members route everything else (default) via the amphora, which forwards
// (ip_forward, IPv6 forwarding) and may bind non-local addresses
// (ip_nonlocal_bind, both families) like the amphora image. The client has
// only its connected network: it reaches the VIP side, never a member.
type LB struct {
	Amphora *Namespace
	Client  *Namespace

	VIPIf      string // "eth1", in Amphora
	VIP        string // "203.0.113.10"
	VIP6       string // "2001:db8:1::10" (set also without IPv6: the address the VIP would have)
	ClientAddr string // "203.0.113.100"
	// ClientAddr6 is "2001:db8:1::100" when IPv6 is on, else "".
	ClientAddr6 string
	ClientLink  *Veth // A = client eth0, B = amphora eth1

	Members []*Member
}

// Member is one backend: its namespace, link and HTTP server.
type Member struct {
	Name string     // "member-1"
	NS   *Namespace // the member's own namespace
	Port int

	Addr  string // e.g. "198.51.100.2"
	Addr6 string // e.g. "2001:db8:100:1::2" with IPv6, else ""

	AmphoraIf    string // amphora-side interface, e.g. "eth2"
	AmphoraAddr  string // amphora-side address (HAProxy's source towards it), e.g. "198.51.100.1"
	AmphoraAddr6 string

	Link   *Veth   // A = amphora side, B = member eth0
	Server *Server // listening on ":Port" (all of the member's addresses)
}

// HostPort is "Addr:Port", as HAProxy's server line wants it.
func (m *Member) HostPort() string { return net.JoinHostPort(m.Addr, strconv.Itoa(m.Port)) }

// HostPort6 is "[Addr6]:Port", or "" without IPv6.
func (m *Member) HostPort6() string {
	if m.Addr6 == "" {
		return ""
	}
	return net.JoinHostPort(m.Addr6, strconv.Itoa(m.Port))
}

// URL is "http://VIP:port" followed by path.
func (lb *LB) URL(port int, path string) string {
	return "http://" + net.JoinHostPort(lb.VIP, strconv.Itoa(port)) + path
}

// URL6 is "http://[VIP6]:port" followed by path.
func (lb *LB) URL6(port int, path string) string {
	return "http://" + net.JoinHostPort(lb.VIP6, strconv.Itoa(port)) + path
}

// HTTPClient is a client dialling from the client namespace.
func (lb *LB) HTTPClient(keepAlive bool) *http.Client { return lb.Client.HTTPClient(keepAlive) }

// LBTopology builds the topology described on LB and removes it in
// t.Cleanup.
func LBTopology(t testing.TB, o LBOptions) *LB {
	t.Helper()
	RequireRoot(t)
	if o.Members == 0 {
		o.Members = 2
	}
	if o.Members < 1 || o.Members > 64 {
		t.Fatalf("LBTopology: %d members; 1..64 fit in 198.51.100.0/24 as /30s", o.Members)
	}
	if o.MemberPort == 0 {
		o.MemberPort = 80
	}
	lo := LinkOptions{MTU: o.MTU}

	amp := o.Amphora
	switch {
	case amp != nil:
	case o.AmphoraName != "":
		amp = NewNamespaceNamed(t, o.AmphoraName)
	default:
		amp = NewNamespace(t, "amp")
	}
	// As the amphora image's sysctl.d and amphora-netns.service do.
	amp.Sysctl(t, "net.ipv4.ip_nonlocal_bind", "1")
	amp.Sysctl(t, "net.ipv4.ip_forward", "1")
	if o.IPv6 {
		amp.Sysctl(t, "net.ipv6.ip_nonlocal_bind", "1")
		amp.Sysctl(t, "net.ipv6.conf.all.forwarding", "1")
	}

	lb := &LB{
		Amphora:    amp,
		Client:     NewNamespace(t, "cli"),
		VIPIf:      "eth1",
		VIP:        "203.0.113.10",
		VIP6:       "2001:db8:1::10",
		ClientAddr: "203.0.113.100",
	}
	ampAddr, ampAddr6 := lb.VIP, lb.VIP6
	if o.NoVIP {
		ampAddr, ampAddr6 = "203.0.113.4", "2001:db8:1::4"
	}
	cliAddrs := []string{lb.ClientAddr + "/24"}
	ampAddrs := []string{ampAddr + "/24"}
	if o.IPv6 {
		lb.ClientAddr6 = "2001:db8:1::100"
		cliAddrs = append(cliAddrs, lb.ClientAddr6+"/64")
		ampAddrs = append(ampAddrs, ampAddr6+"/64")
	}
	lb.ClientLink = Link(t, lb.Client, "eth0", cliAddrs, amp, lb.VIPIf, ampAddrs, lo)

	for i := 1; i <= o.Members; i++ {
		base := 4 * (i - 1)
		m := &Member{
			Name:        fmt.Sprintf("member-%d", i),
			NS:          NewNamespace(t, fmt.Sprintf("m%d", i)),
			Port:        o.MemberPort,
			Addr:        fmt.Sprintf("198.51.100.%d", base+2),
			AmphoraIf:   fmt.Sprintf("eth%d", i+1),
			AmphoraAddr: fmt.Sprintf("198.51.100.%d", base+1),
		}
		ampSide := []string{m.AmphoraAddr + "/30"}
		memSide := []string{m.Addr + "/30"}
		if o.IPv6 {
			m.AmphoraAddr6 = fmt.Sprintf("2001:db8:100:%x::1", i)
			m.Addr6 = fmt.Sprintf("2001:db8:100:%x::2", i)
			ampSide = append(ampSide, m.AmphoraAddr6+"/64")
			memSide = append(memSide, m.Addr6+"/64")
		}
		m.Link = Link(t, amp, m.AmphoraIf, ampSide, m.NS, "eth0", memSide, lo)
		m.NS.AddRoute(t, "default", m.AmphoraAddr)
		if o.IPv6 {
			m.NS.AddRoute(t, "default", m.AmphoraAddr6)
		}
		h := MemberHandler(m.Name)
		if o.MemberHandler != nil {
			h = o.MemberHandler(i, m.Name)
		}
		m.Server = m.NS.ServeHTTP(t, ":"+strconv.Itoa(m.Port), h)
		lb.Members = append(lb.Members, m)
	}
	return lb
}
