package netns

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// dhclientCmd is the DHCP client upstream's images run for "dhcp" entries.
const dhclientCmd = "/sbin/dhclient"

// Timing of `interface up`.
const (
	// dadTimeout bounds the wait for IPv6 duplicate address detection, as
	// upstream (30 s); the caller's context may end it sooner.
	dadTimeout = 30 * time.Second
	dadPoll    = 100 * time.Millisecond
	// A route whose address or link is not ready yet is refused with
	// EINVAL; it is retried for about two seconds, as upstream does.
	routeRetries  = 20
	routeRetryGap = 100 * time.Millisecond
)

// configurator applies interface files inside the namespace: what
// upstream's `amphora-interface up|down` does.
type configurator struct {
	ns     string
	kernel Kernel
	log    *zap.Logger
	rules  *nftRules
	// wait sleeps between polls; tests make it instant.
	wait func(ctx context.Context, d time.Duration) error
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// openLink opens a handle in the namespace and finds the link name; the
// caller closes the handle.
func (c *configurator) openLink(name string) (Handle, Link, error) {
	h, err := c.kernel.Open(c.ns)
	if err != nil {
		return nil, Link{}, err
	}
	link, err := linkByName(h, name)
	if err != nil {
		h.Close()
		return nil, Link{}, err
	}
	return h, link, nil
}

func linkByName(h Handle, name string) (Link, error) {
	links, err := h.Links()
	if err != nil {
		return Link{}, err
	}
	for _, l := range links {
		if l.Name == name {
			return l, nil
		}
	}
	return Link{}, fmt.Errorf("interface %s not found", name)
}

// up brings the interface of f up and makes its addresses, static routes
// and (for the VIP interface) source rules exactly what f lists.
func (c *configurator) up(ctx context.Context, f *InterfaceFile) error {
	return c.upFrom(ctx, f, nil)
}

// upAll is up for an operator's `interface up`: every up-script runs even
// on a link already up, as upstream's amphora-interface does since Octavia
// 14 (12.0.1, 13.0.1), so it puts back masquerade rules that went missing.
// The agent's own masquerade script replaces an interface's rules, so
// running it again adds nothing twice.
func (c *configurator) upAll(ctx context.Context, f *InterfaceFile) error {
	return c.apply(ctx, f, nil, true)
}

// upFrom is up for an interface whose file replaces prev (nil: none known).
func (c *configurator) upFrom(ctx context.Context, f, prev *InterfaceFile) error {
	return c.apply(ctx, f, prev, false)
}

// apply brings f up; allScripts runs every up-script whatever the link's
// state was.
func (c *configurator) apply(ctx context.Context, f, prev *InterfaceFile, allScripts bool) error {
	if f.IsSRIOV && c.rules != nil {
		if err := c.rules.ensureBase(ctx); err != nil {
			return err
		}
	}
	h, link, err := c.openLink(f.Name)
	if err != nil {
		return err
	}
	defer h.Close()
	cameUp := !link.Up
	if cameUp {
		if f.MTU > 0 && link.MTU != f.MTU {
			if err := h.SetMTU(link.Index, f.MTU); err != nil {
				return fmt.Errorf("set MTU %d on %s: %w", f.MTU, f.Name, err)
			}
		}
		if err := h.SetUp(link.Index); err != nil {
			return fmt.Errorf("set %s up: %w", f.Name, err)
		}
		for _, a := range f.Addresses {
			if a.DHCP {
				if err := c.dhclient(ctx, f.Name, false); err != nil {
					return err
				}
			}
			if a.IPv6Auto {
				if err := c.slaac(f.Name, true); err != nil {
					return err
				}
			}
		}
	} else if f.MTU > 0 && link.MTU != f.MTU {
		// Upstream only sets the MTU when the link was down, so an MTU
		// change of a re-plugged port never applied; apply it.
		if err := h.SetMTU(link.Index, f.MTU); err != nil {
			return fmt.Errorf("set MTU %d on %s: %w", f.MTU, f.Name, err)
		}
	}
	if err := c.addressesUp(ctx, h, link, f); err != nil {
		return err
	}
	c.routesUp(ctx, h, link, f)
	if f.ownsRules() {
		if err := c.rulesUp(h, f); err != nil {
			return err
		}
	}
	// Up-scripts run when the link comes up. On a link already up (an agent
	// restart, a re-plug) a new file runs only the commands that changed:
	// Octavia before 14 ran none there, so a port that gained an IP family
	// never got that family's masquerade rules; 14 runs them all.
	up, down := f.Scripts.Up, []Command(nil)
	if !cameUp && !allScripts {
		if prev == nil {
			return nil
		}
		up, down = newCommands(f.Scripts.Up, prev.Scripts.Up), newCommands(prev.Scripts.Down, f.Scripts.Down)
	}
	for _, s := range down {
		if err := c.script(ctx, f.Name, s.Command); err != nil {
			c.log.Warn("interface down script failed", zap.String("interface", f.Name), zap.Error(err))
		}
	}
	for _, s := range up {
		if err := c.script(ctx, f.Name, s.Command); err != nil {
			return err
		}
	}
	return nil
}

// newCommands are the commands of cmds that old lacks.
func newCommands(cmds, old []Command) []Command {
	var out []Command
	for _, c := range cmds {
		if !slices.Contains(old, c) {
			out = append(out, c)
		}
	}
	return out
}

// ownsRules tells whether the file's interface manages the namespace's
// source rules: the VIP interface. Files written by 11.0.0 agents have no
// if_type; there the VIP file is the one that lists rules (reconciling
// rules for the others would delete the VIP's).
func (f *InterfaceFile) ownsRules() bool {
	return f.IfType == IfTypeVIP || (f.IfType == "" && len(f.Rules) > 0)
}

// keepAddress tells whether an address not listed in a file survives
// reconciliation: link-local and loopback addresses are the kernel's
// (upstream removes them too, which breaks IPv6 neighbour discovery on
// the link and ::1 inside the namespace).
func keepAddress(p netip.Prefix) bool {
	return p.Addr().IsLinkLocalUnicast() || p.Addr().IsLoopback()
}

func fileAddr(a Address) (netip.Prefix, bool) {
	if a.Address == "" || a.DHCP || a.IPv6Auto {
		return netip.Prefix{}, false
	}
	ip, err := netip.ParseAddr(a.Address)
	if err != nil {
		return netip.Prefix{}, false
	}
	bits := ip.BitLen()
	if a.Prefixlen != nil {
		bits = *a.Prefixlen
	}
	return netip.PrefixFrom(ip.Unmap(), bits), true
}

func (c *configurator) addressesUp(ctx context.Context, h Handle, link Link, f *InterfaceFile) error {
	current, err := h.Addrs(link.Index)
	if err != nil {
		return fmt.Errorf("list addresses of %s: %w", f.Name, err)
	}
	stale := map[netip.Prefix]bool{}
	for _, a := range current {
		if a.Permanent && !keepAddress(a.Prefix) {
			stale[a.Prefix] = true
		}
	}
	for _, a := range f.Addresses {
		p, ok := fileAddr(a)
		if !ok {
			if a.Address != "" {
				c.log.Warn("skipping an invalid address of an interface file", zap.String("interface", f.Name), zap.String("address", a.Address))
			}
			continue
		}
		if stale[p] {
			delete(stale, p)
			continue
		}
		if !a.Owned() {
			continue
		}
		c.log.Debug("adding address", zap.String("interface", f.Name), zap.Stringer("address", p))
		if err := h.AddAddr(link.Index, p); err != nil && !isExist(err) {
			return fmt.Errorf("add address %s to %s: %w", p, f.Name, err)
		}
	}
	c.waitDAD(ctx, h, link, f.Name)
	for p := range stale {
		c.log.Debug("deleting address", zap.String("interface", f.Name), zap.Stringer("address", p))
		if err := h.DelAddr(link.Index, p); err != nil {
			c.log.Warn("cannot delete address", zap.String("interface", f.Name), zap.Stringer("address", p), zap.Error(err))
		}
	}
	return nil
}

// waitDAD waits until no IPv6 address of the link is tentative, so routes
// with those addresses as source can be added and services can use them.
func (c *configurator) waitDAD(ctx context.Context, h Handle, link Link, name string) {
	ctx, cancel := context.WithTimeout(ctx, dadTimeout)
	defer cancel()
	for {
		addrs, err := h.Addrs(link.Index)
		if err != nil {
			return
		}
		tentative := false
		for _, a := range addrs {
			tentative = tentative || (a.Tentative && a.Prefix.Addr().Is6())
		}
		if !tentative {
			return
		}
		if c.wait(ctx, dadPoll) != nil {
			c.log.Warn("IPv6 addresses still tentative", zap.String("interface", name))
			return
		}
	}
}

type routeKey struct {
	dst              netip.Prefix
	gateway, prefsrc netip.Addr
	table            int
}

func keyOf(r KRoute) routeKey {
	t := r.Table
	if t == 0 {
		t = mainTable
	}
	return routeKey{r.Dst.Masked(), r.Gateway, r.Prefsrc, t}
}

// fileRoute converts an interface file route. A destination with host
// bits set (upstream writes host routes as Neutron has them) is its network.
func fileRoute(index int, r Route) (KRoute, error) {
	dst, err := parseNetwork(r.Dst)
	if err != nil {
		return KRoute{}, fmt.Errorf("invalid destination %q", r.Dst)
	}
	kr := KRoute{LinkIndex: index, Dst: dst.Masked(), Table: r.Table, Protocol: ProtoStatic}
	if kr.Table == 0 {
		kr.Table = mainTable
	}
	if r.Gateway != "" {
		gw, err := netip.ParseAddr(r.Gateway)
		if err != nil {
			return KRoute{}, fmt.Errorf("invalid gateway %q", r.Gateway)
		}
		kr.Gateway = gw.Unmap()
	}
	if r.Prefsrc != "" {
		src, err := netip.ParseAddr(r.Prefsrc)
		if err != nil {
			return KRoute{}, fmt.Errorf("invalid prefsrc %q", r.Prefsrc)
		}
		kr.Prefsrc = src.Unmap()
	}
	switch r.Scope {
	case "", "universe", "global":
		kr.Scope = ScopeUniverse
	case "link":
		kr.Scope = ScopeLink
	case "host":
		kr.Scope = unix.RT_SCOPE_HOST
	default:
		return KRoute{}, fmt.Errorf("unknown scope %q", r.Scope)
	}
	for _, fl := range r.Flags {
		if fl == "onlink" {
			kr.OnLink = true
		}
	}
	if kr.Gateway.IsValid() && kr.Gateway.Is4() != kr.Dst.Addr().Is4() {
		return KRoute{}, fmt.Errorf("gateway %s does not match destination %s", kr.Gateway, kr.Dst)
	}
	return kr, nil
}

// routesUp reconciles the static routes of the link. Failures are logged,
// not returned: a host route the subnet's owner got wrong (a next hop the
// kernel refuses, such as one of the amphora's own addresses) must not
// stop the VIP from coming up (upstream behaves the same).
func (c *configurator) routesUp(ctx context.Context, h Handle, link Link, f *InterfaceFile) {
	current, err := h.Routes(link.Index)
	if err != nil {
		c.log.Warn("cannot list routes", zap.String("interface", f.Name), zap.Error(err))
		return
	}
	stale := map[routeKey]KRoute{}
	for _, r := range current {
		if r.Protocol == ProtoStatic {
			stale[keyOf(r)] = r
		}
	}
	for _, fr := range f.Routes {
		kr, err := fileRoute(link.Index, fr)
		if err != nil {
			c.log.Warn("skipping an invalid route of an interface file", zap.String("interface", f.Name), zap.Error(err))
			continue
		}
		if sent, _ := parseNetwork(fr.Dst); sent != kr.Dst {
			c.log.Warn("route destination has host bits set; applying its network instead",
				zap.String("interface", f.Name), zap.String("dst", fr.Dst), zap.Stringer("applied", kr.Dst))
		}
		if _, ok := stale[keyOf(kr)]; ok {
			delete(stale, keyOf(kr))
			continue
		}
		c.log.Debug("adding route", zap.String("interface", f.Name), zap.Any("route", fr))
		if err := c.retryEINVAL(ctx, func() error { return h.AddRoute(kr) }); err != nil && !isExist(err) {
			c.log.Warn("the kernel refused a route; skipped", zap.String("interface", f.Name), zap.Any("route", fr), zap.Error(err))
		}
	}
	for _, r := range stale {
		if err := h.DelRoute(r); err != nil {
			c.log.Warn("cannot delete route", zap.String("interface", f.Name), zap.Stringer("dst", r.Dst), zap.Error(err))
		}
	}
}

func (c *configurator) retryEINVAL(ctx context.Context, fn func() error) error {
	var err error
	for range routeRetries {
		if err = fn(); !errors.Is(err, unix.EINVAL) {
			return err
		}
		if c.wait(ctx, routeRetryGap) != nil {
			return err
		}
	}
	return err
}

type ruleKey struct {
	src   netip.Prefix
	table int
}

func fileRule(r Rule) (KRule, error) {
	a, err := netip.ParseAddr(r.Src)
	if err != nil {
		return KRule{}, fmt.Errorf("invalid rule source %q", r.Src)
	}
	bits := r.SrcLen
	if bits <= 0 || bits > a.BitLen() {
		bits = a.BitLen()
	}
	t := r.Table
	if t == 0 {
		t = mainTable
	}
	return KRule{Src: netip.PrefixFrom(a.Unmap(), bits).Masked(), Table: t}, nil
}

// rulesUp reconciles source rules in the namespace. Rules without a
// source, and those the kernel or keepalived own, are never touched.
func (c *configurator) rulesUp(h Handle, f *InterfaceFile) error {
	current, err := h.Rules()
	if err != nil {
		return fmt.Errorf("list rules: %w", err)
	}
	stale := map[ruleKey]KRule{}
	for _, r := range current {
		if !r.Src.IsValid() || r.Protocol == ProtoKernel || r.Protocol == ProtoKeepalived {
			continue
		}
		stale[ruleKey{r.Src.Masked(), r.Table}] = r
	}
	for _, fr := range f.Rules {
		kr, err := fileRule(fr)
		if err != nil {
			c.log.Warn("skipping an invalid rule of an interface file", zap.String("interface", f.Name), zap.Error(err))
			continue
		}
		k := ruleKey{kr.Src, kr.Table}
		if _, ok := stale[k]; ok {
			delete(stale, k)
			continue
		}
		if err := h.AddRule(kr); err != nil && !isExist(err) {
			return fmt.Errorf("add rule from %s lookup %d: %w", kr.Src, kr.Table, err)
		}
	}
	for _, r := range stale {
		if err := h.DelRule(r); err != nil {
			c.log.Warn("cannot delete rule", zap.Stringer("src", r.Src), zap.Int("table", r.Table), zap.Error(err))
		}
	}
	return nil
}

// script runs one up/down command inside the namespace. A command whose
// program is not installed is skipped with a warning: the LVS masquerade
// script belongs to the image, and a missing one must not make every plug
// fail; a command that runs and fails is an error.
func (c *configurator) script(ctx context.Context, iface, command string) error {
	argv := strings.Fields(command)
	if len(argv) == 0 {
		return nil
	}
	out, err := c.kernel.Run(ctx, c.ns, argv)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, exec.ErrNotFound) {
			c.log.Warn("interface script not installed; skipped", zap.String("interface", iface), zap.String("command", command))
			return nil
		}
		return fmt.Errorf("command %q: %w: %s", command, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (c *configurator) dhclient(ctx context.Context, iface string, release bool) error {
	argv := []string{dhclientCmd}
	if release {
		argv = append(argv, "-r")
	}
	argv = append(argv, "-lf", "/var/lib/dhclient/dhclient-"+iface+".leases", "-pf", "/run/dhclient-"+iface+".pid", iface)
	return c.script(ctx, iface, strings.Join(argv, " "))
}

// slaac turns router advertisements and address autoconfiguration on or
// off for the interface (accept_ra 2: forwarding is on in the namespace).
func (c *configurator) slaac(iface string, on bool) error {
	ra, auto := "0", "0"
	if on {
		ra, auto = "2", "1"
	}
	for _, s := range []Sysctl{{"net.ipv6.conf." + iface + ".accept_ra", ra}, {"net.ipv6.conf." + iface + ".autoconf", auto}} {
		if err := c.kernel.Sysctl(c.ns, s.Key, s.Value); err != nil {
			return fmt.Errorf("sysctl %s=%s: %w", s.Key, s.Value, err)
		}
	}
	return nil
}

// down undoes up: DHCP/SLAAC off, and when the link is up its rules,
// routes and addresses removed and the link set down, then the down
// scripts. Errors are logged and the rest still runs, as upstream.
func (c *configurator) down(ctx context.Context, f *InterfaceFile) error {
	for _, a := range f.Addresses {
		if a.DHCP {
			if err := c.dhclient(ctx, f.Name, true); err != nil {
				c.log.Warn("dhclient release failed", zap.String("interface", f.Name), zap.Error(err))
			}
		}
		if a.IPv6Auto {
			if err := c.slaac(f.Name, false); err != nil {
				c.log.Warn("cannot turn SLAAC off", zap.String("interface", f.Name), zap.Error(err))
			}
		}
	}
	h, link, err := c.openLink(f.Name)
	if err != nil {
		return err
	}
	defer h.Close()
	if !link.Up {
		return nil
	}
	warn := func(what string, err error) {
		if err != nil {
			c.log.Debug("interface down: "+what, zap.String("interface", f.Name), zap.Error(err))
		}
	}
	if f.ownsRules() {
		for _, fr := range f.Rules {
			if kr, err := fileRule(fr); err == nil {
				warn("delete rule", h.DelRule(kr))
			}
		}
	}
	for _, fr := range f.Routes {
		if kr, err := fileRoute(link.Index, fr); err == nil {
			warn("delete route", h.DelRoute(kr))
		}
	}
	if addrs, err := h.Addrs(link.Index); err == nil {
		for _, a := range addrs {
			if !keepAddress(a.Prefix) {
				warn("delete address", h.DelAddr(link.Index, a.Prefix))
			}
		}
	}
	warn("set down", h.SetDown(link.Index))
	for _, s := range f.Scripts.Down {
		if err := c.script(ctx, f.Name, s.Command); err != nil {
			c.log.Warn("interface down script failed", zap.String("interface", f.Name), zap.Error(err))
		}
	}
	return nil
}
