// Package netnstest is an in-memory netns.Kernel for unit tests of netns
// and of its callers (the agent), so that plugging can be tested without
// root and compared as text.
package netnstest

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/amphora-agent/amphora-agent/netns"
)

// Kernel is an in-memory kernel: namespaces ("" is the agent's own)
// with links, addresses, routes and rules, behaving like Linux where
// plugging depends on it (a moved link arrives down and bare; names are
// unique per namespace; duplicates are EEXIST). It records the commands,
// sysctls and advertisements asked of it, and Fail injects errors.
type Kernel struct {
	mu        sync.Mutex
	spaces    map[string]*nsState
	nextIndex int

	// Fail, when set, is asked before every operation (set it between
	// operations, not during one) ("AddRule",
	// "Move", "Run /usr/local/bin/..."); a non-nil answer is returned.
	Fail func(op string) error

	log []string // commands, sysctls, advertisements, in order
}

type nsState struct {
	links  []*linkState
	routes []netns.KRoute
	rules  []netns.KRule
}

type linkState struct {
	netns.Link
	addrs []netns.IPAddr
}

// NewKernel returns a kernel whose own namespace holds only lo.
func NewKernel() *Kernel {
	k := &Kernel{spaces: map[string]*nsState{"": {}}, nextIndex: 1}
	k.AddLink("", "lo", "")
	return k
}

// AddLink adds a link (down, no addresses) to a namespace.
func (k *Kernel) AddLink(ns, name, mac string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var hw net.HardwareAddr
	if mac != "" {
		hw, _ = net.ParseMAC(mac)
	}
	k.spaces[ns].links = append(k.spaces[ns].links, &linkState{Link: netns.Link{Index: k.nextIndex, Name: name, MAC: hw, MTU: 1500}})
	k.nextIndex++
}

// RemoveLink deletes a link and its routes from a namespace, as a NIC
// that Nova detaches disappears without a word to the agent.
func (k *Kernel) RemoveLink(ns, name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	space := k.spaces[ns]
	for i, l := range space.links {
		if l.Name != name {
			continue
		}
		space.links = append(space.links[:i], space.links[i+1:]...)
		var keep []netns.KRoute
		for _, r := range space.routes {
			if r.LinkIndex != l.Index {
				keep = append(keep, r)
			}
		}
		space.routes = keep
		return
	}
}

func (k *Kernel) check(op string) error {
	if k.Fail != nil {
		return k.Fail(op)
	}
	return nil
}

// Open implements netns.Kernel.
func (k *Kernel) Open(ns string) (netns.Handle, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.spaces[ns]; !ok {
		return nil, fmt.Errorf("network namespace %s: %w", ns, os.ErrNotExist)
	}
	return &handle{k: k, ns: ns}, nil
}

// EnsureNamespace implements netns.Kernel: a new namespace holds lo, up.
func (k *Kernel) EnsureNamespace(ns string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.spaces[ns]; !ok {
		k.spaces[ns] = &nsState{}
		k.nextIndex++
		k.spaces[ns].links = append(k.spaces[ns].links, &linkState{Link: netns.Link{Index: 1, Name: "lo", MTU: 65536, Up: true},
			addrs: []netns.IPAddr{{Prefix: netip.MustParsePrefix("127.0.0.1/8"), Permanent: true}, {Prefix: netip.MustParsePrefix("::1/128"), Permanent: true}}})
	}
	return nil
}

// Run implements netns.Kernel: it records argv and runs nothing.
func (k *Kernel) Run(ctx context.Context, ns string, argv []string) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.check("Run " + strings.Join(argv, " ")); err != nil {
		return []byte("injected failure"), err
	}
	k.log = append(k.log, fmt.Sprintf("run in %s: %s", nsLabel(ns), strings.Join(argv, " ")))
	return nil, nil
}

// Sysctl implements netns.Kernel and records the setting.
func (k *Kernel) Sysctl(ns, key, value string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.log = append(k.log, fmt.Sprintf("sysctl in %s: %s=%s", nsLabel(ns), key, value))
	return nil
}

// Advertise has the shape of the agent's Options.Advertise and records
// each address.
func (k *Kernel) Advertise(ctx context.Context, ns string, addrs []netip.Addr) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, a := range addrs {
		k.log = append(k.log, fmt.Sprintf("advertise in %s: %s", nsLabel(ns), a))
	}
	return nil
}

// Log returns the commands, sysctls and advertisements asked so far.
func (k *Kernel) Log() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.log...)
}

func nsLabel(ns string) string {
	if ns == "" {
		return "host"
	}
	return ns
}

type handle struct {
	k  *Kernel
	ns string
}

func (h *handle) space() *nsState { return h.k.spaces[h.ns] }

func (h *handle) link(index int) (*linkState, error) {
	for _, l := range h.space().links {
		if l.Index == index {
			return l, nil
		}
	}
	return nil, unix.ENODEV
}

func (h *handle) do(op string, fn func() error) error {
	h.k.mu.Lock()
	defer h.k.mu.Unlock()
	if err := h.k.check(op); err != nil {
		return err
	}
	return fn()
}

func (h *handle) Close() error { return nil }

func (h *handle) Links() ([]netns.Link, error) {
	var out []netns.Link
	err := h.do("Links", func() error {
		for _, l := range h.space().links {
			out = append(out, l.Link)
		}
		return nil
	})
	return out, err
}

func (h *handle) SetUp(index int) error {
	return h.do("SetUp", func() error {
		l, err := h.link(index)
		if err == nil {
			l.Up = true
		}
		return err
	})
}

func (h *handle) SetDown(index int) error {
	return h.do("SetDown", func() error {
		l, err := h.link(index)
		if err == nil {
			l.Up = false
		}
		return err
	})
}

func (h *handle) SetMTU(index, mtu int) error {
	return h.do("SetMTU", func() error {
		l, err := h.link(index)
		if err == nil {
			l.MTU = mtu
		}
		return err
	})
}

func (h *handle) Move(index int, ns, name string) error {
	return h.do("Move", func() error {
		l, err := h.link(index)
		if err != nil {
			return err
		}
		dst, ok := h.k.spaces[ns]
		if !ok {
			return unix.ENOENT
		}
		for _, o := range dst.links {
			if o.Name == name {
				return unix.EEXIST
			}
		}
		src := h.space()
		for i, o := range src.links {
			if o == l {
				src.links = append(src.links[:i], src.links[i+1:]...)
				break
			}
		}
		var keep []netns.KRoute
		for _, r := range src.routes {
			if r.LinkIndex != index {
				keep = append(keep, r)
			}
		}
		src.routes = keep
		l.Name, l.Up, l.addrs = name, false, nil
		dst.links = append(dst.links, l)
		return nil
	})
}

func (h *handle) Addrs(index int) ([]netns.IPAddr, error) {
	var out []netns.IPAddr
	err := h.do("Addrs", func() error {
		l, err := h.link(index)
		if err == nil {
			out = append(out, l.addrs...)
		}
		return err
	})
	return out, err
}

func (h *handle) AddAddr(index int, p netip.Prefix) error {
	return h.do("AddAddr", func() error {
		l, err := h.link(index)
		if err != nil {
			return err
		}
		for _, a := range l.addrs {
			if a.Prefix == p {
				return unix.EEXIST
			}
		}
		l.addrs = append(l.addrs, netns.IPAddr{Prefix: p, Permanent: true})
		return nil
	})
}

func (h *handle) DelAddr(index int, p netip.Prefix) error {
	return h.do("DelAddr", func() error {
		l, err := h.link(index)
		if err != nil {
			return err
		}
		for i, a := range l.addrs {
			if a.Prefix == p {
				l.addrs = append(l.addrs[:i], l.addrs[i+1:]...)
				return nil
			}
		}
		return unix.EADDRNOTAVAIL
	})
}

func (h *handle) Routes(index int) ([]netns.KRoute, error) {
	var out []netns.KRoute
	err := h.do("Routes", func() error {
		for _, r := range h.space().routes {
			if r.LinkIndex == index {
				out = append(out, r)
			}
		}
		return nil
	})
	return out, err
}

func (h *handle) hasAddr(a netip.Addr) bool {
	for _, l := range h.space().links {
		for _, x := range l.addrs {
			if x.Prefix.Addr() == a {
				return true
			}
		}
	}
	return false
}

func (h *handle) AddRoute(r netns.KRoute) error {
	return h.do("AddRoute", func() error {
		if _, err := h.link(r.LinkIndex); err != nil {
			return err
		}
		// Linux refuses a preferred source the namespace does not have.
		if r.Prefsrc.IsValid() && !h.hasAddr(r.Prefsrc) {
			return unix.EINVAL
		}
		// Linux refuses a destination with host bits set, and a next hop
		// that is one of the namespace's own addresses or multicast
		// ("Nexthop has invalid gateway"), both with EINVAL.
		if r.Dst != r.Dst.Masked() {
			return unix.EINVAL
		}
		if r.Gateway.IsValid() && (h.hasAddr(r.Gateway) || r.Gateway.IsMulticast()) {
			return unix.EINVAL
		}
		// Like Linux, one route per destination and table (no metrics).
		for _, o := range h.space().routes {
			if o.Table == r.Table && o.Dst.Masked() == r.Dst.Masked() {
				return unix.EEXIST
			}
		}
		h.space().routes = append(h.space().routes, r)
		return nil
	})
}

// sameRoute is how Linux matches a route to delete: destination,
// gateway, preferred source and table (0 is main).
func sameRoute(a, b netns.KRoute) bool {
	table := func(r netns.KRoute) int {
		if r.Table == 0 {
			return unix.RT_TABLE_MAIN
		}
		return r.Table
	}
	return a.Dst.Masked() == b.Dst.Masked() && a.Gateway == b.Gateway && a.Prefsrc == b.Prefsrc && table(a) == table(b)
}

func (h *handle) DelRoute(r netns.KRoute) error {
	return h.do("DelRoute", func() error {
		s := h.space()
		for i, o := range s.routes {
			if sameRoute(o, r) && o.LinkIndex == r.LinkIndex {
				s.routes = append(s.routes[:i], s.routes[i+1:]...)
				return nil
			}
		}
		return unix.ESRCH
	})
}

func (h *handle) Rules() ([]netns.KRule, error) {
	var out []netns.KRule
	err := h.do("Rules", func() error {
		out = append(out, h.space().rules...)
		return nil
	})
	return out, err
}

func (h *handle) AddRule(r netns.KRule) error {
	return h.do("AddRule", func() error {
		for _, o := range h.space().rules {
			if o.Src == r.Src && o.Table == r.Table {
				return unix.EEXIST
			}
		}
		h.space().rules = append(h.space().rules, r)
		return nil
	})
}

func (h *handle) DelRule(r netns.KRule) error {
	return h.do("DelRule", func() error {
		s := h.space()
		for i, o := range s.rules {
			if o.Src == r.Src && o.Table == r.Table {
				s.rules = append(s.rules[:i], s.rules[i+1:]...)
				return nil
			}
		}
		return unix.ENOENT
	})
}

// Dump renders the kernel state as text, sorted, for golden files.
func (k *Kernel) Dump() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var names []string
	for n := range k.spaces {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		s := k.spaces[n]
		fmt.Fprintf(&b, "namespace %s\n", nsLabel(n))
		links := append([]*linkState(nil), s.links...)
		sort.Slice(links, func(i, j int) bool { return links[i].Name < links[j].Name })
		byIndex := map[int]string{}
		for _, l := range links {
			byIndex[l.Index] = l.Name
			state := "down"
			if l.Up {
				state = "up"
			}
			fmt.Fprintf(&b, "  link %s mac %s mtu %d %s\n", l.Name, l.MAC, l.MTU, state)
			var addrs []string
			for _, a := range l.addrs {
				addrs = append(addrs, a.Prefix.String())
			}
			sort.Strings(addrs)
			for _, a := range addrs {
				fmt.Fprintf(&b, "    addr %s\n", a)
			}
		}
		var routes []string
		for _, r := range s.routes {
			routes = append(routes, routeText(r, byIndex[r.LinkIndex]))
		}
		sort.Strings(routes)
		for _, r := range routes {
			fmt.Fprintf(&b, "  route %s\n", r)
		}
		var rules []string
		for _, r := range s.rules {
			rules = append(rules, fmt.Sprintf("from %s lookup %d", r.Src, r.Table))
		}
		sort.Strings(rules)
		for _, r := range rules {
			fmt.Fprintf(&b, "  rule %s\n", r)
		}
	}
	return b.String()
}

func routeText(r netns.KRoute, dev string) string {
	s := fmt.Sprintf("table %d %s", r.Table, r.Dst)
	if r.Gateway.IsValid() {
		s += " via " + r.Gateway.String()
	}
	s += " dev " + dev
	if r.Prefsrc.IsValid() {
		s += " src " + r.Prefsrc.String()
	}
	if r.Scope == netns.ScopeLink {
		s += " scope link"
	}
	if r.OnLink {
		s += " onlink"
	}
	return s + fmt.Sprintf(" proto %d", r.Protocol)
}
