package netns

import (
	"context"
	"net/netip"

	"github.com/amphora-agent/amphora-agent/agent/fault"
)

// InterfaceFor is GET /1.0/interface/{ip}: the interface inside the
// namespace (and only there) that carries ip, from live kernel state.
func (n *Network) InterfaceFor(ip string) (string, error) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return "", fault.Invalid("Invalid IP address")
	}
	a = a.Unmap()
	notFound := fault.NotFound("Error interface not found for IP address")
	if a.Zone() != "" {
		// Upstream parses a scoped address but never finds it: kernel
		// addresses carry no zone.
		return "", notFound
	}
	h, err := n.kernel.Open(n.cfg.Namespace)
	if err != nil {
		// No namespace yet: nothing can hold the address.
		return "", notFound
	}
	defer h.Close()
	links, err := h.Links()
	if err != nil {
		return "", fault.Internalf("list links: %w", err)
	}
	for _, l := range links {
		addrs, err := h.Addrs(l.Index)
		if err != nil {
			return "", fault.Internalf("list addresses: %w", err)
		}
		for _, x := range addrs {
			if x.Prefix.Addr() == a {
				return l.Name, nil
			}
		}
	}
	return "", notFound
}

// SetRules is PUT /1.0/interface/{ip}/rules.
func (n *Network) SetRules(ctx context.Context, ip string, body []byte) error {
	if _, err := n.InterfaceFor(ip); err != nil {
		return err
	}
	rules, err := DecodeFirewallRules(body)
	if err != nil {
		return err
	}
	if err := n.rules.apply(ctx, rules); err != nil {
		return fault.Internalf("apply nftables rules: %w", err)
	}
	return nil
}
