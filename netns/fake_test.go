package netns

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// fakeKernel is an in-memory kernel: namespaces ("" is the agent's own)
// with links, addresses, routes and rules, behaving like Linux where
// plugging depends on it (a moved link arrives down and bare; names are
// unique per namespace; duplicates are EEXIST). It records the commands,
// sysctls and advertisements asked of it, and fail injects errors.
type fakeKernel struct {
	mu        sync.Mutex
	spaces    map[string]*fakeNS
	nextIndex int

	// fail, when set, is asked before every operation ("AddRule",
	// "Move", "Run /usr/local/bin/..."); a non-nil answer is returned.
	fail func(op string) error

	log []string // commands, sysctls, advertisements, in order
}

type fakeNS struct {
	links  []*fakeLink
	routes []KRoute
	rules  []KRule
}

type fakeLink struct {
	Link
	addrs []IPAddr
}

func newFakeKernel() *fakeKernel {
	k := &fakeKernel{spaces: map[string]*fakeNS{"": {}}, nextIndex: 1}
	k.addLink("", "lo", "")
	return k
}

// addLink adds a link (down, no addresses) to a namespace.
func (k *fakeKernel) addLink(ns, name, mac string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var hw net.HardwareAddr
	if mac != "" {
		hw, _ = net.ParseMAC(mac)
	}
	k.spaces[ns].links = append(k.spaces[ns].links, &fakeLink{Link: Link{Index: k.nextIndex, Name: name, MAC: hw, MTU: 1500}})
	k.nextIndex++
}

func (k *fakeKernel) check(op string) error {
	if k.fail != nil {
		return k.fail(op)
	}
	return nil
}

func (k *fakeKernel) Open(ns string) (Handle, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.spaces[ns]; !ok {
		return nil, fmt.Errorf("network namespace %s: %w", ns, os.ErrNotExist)
	}
	return &fakeHandle{k: k, ns: ns}, nil
}

func (k *fakeKernel) EnsureNamespace(ns string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.spaces[ns]; !ok {
		k.spaces[ns] = &fakeNS{}
		k.nextIndex++
		k.spaces[ns].links = append(k.spaces[ns].links, &fakeLink{Link: Link{Index: 1, Name: "lo", MTU: 65536, Up: true},
			addrs: []IPAddr{{Prefix: netip.MustParsePrefix("127.0.0.1/8"), Permanent: true}, {Prefix: netip.MustParsePrefix("::1/128"), Permanent: true}}})
	}
	return nil
}

func (k *fakeKernel) Run(ctx context.Context, ns string, argv []string) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.check("Run " + strings.Join(argv, " ")); err != nil {
		return []byte("injected failure"), err
	}
	k.log = append(k.log, fmt.Sprintf("run in %s: %s", nsLabel(ns), strings.Join(argv, " ")))
	return nil, nil
}

func (k *fakeKernel) Sysctl(ns, key, value string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.log = append(k.log, fmt.Sprintf("sysctl in %s: %s=%s", nsLabel(ns), key, value))
	return nil
}

func (k *fakeKernel) Advertise(ctx context.Context, ns string, addrs []netip.Addr) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, a := range addrs {
		k.log = append(k.log, fmt.Sprintf("advertise in %s: %s", nsLabel(ns), a))
	}
	return nil
}

func nsLabel(ns string) string {
	if ns == "" {
		return "host"
	}
	return ns
}

type fakeHandle struct {
	k  *fakeKernel
	ns string
}

func (h *fakeHandle) space() *fakeNS { return h.k.spaces[h.ns] }

func (h *fakeHandle) link(index int) (*fakeLink, error) {
	for _, l := range h.space().links {
		if l.Index == index {
			return l, nil
		}
	}
	return nil, unix.ENODEV
}

func (h *fakeHandle) do(op string, fn func() error) error {
	h.k.mu.Lock()
	defer h.k.mu.Unlock()
	if err := h.k.check(op); err != nil {
		return err
	}
	return fn()
}

func (h *fakeHandle) Close() error { return nil }

func (h *fakeHandle) Links() ([]Link, error) {
	var out []Link
	err := h.do("Links", func() error {
		for _, l := range h.space().links {
			out = append(out, l.Link)
		}
		return nil
	})
	return out, err
}

func (h *fakeHandle) SetUp(index int) error {
	return h.do("SetUp", func() error {
		l, err := h.link(index)
		if err == nil {
			l.Up = true
		}
		return err
	})
}

func (h *fakeHandle) SetDown(index int) error {
	return h.do("SetDown", func() error {
		l, err := h.link(index)
		if err == nil {
			l.Up = false
		}
		return err
	})
}

func (h *fakeHandle) SetMTU(index, mtu int) error {
	return h.do("SetMTU", func() error {
		l, err := h.link(index)
		if err == nil {
			l.MTU = mtu
		}
		return err
	})
}

func (h *fakeHandle) Move(index int, ns, name string) error {
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
		var keep []KRoute
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

func (h *fakeHandle) Addrs(index int) ([]IPAddr, error) {
	var out []IPAddr
	err := h.do("Addrs", func() error {
		l, err := h.link(index)
		if err == nil {
			out = append(out, l.addrs...)
		}
		return err
	})
	return out, err
}

func (h *fakeHandle) AddAddr(index int, p netip.Prefix) error {
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
		l.addrs = append(l.addrs, IPAddr{Prefix: p, Permanent: true})
		return nil
	})
}

func (h *fakeHandle) DelAddr(index int, p netip.Prefix) error {
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

func (h *fakeHandle) Routes(index int) ([]KRoute, error) {
	var out []KRoute
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

func (h *fakeHandle) hasAddr(a netip.Addr) bool {
	for _, l := range h.space().links {
		for _, x := range l.addrs {
			if x.Prefix.Addr() == a {
				return true
			}
		}
	}
	return false
}

func (h *fakeHandle) AddRoute(r KRoute) error {
	return h.do("AddRoute", func() error {
		if _, err := h.link(r.LinkIndex); err != nil {
			return err
		}
		// Linux refuses a preferred source the namespace does not have.
		if r.Prefsrc.IsValid() && !h.hasAddr(r.Prefsrc) {
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

func (h *fakeHandle) DelRoute(r KRoute) error {
	return h.do("DelRoute", func() error {
		s := h.space()
		for i, o := range s.routes {
			if keyOf(o) == keyOf(r) && o.LinkIndex == r.LinkIndex {
				s.routes = append(s.routes[:i], s.routes[i+1:]...)
				return nil
			}
		}
		return unix.ESRCH
	})
}

func (h *fakeHandle) Rules() ([]KRule, error) {
	var out []KRule
	err := h.do("Rules", func() error {
		out = append(out, h.space().rules...)
		return nil
	})
	return out, err
}

func (h *fakeHandle) AddRule(r KRule) error {
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

func (h *fakeHandle) DelRule(r KRule) error {
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

// dump renders the kernel state as text, sorted, for golden files.
func (k *fakeKernel) dump() string {
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
		links := append([]*fakeLink(nil), s.links...)
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

func routeText(r KRoute, dev string) string {
	s := fmt.Sprintf("table %d %s", r.Table, r.Dst)
	if r.Gateway.IsValid() {
		s += " via " + r.Gateway.String()
	}
	s += " dev " + dev
	if r.Prefsrc.IsValid() {
		s += " src " + r.Prefsrc.String()
	}
	if r.Scope == ScopeLink {
		s += " scope link"
	}
	if r.OnLink {
		s += " onlink"
	}
	return s + fmt.Sprintf(" proto %d", r.Protocol)
}

// files renders the agent's files under dir, for golden files.
func dumpFiles(dir string) string {
	var b strings.Builder
	filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return nil
		}
		data, _ := os.ReadFile(path)
		if strings.HasSuffix(path, ".json") {
			var pretty bytes.Buffer
			if json.Indent(&pretty, data, "", "  ") == nil {
				data = pretty.Bytes()
			}
		}
		rel, _ := filepath.Rel(dir, path)
		fmt.Fprintf(&b, "file %s (%#o)\n%s\n", rel, info.Mode().Perm(), strings.TrimRight(string(data), "\n"))
		return nil
	})
	return b.String()
}
