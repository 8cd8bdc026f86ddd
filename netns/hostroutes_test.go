package netns_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	. "github.com/amphora-agent/amphora-agent/netns"
	"github.com/amphora-agent/amphora-agent/netns/netnstest"
)

// observed gives r a Network whose warnings the test can read (they are
// still written to the test's log).
func observed(t *testing.T, r *rig) *observer.ObservedLogs {
	core, logs := observer.New(zap.WarnLevel)
	r.n = NewNetwork(r.cfg, r.k, zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core)))
	NoWaits(r.n)
	return logs
}

// warnings renders the warnings with message msg, in order: a correction
// of a request as "field: sent -> applied", of a file as "interface dst ->
// applied", a refused route as "interface dst via gateway table N".
func warnings(logs *observer.ObservedLogs, msg string) []string {
	var out []string
	for _, e := range logs.FilterMessage(msg).All() {
		m := e.ContextMap()
		switch {
		case m["field"] != nil:
			out = append(out, fmt.Sprintf("%s: %s -> %s", m["field"], m["sent"], m["applied"]))
		case m["dst"] != nil:
			out = append(out, fmt.Sprintf("%s %s -> %s", m["interface"], m["dst"], m["applied"]))
		default:
			r, _ := m["route"].(Route)
			out = append(out, fmt.Sprintf("%s %s via %s table %d", m["interface"], r.Dst, r.Gateway, r.Table))
		}
	}
	return out
}

// checkWarnings compares the warnings with message msg (see warnings).
func checkWarnings(t *testing.T, logs *observer.ObservedLogs, msg string, want ...string) {
	t.Helper()
	if got := warnings(logs, msg); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings %q:\n%s\nwant\n%s", msg, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// checkLines checks that text has every line of present and none of absent.
func checkLines(t *testing.T, what, text string, present, absent []string) {
	t.Helper()
	for _, want := range present {
		if !strings.Contains(text, want) {
			t.Errorf("%s lacks %q:\n%s", what, want, text)
		}
	}
	for _, gone := range absent {
		if strings.Contains(text, gone) {
			t.Errorf("%s has %q:\n%s", what, gone, text)
		}
	}
}

// Messages of the warnings the tests read.
const (
	msgRequestHostBits = "host route destination has host bits set; applying its network instead"
	msgFileHostBits    = "route destination has host bits set; applying its network instead"
	msgRefused         = "the kernel refused a route; skipped"
)

// TestPlugHostRoutesWithHostBits: Neutron accepts a host route such as
// 192.0.2.7/25; plug/vip (primary and additional VIPs), plug/network and
// plug/network with vip_net_info accept it too, write and apply its
// network (the kernel refuses the address with host bits, as upstream's
// bring-up finds), and warn naming the field.
func TestPlugHostRoutesWithHostBits(t *testing.T) {
	r := newRig(t, false)
	logs := observed(t, r)
	ctx := context.Background()
	vip := `{"subnet_cidr": "203.0.113.0/24", "gateway": "203.0.113.1", "mac_address": "` + vipMAC + `",
	 "vrrp_ip": "203.0.113.4", "mtu": 1450,
	 "host_routes": [{"nexthop": "203.0.113.5", "destination": "192.0.2.7/25"}],
	 "additional_vips": [{"ip_address": "2001:db8:0:1::10", "subnet_cidr": "2001:db8:0:1::/64", "gateway": null,
	                      "host_routes": [{"nexthop": "2001:db8:0:1::5", "destination": "2001:db8:99::7/48"}]}]}`
	member := `{"mac_address": "` + memberMAC + `", "mtu": 1400,
	 "fixed_ips": [{"ip_address": "198.51.100.20", "subnet_cidr": "198.51.100.0/24", "gateway": null,
	                "host_routes": [{"nexthop": "198.51.100.254", "destination": "192.0.2.130/25"}]}]}`
	// The VRRP port plugged as a member: its fixed IP is on the VIP subnet
	// and carries that subnet's host routes, as the controller sends it.
	vrrpPort := `{"mac_address": "` + vipMAC + `", "mtu": 1450,
	 "fixed_ips": [{"ip_address": "203.0.113.4", "subnet_cidr": "203.0.113.0/24", "gateway": "203.0.113.1",
	                "host_routes": [{"nexthop": "203.0.113.5", "destination": "192.0.2.7/25"}]}],
	 "vip_net_info": {"subnet_cidr": "203.0.113.0/24", "gateway": "203.0.113.1", "mac_address": "` + vipMAC + `",
	                  "vrrp_ip": "203.0.113.4", "mtu": 1450, "additional_vips": [], "vip": "203.0.113.10",
	                  "host_routes": [{"nexthop": "203.0.113.5", "destination": "192.0.2.7/25"}]}}`
	for _, s := range []step{{"vip", "203.0.113.10", vip}, {"network", "", member}} {
		if got := r.do(ctx, s); !strings.HasPrefix(got, "ok") {
			t.Fatalf("%s: %s", s.op, got)
		}
	}
	routes := []string{
		"route table 254 192.0.2.0/25 via 203.0.113.5 dev eth1 onlink",
		"route table 1 192.0.2.0/25 via 203.0.113.5 dev eth1 onlink",
		"route table 254 2001:db8:99::/48 via 2001:db8:0:1::5 dev eth1 onlink",
		"route table 1 2001:db8:99::/48 via 2001:db8:0:1::5 dev eth1 onlink",
		"route table 254 192.0.2.128/25 via 198.51.100.254 dev eth2 onlink",
	}
	checkLines(t, "kernel", r.k.Dump(), routes, nil)
	checkLines(t, "files", dumpFiles(r.dir),
		[]string{`"dst": "192.0.2.0/25"`, `"dst": "2001:db8:99::/48"`, `"dst": "192.0.2.128/25"`},
		[]string{"192.0.2.7/25", "2001:db8:99::7/48", "192.0.2.130/25"})

	if got := r.do(ctx, step{"network", "", vrrpPort}); got != "ok: Updated existing interface eth1" {
		t.Fatalf("vrrp port: %s", got)
	}
	checkLines(t, "kernel after the VRRP port", r.k.Dump(), routes[:2], nil)
	checkWarnings(t, logs, msgRequestHostBits,
		"host_routes[0].destination: 192.0.2.7/25 -> 192.0.2.0/25",
		"additional_vips[0].host_routes[0].destination: 2001:db8:99::7/48 -> 2001:db8:99::/48",
		"fixed_ips[0].host_routes[0].destination: 192.0.2.130/25 -> 192.0.2.128/25",
		"fixed_ips[0].host_routes[0].destination: 192.0.2.7/25 -> 192.0.2.0/25",
		"host_routes[0].destination: 192.0.2.7/25 -> 192.0.2.0/25")
	checkWarnings(t, logs, msgRefused)
}

// TestPlugIPv4MappedNextHop: Neutron accepts a host route of an IPv6
// subnet whose next hop is written IPv4-mapped; the plug answers 202 with
// the subnet's other routes applied, and the mapped one is skipped with a
// warning (the kernel has no IPv6 neighbour there to send to).
func TestPlugIPv4MappedNextHop(t *testing.T) {
	r := newRig(t, false)
	logs := observed(t, r)
	member := `{"mac_address": "` + memberMAC + `", "mtu": 1400,
	 "fixed_ips": [{"ip_address": "2001:db8:0:2::20", "subnet_cidr": "2001:db8:0:2::/64", "gateway": null,
	                "host_routes": [{"nexthop": "::ffff:198.51.100.1", "destination": "2001:db8:98::/48"},
	                                {"nexthop": "2001:db8:0:2::1", "destination": "2001:db8:99::/48"}]}]}`
	if got := r.do(context.Background(), step{"network", "", member}); !strings.HasPrefix(got, "ok") {
		t.Fatalf("plug: %s", got)
	}
	checkLines(t, "kernel", r.k.Dump(), []string{"route table 254 2001:db8:99::/48 via 2001:db8:0:2::1 dev eth2 onlink"},
		[]string{"2001:db8:98::/48"})
	if n := logs.FilterMessage("skipping an invalid route of an interface file").Len(); n != 1 {
		t.Errorf("%d warnings for the mapped next hop, want 1", n)
	}
}

// refusedBodies are a VIP and a member port whose subnets have a host
// route the kernel takes and one it refuses: a next hop that is the
// amphora's own address (VRRP address, member address) or multicast.
const (
	refusedVIPBody = `{"subnet_cidr": "203.0.113.0/24", "gateway": "203.0.113.1", "mac_address": "` + vipMAC + `",
	 "vrrp_ip": "203.0.113.4", "mtu": 1450,
	 "host_routes": [{"nexthop": "203.0.113.4", "destination": "192.0.2.0/25"},
	                 {"nexthop": "203.0.113.5", "destination": "192.0.2.128/25"}],
	 "additional_vips": [{"ip_address": "2001:db8:0:1::10", "subnet_cidr": "2001:db8:0:1::/64", "gateway": null,
	                      "host_routes": [{"nexthop": "ff02::1", "destination": "2001:db8:99::/48"}]}]}`
	refusedMemberBody = `{"mac_address": "` + memberMAC + `", "mtu": 1400,
	 "fixed_ips": [{"ip_address": "198.51.100.20", "subnet_cidr": "198.51.100.0/24", "gateway": null,
	                "host_routes": [{"nexthop": "198.51.100.20", "destination": "192.0.2.0/26"},
	                                {"nexthop": "198.51.100.254", "destination": "192.0.2.64/26"}]}]}`
)

// TestHostRouteRefusedByKernel: a host route the kernel refuses is skipped
// with a warning, as upstream does: the plugs answer 202 with the other
// routes in place, and `interface up` and the start-up restore succeed
// with the same state.
func TestHostRouteRefusedByKernel(t *testing.T) {
	r := newRig(t, false)
	logs := observed(t, r)
	ctx := context.Background()
	for _, s := range []step{{"vip", "203.0.113.10", refusedVIPBody}, {"network", "", refusedMemberBody}} {
		if got := r.do(ctx, s); !strings.HasPrefix(got, "ok") {
			t.Fatalf("%s: %s", s.op, got)
		}
	}
	state := r.k.Dump()
	checkLines(t, "kernel", state, []string{
		"route table 254 192.0.2.128/25 via 203.0.113.5 dev eth1 onlink",
		"route table 1 192.0.2.128/25 via 203.0.113.5 dev eth1 onlink",
		"route table 254 192.0.2.64/26 via 198.51.100.254 dev eth2 onlink",
		"addr 203.0.113.10/32", "addr 198.51.100.20/24",
	}, []string{"via 203.0.113.4", "via ff02::1", "via 198.51.100.20"})
	checkWarnings(t, logs, msgRefused,
		"eth1 192.0.2.0/25 via 203.0.113.4 table 0",
		"eth1 192.0.2.0/25 via 203.0.113.4 table 1",
		"eth1 2001:db8:99::/48 via ff02::1 table 0",
		"eth1 2001:db8:99::/48 via ff02::1 table 1",
		"eth2 192.0.2.0/26 via 198.51.100.20 table 0")

	// `amphora-agent interface up all` on the plugged interfaces.
	if err := r.n.Interfaces(ctx, "up", "all"); err != nil {
		t.Fatalf("interface up all: %v", err)
	}
	if got := r.k.Dump(); got != state {
		t.Errorf("interface up all changed the state\n--- got\n%s\n--- want\n%s", got, state)
	}

	// A reboot: the NICs are back in the host, the namespace is gone.
	k2 := netnstest.NewKernel()
	k2.AddLink("", "eth0", "fa:16:3e:00:00:99")
	k2.AddLink("", "ens4", vipMAC)
	k2.AddLink("", "ens5", memberMAC)
	k2.AddLink("", "eth3", otherMAC)
	n2 := NewNetwork(r.cfg, k2, zaptest.NewLogger(t))
	NoWaits(n2)
	if err := n2.Restore(ctx); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if got := k2.Dump(); got != state {
		t.Errorf("restored state differs\n--- got\n%s\n--- want\n%s", got, state)
	}
}

// TestUpstreamFileHostRoutes: interface files as upstream's agent writes
// them, host routes verbatim (host bits set, a next hop the kernel
// refuses): the start-up restore and `interface up` apply the networks,
// skip the refused route with a warning, and succeed.
func TestUpstreamFileHostRoutes(t *testing.T) {
	r := newRig(t, false)
	logs := observed(t, r)
	ctx := context.Background()
	dir := r.cfg.NetworkDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	eth1 := `{"name": "eth1", "if_type": "vip", "addresses": [{"address": "203.0.113.4", "prefixlen": 24}, {"address": "203.0.113.10", "prefixlen": 32, "octavia_owned": true}],
	 "routes": [{"dst": "192.0.2.7/25", "gateway": "203.0.113.5", "flags": ["onlink"]},
	            {"dst": "192.0.2.7/25", "gateway": "203.0.113.5", "flags": ["onlink"], "table": 1},
	            {"dst": "192.0.2.128/25", "gateway": "203.0.113.10", "flags": ["onlink"]}],
	 "rules": [{"src": "203.0.113.10", "src_len": 32, "table": 1}], "scripts": {"up": [], "down": []}, "is_sriov": false, "mtu": 1450}`
	if err := os.WriteFile(filepath.Join(dir, "eth1.json"), []byte(eth1), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.cfg.PluggedFile, []byte(vipMAC+" eth1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.n.Restore(ctx); err != nil {
		t.Fatalf("restore: %v", err)
	}
	state := r.k.Dump()
	checkLines(t, "kernel", state, []string{
		"route table 254 192.0.2.0/25 via 203.0.113.5 dev eth1 onlink",
		"route table 1 192.0.2.0/25 via 203.0.113.5 dev eth1 onlink",
		"rule from 203.0.113.10/32 lookup 1",
	}, []string{"192.0.2.128/25"})
	if err := r.n.Interfaces(ctx, "up", "eth1"); err != nil {
		t.Fatalf("interface up eth1: %v", err)
	}
	if got := r.k.Dump(); got != state {
		t.Errorf("interface up eth1 changed the state\n--- got\n%s\n--- want\n%s", got, state)
	}
	// Once at the restore, once at `interface up`: main table, table 1.
	fixed := "eth1 192.0.2.7/25 -> 192.0.2.0/25"
	checkWarnings(t, logs, msgFileHostBits, fixed, fixed, fixed, fixed)
	refused := "eth1 192.0.2.128/25 via 203.0.113.10 table 0"
	checkWarnings(t, logs, msgRefused, refused, refused)
}
