package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	vnetns "github.com/vishvananda/netns"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/amphora-agent/amphora-agent/agent/procgroup"
)

// Link is a network interface as plugging sees it.
type Link struct {
	Index int
	Name  string
	MAC   net.HardwareAddr
	MTU   int
	Up    bool
}

// IPAddr is an address on a link.
type IPAddr struct {
	Prefix    netip.Prefix
	Permanent bool // static, not from DHCP or SLAAC
	Tentative bool // IPv6 duplicate address detection still running
}

// Route scopes used by interface files.
const (
	ScopeUniverse uint8 = unix.RT_SCOPE_UNIVERSE
	ScopeLink     uint8 = unix.RT_SCOPE_LINK
)

// Route protocols the agent cares about.
const (
	ProtoKernel     = unix.RTPROT_KERNEL
	ProtoStatic     = unix.RTPROT_STATIC
	ProtoKeepalived = 18 // RTPROT_KEEPALIVED
)

// mainTable is the routing table of routes without one.
const mainTable = unix.RT_TABLE_MAIN

// KRoute is a route in the kernel.
type KRoute struct {
	LinkIndex int
	Dst       netip.Prefix
	Gateway   netip.Addr
	Prefsrc   netip.Addr
	Table     int
	Scope     uint8
	OnLink    bool
	Protocol  int
}

// KRule is a policy routing rule in the kernel.
type KRule struct {
	Src      netip.Prefix
	Table    int
	Priority int
	Protocol int
}

// Handle is the netlink surface plugging needs, inside one namespace.
// The real one wraps a netlink handle opened in the namespace; unit tests
// use a fake that records the resulting state.
type Handle interface {
	Links() ([]Link, error)
	SetUp(index int) error
	SetDown(index int) error
	SetMTU(index, mtu int) error
	// Move moves the link into namespace ("" = the agent's own) and
	// renames it there in the same request, so a name taken in one
	// namespace never blocks the move.
	Move(index int, namespace, name string) error
	Addrs(index int) ([]IPAddr, error)
	AddAddr(index int, p netip.Prefix) error
	DelAddr(index int, p netip.Prefix) error
	// Routes lists the routes through the link in every table.
	Routes(index int) ([]KRoute, error)
	AddRoute(r KRoute) error
	DelRoute(r KRoute) error
	Rules() ([]KRule, error)
	AddRule(r KRule) error
	DelRule(r KRule) error
	Close() error
}

// Kernel opens handles and runs what netlink cannot do.
type Kernel interface {
	// Open returns a handle inside namespace ("" = the agent's own).
	Open(namespace string) (Handle, error)
	// EnsureNamespace is EnsureWith.
	EnsureNamespace(namespace string) error
	// Run runs argv inside namespace and returns its combined output.
	Run(ctx context.Context, namespace string, argv []string) ([]byte, error)
	// Sysctl sets a kernel setting inside namespace.
	Sysctl(namespace, key, value string) error
}

// SystemKernel is the real kernel.
type SystemKernel struct{ Log *zap.Logger }

// Open implements Kernel.
func (k SystemKernel) Open(namespace string) (Handle, error) {
	h, err := openHandle(namespace)
	if err != nil {
		return nil, err
	}
	return &nlHandle{h: h, ns: namespace}, nil
}

// EnsureNamespace implements Kernel.
func (k SystemKernel) EnsureNamespace(namespace string) error { return EnsureWith(namespace, k.Log) }

// Run implements Kernel: the child is started inside the namespace.
func (k SystemKernel) Run(ctx context.Context, namespace string, argv []string) ([]byte, error) {
	cmd := procgroup.Command(ctx, argv[0], argv[1:]...)
	return procgroup.CombinedOutput(cmd, func(cmd *exec.Cmd) error { return StartIn(namespace, cmd) })
}

// Sysctl implements Kernel.
func (k SystemKernel) Sysctl(namespace, key, value string) error {
	return onThreadIn(namespace, func() error { return writeSysctl(key, value) })
}

type nlHandle struct {
	h  *netlink.Handle
	ns string
}

func (n *nlHandle) Close() error { n.h.Close(); return nil }

func (n *nlHandle) Links() ([]Link, error) {
	links, err := retryDump(n.h.LinkList)
	if err != nil {
		return nil, err
	}
	out := make([]Link, 0, len(links))
	for _, l := range links {
		a := l.Attrs()
		out = append(out, Link{Index: a.Index, Name: a.Name, MAC: a.HardwareAddr, MTU: a.MTU, Up: a.Flags&net.FlagUp != 0})
	}
	return out, nil
}

// ref is enough of a netlink.Link for calls that only use the index.
func ref(index int) netlink.Link {
	return &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: index}}
}

func (n *nlHandle) SetUp(index int) error       { return n.h.LinkSetUp(ref(index)) }
func (n *nlHandle) SetDown(index int) error     { return n.h.LinkSetDown(ref(index)) }
func (n *nlHandle) SetMTU(index, mtu int) error { return n.h.LinkSetMTU(ref(index), mtu) }

// Move sends one RTM_NEWLINK carrying both the target namespace and the
// new name; the kernel renames the link as it moves it.
func (n *nlHandle) Move(index int, namespace, name string) error {
	var target vnetns.NsHandle
	var err error
	if namespace == "" {
		target, err = vnetns.GetFromPath("/proc/self/ns/net")
	} else {
		target, err = vnetns.GetFromName(namespace)
	}
	if err != nil {
		return fmt.Errorf("network namespace %q: %w", namespace, err)
	}
	defer target.Close()

	var sock *nl.NetlinkSocket
	if n.ns == "" {
		sock, err = nl.GetNetlinkSocketAt(vnetns.None(), vnetns.None(), unix.NETLINK_ROUTE)
	} else {
		var src vnetns.NsHandle
		src, err = vnetns.GetFromName(n.ns)
		if err != nil {
			return err
		}
		defer src.Close()
		var cur vnetns.NsHandle
		cur, err = vnetns.Get()
		if err != nil {
			return err
		}
		defer cur.Close()
		sock, err = nl.GetNetlinkSocketAt(src, cur, unix.NETLINK_ROUTE)
	}
	if err != nil {
		return fmt.Errorf("netlink socket: %w", err)
	}
	defer sock.Close()

	req := nl.NewNetlinkRequest(unix.RTM_NEWLINK, unix.NLM_F_ACK)
	req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: {Socket: sock}}
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	req.AddData(msg)
	req.AddData(nl.NewRtAttr(unix.IFLA_NET_NS_FD, nl.Uint32Attr(uint32(target))))
	req.AddData(nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(name)))
	_, err = req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}

func (n *nlHandle) Addrs(index int) ([]IPAddr, error) {
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return n.h.AddrList(ref(index), unix.AF_UNSPEC) })
	if err != nil {
		return nil, err
	}
	var out []IPAddr
	for _, a := range addrs {
		if a.IPNet == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		bits, _ := a.Mask.Size()
		out = append(out, IPAddr{
			Prefix:    netip.PrefixFrom(ip.Unmap(), bits),
			Permanent: a.Flags&unix.IFA_F_PERMANENT != 0,
			Tentative: a.Flags&unix.IFA_F_TENTATIVE != 0,
		})
	}
	return out, nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func (n *nlHandle) AddAddr(index int, p netip.Prefix) error {
	return n.h.AddrAdd(ref(index), &netlink.Addr{IPNet: ipNet(p)})
}

func (n *nlHandle) DelAddr(index int, p netip.Prefix) error {
	return n.h.AddrDel(ref(index), &netlink.Addr{IPNet: ipNet(p)})
}

func (n *nlHandle) Routes(index int) ([]KRoute, error) {
	filter := &netlink.Route{LinkIndex: index, Table: unix.RT_TABLE_UNSPEC}
	routes, err := retryDump(func() ([]netlink.Route, error) {
		return n.h.RouteListFiltered(unix.AF_UNSPEC, filter, netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return nil, err
	}
	out := make([]KRoute, 0, len(routes))
	for _, r := range routes {
		kr := KRoute{LinkIndex: r.LinkIndex, Table: r.Table, Scope: uint8(r.Scope), OnLink: r.Flags&unix.RTNH_F_ONLINK != 0, Protocol: int(r.Protocol)}
		family := r.Family
		if r.Dst != nil {
			ip, _ := netip.AddrFromSlice(r.Dst.IP)
			bits, _ := r.Dst.Mask.Size()
			kr.Dst = netip.PrefixFrom(ip.Unmap(), bits)
		} else if family == unix.AF_INET6 {
			kr.Dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		} else {
			kr.Dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		}
		if ip, ok := netip.AddrFromSlice(r.Gw); ok {
			kr.Gateway = ip.Unmap()
		}
		if ip, ok := netip.AddrFromSlice(r.Src); ok {
			kr.Prefsrc = ip.Unmap()
		}
		out = append(out, kr)
	}
	return out, nil
}

func toNetlinkRoute(r KRoute) *netlink.Route {
	nr := &netlink.Route{
		LinkIndex: r.LinkIndex,
		Table:     r.Table,
		Scope:     netlink.Scope(r.Scope),
		Protocol:  netlink.RouteProtocol(r.Protocol),
		Family:    unix.AF_INET,
	}
	if r.Dst.Addr().Is6() {
		nr.Family = unix.AF_INET6
	}
	if r.Dst.Bits() > 0 {
		nr.Dst = ipNet(r.Dst)
	}
	if r.Gateway.IsValid() {
		nr.Gw = r.Gateway.AsSlice()
	}
	if r.Prefsrc.IsValid() {
		nr.Src = r.Prefsrc.AsSlice()
	}
	if r.OnLink {
		nr.Flags = int(netlink.FLAG_ONLINK)
	}
	return nr
}

func (n *nlHandle) AddRoute(r KRoute) error { return n.h.RouteAdd(toNetlinkRoute(r)) }
func (n *nlHandle) DelRoute(r KRoute) error { return n.h.RouteDel(toNetlinkRoute(r)) }

func (n *nlHandle) Rules() ([]KRule, error) {
	rules, err := retryDump(func() ([]netlink.Rule, error) { return n.h.RuleList(unix.AF_UNSPEC) })
	if err != nil {
		return nil, err
	}
	out := make([]KRule, 0, len(rules))
	for _, r := range rules {
		kr := KRule{Table: r.Table, Priority: r.Priority, Protocol: int(r.Protocol)}
		if r.Src != nil {
			ip, _ := netip.AddrFromSlice(r.Src.IP)
			bits, _ := r.Src.Mask.Size()
			kr.Src = netip.PrefixFrom(ip.Unmap(), bits)
		}
		out = append(out, kr)
	}
	return out, nil
}

func toNetlinkRule(r KRule) *netlink.Rule {
	nr := netlink.NewRule()
	nr.Table = r.Table
	nr.Src = ipNet(r.Src)
	nr.Family = unix.AF_INET
	if r.Src.Addr().Is6() {
		nr.Family = unix.AF_INET6
	}
	if r.Priority > 0 {
		nr.Priority = r.Priority
	}
	return nr
}

func (n *nlHandle) AddRule(r KRule) error { return n.h.RuleAdd(toNetlinkRule(r)) }
func (n *nlHandle) DelRule(r KRule) error { return n.h.RuleDel(toNetlinkRule(r)) }

// isExist tells whether err is the kernel's "already there".
func isExist(err error) bool { return errors.Is(err, unix.EEXIST) }
