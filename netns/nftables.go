package netns

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/fsutil"
)

// nftCmd loads rules files; `nft -f` applies a file as one transaction.
const nftCmd = "nft"

// FirewallRule is one item of PUT /1.0/interface/{ip}/rules.
type FirewallRule struct {
	Protocol string  // TCP, UDP, SCTP or vrrp
	CIDR     *string // allowed source; nil or 0.0.0.0/0 for any
	Port     int
}

// DecodeFirewallRules validates a rules body against upstream's schema: an
// array of objects with exactly protocol (TCP, UDP, SCTP, or vrrp in lower
// case), cidr (string or null) and port (a number from 1 to 65535).
// Stricter than the schema, because the values end up in an nftables file:
// cidr must be an IP network (or empty) and port an integer. Anything else is the
// framework 400 "Invalid rules information".
func DecodeFirewallRules(body []byte) ([]FirewallRule, error) {
	bad := fault.BadRequest(descInvalidRules)
	var items []map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&items); err != nil || items == nil {
		return nil, bad
	}
	if dec.More() {
		return nil, bad
	}
	out := make([]FirewallRule, 0, len(items))
	for _, it := range items {
		if it == nil || len(it) != 3 {
			return nil, bad
		}
		var r FirewallRule
		if json.Unmarshal(it["protocol"], &r.Protocol) != nil {
			return nil, bad
		}
		switch r.Protocol {
		case "TCP", "UDP", "SCTP", "vrrp":
		default:
			return nil, bad
		}
		raw, ok := it["cidr"]
		if !ok {
			return nil, bad
		}
		if string(raw) != "null" {
			var s string
			// An empty cidr is any source, as upstream renders it.
			if json.Unmarshal(raw, &s) != nil || (s != "" && !validCIDR(s)) {
				return nil, bad
			}
			r.CIDR = &s
		}
		var port float64
		if json.Unmarshal(it["port"], &port) != nil || port < 1 || port > 65535 || port != math.Trunc(port) {
			return nil, bad
		}
		r.Port = int(port)
		out = append(out, r)
	}
	return out, nil
}

func validCIDR(s string) bool {
	if _, err := netip.ParsePrefix(s); err == nil {
		return true
	}
	a, err := netip.ParseAddr(s)
	return err == nil && a.Zone() == ""
}

const (
	nftTable     = "inet amphora_table"
	nftPreamble  = "table inet amphora_table {}\ndelete table inet amphora_table\n"
	nftHook      = "    type filter hook input priority filter; policy drop;\n"
	nftICMP      = "      icmp type destination-unreachable accept\n"
	nftICMPv6    = "      icmpv6 type { nd-neighbor-solicit, nd-router-advert, nd-neighbor-advert, packet-too-big, destination-unreachable } accept\n"
	nftDHCP      = "      udp sport 67 udp dport 68 accept\n"
	nftDHCPv6    = "      udp sport 547 udp dport 546 accept\n"
	nftChainOpen = "  chain amphora_chain {\n"
	nftVIPOpen   = "  chain amphora_vip_chain {\n"
)

// renderBaseRules is the drop-all ruleset of an SR-IOV VIP before the
// controller sent rules: only ICMP errors, neighbour discovery and DHCP
// replies pass. The preamble (create, then delete the table) makes loading
// it again replace the table rather than add duplicate rules.
func renderBaseRules() string {
	var b strings.Builder
	b.WriteString(nftPreamble)
	b.WriteString("table " + nftTable + " {\n")
	b.WriteString(nftChainOpen + nftHook + nftICMP + nftICMPv6 + nftDHCP + nftDHCPv6)
	b.WriteString("  }\n}\n")
	return b.String()
}

// renderRules is upstream's VIP ruleset: conntrack, loopback, ICMP and
// DHCP, then everything arriving on the VIP interface goes through one
// accept line per rule; the rest is dropped. Unlike upstream's, untracked
// TCP from the other interfaces passes (see below).
func renderRules(rules []FirewallRule) string {
	var b strings.Builder
	b.WriteString(nftPreamble)
	b.WriteString("table " + nftTable + " {\n")
	b.WriteString(nftChainOpen + nftHook)
	b.WriteString("      ct state vmap { established : accept, related : accept, invalid : drop }\n")
	b.WriteString("      iif lo accept\n")
	b.WriteString("      ip saddr 127.0.0.0/8 drop\n")
	b.WriteString("      ip6 saddr ::1 drop\n")
	b.WriteString(nftICMP + nftICMPv6 + nftDHCP + nftDHCPv6)
	// The LVS masquerade script keeps TCP on member ports out of
	// conntrack: the members' answers to HAProxy arrive untracked there
	// and would meet the drop policy (upstream's ruleset drops them, and
	// such a load balancer answers 503). Member ports keep their Neutron
	// security groups; only the VIP's port relies on these rules, and its
	// TCP stays tracked.
	b.WriteString("      iifname != " + VIPInterface + " meta l4proto tcp ct state untracked accept\n")
	b.WriteString("      iifname " + VIPInterface + " goto amphora_vip_chain\n")
	b.WriteString("  }\n")
	b.WriteString(nftVIPOpen)
	for _, r := range rules {
		b.WriteString("      " + ruleLine(r) + "\n")
	}
	b.WriteString("  }\n}\n")
	return b.String()
}

func ruleLine(r FirewallRule) string {
	prefix := ""
	if r.CIDR != nil && *r.CIDR != "" && *r.CIDR != "0.0.0.0/0" {
		if strings.Contains(strings.SplitN(*r.CIDR, "/", 2)[0], ":") {
			prefix = "ip6 saddr " + *r.CIDR + " "
		} else {
			prefix = "ip saddr " + *r.CIDR + " "
		}
	}
	switch r.Protocol {
	case "vrrp":
		return prefix + "ip protocol 112 accept"
	default:
		return fmt.Sprintf("%s%s dport %d accept", prefix, strings.ToLower(r.Protocol), r.Port)
	}
}

// nftRules keeps the rules file and loads it inside the namespace.
type nftRules struct {
	ns     string
	file   string
	kernel Kernel
}

// load applies the file inside the namespace in one nft transaction.
func (n *nftRules) load(ctx context.Context) error {
	out, err := n.kernel.Run(ctx, n.ns, []string{nftCmd, "-o", "-f", n.file})
	if err != nil {
		return fmt.Errorf("nft -o -f %s: %w: %s", n.file, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// ensureBase makes sure a rules file exists (the drop-all base when none
// does), that it replaces the table when loaded, and loads it.
func (n *nftRules) ensureBase(ctx context.Context) error {
	data, err := os.ReadFile(n.file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := n.write([]byte(renderBaseRules())); err != nil {
			return err
		}
	case err != nil:
		return err
	case !bytes.HasPrefix(data, []byte(nftPreamble)):
		// Written by upstream's agent: its base file adds to an existing
		// table instead of replacing it.
		if err := n.write(append([]byte(nftPreamble), data...)); err != nil {
			return err
		}
	}
	return n.load(ctx)
}

func (n *nftRules) write(data []byte) error {
	if err := os.MkdirAll(filepath.Dir(n.file), 0o755); err != nil {
		return err
	}
	return fsutil.WriteFile(n.file, data, 0o600)
}

// apply installs rules: an empty list keeps (and reloads) what is in
// force. Unlike upstream, rules sent before any base file existed are
// applied instead of being replaced by the drop-all base. When nft refuses
// the new file the previous file is put back, so the file on disk always
// matches the kernel for the next restore.
func (n *nftRules) apply(ctx context.Context, rules []FirewallRule) error {
	if len(rules) == 0 {
		return n.ensureBase(ctx)
	}
	old, oldErr := os.ReadFile(n.file)
	if err := n.write([]byte(renderRules(rules))); err != nil {
		return err
	}
	if err := n.load(ctx); err != nil {
		if oldErr == nil {
			n.write(old)
		} else {
			os.Remove(n.file)
		}
		return err
	}
	return nil
}
