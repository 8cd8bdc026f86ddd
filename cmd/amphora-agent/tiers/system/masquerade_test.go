//go:build system

package system_test

import (
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/tiersutil"
)

// TestMasqueradeScriptIdempotent runs the packaged LVS masquerade script
// from real interface files: agent restarts and `interface up` on links
// already up leave exactly one set of rules per interface and family;
// `interface down` removes one interface's rules and no other's.
func TestMasqueradeScriptIdempotent(t *testing.T) {
	n := newNetTopology(t)
	n.startWithMasquerade()

	vipBody, memberBody := n.plugBodies(false)
	for path, body := range map[string]string{"/1.0/plug/vip/" + tiersutil.NetVIP: vipBody, "/1.0/plug/network": memberBody} {
		if status, _, out := n.Env.Do("POST", path, []byte(body)); status != 202 {
			t.Fatalf("POST %s = %d %s\n%s", path, status, out, n.Env.Output())
		}
	}

	set := func(family, iface string) []string {
		p := map[string]string{"ip": "ip", "ip6": "ip6"}[family]
		table := map[string]string{"ip": "octavia-ipv4", "ip6": "octavia-ipv6"}[family]
		return []string{
			fmt.Sprintf("%s %s %s-sctp-masq: oifname %q meta l4proto sctp masquerade", family, table, p, iface),
			fmt.Sprintf("%s %s %s-udp-masq: oifname %q meta l4proto udp masquerade", family, table, p, iface),
			fmt.Sprintf("%s %s output: oifname %q meta l4proto tcp notrack", family, table, iface),
			fmt.Sprintf("%s %s prerouting: iifname %q meta l4proto tcp notrack", family, table, iface),
		}
	}
	want := slices.Concat(set("ip", "eth1"), set("ip", "eth2"), set("ip6", "eth1"))
	slices.Sort(want)
	check := func(when string, want []string) {
		t.Helper()
		if got := n.masqueradeRules(t); !slices.Equal(got, want) {
			t.Errorf("%s: masquerade rules\n%s\nwant\n%s", when, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
	check("after plugging", want)

	for i := 1; i <= 3; i++ {
		n.Env.Stop()
		n.Env.Start()
		check(fmt.Sprintf("after agent restart %d", i), want)
	}
	iface := func(args ...string) {
		t.Helper()
		cmd := exec.Command(testenv.Binary(t), append([]string{"interface", "--config-file", n.Env.ConfigPath}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("interface %v: %v\n%s", args, err, out)
		}
	}
	for i := 1; i <= 3; i++ {
		iface("up", "all")
		check(fmt.Sprintf("after interface up all %d", i), want)
	}

	iface("down", "eth2")
	withoutEth2 := slices.Concat(set("ip", "eth1"), set("ip6", "eth1"))
	slices.Sort(withoutEth2)
	check("after interface down eth2", withoutEth2)
	iface("up", "eth2")
	iface("up", "eth2")
	check("after interface up eth2 twice", want)
}

// startWithMasquerade starts the agent in its namespace with the packaged
// LVS masquerade script.
func (n *netTopology) startWithMasquerade() {
	script := filepath.Join(packagingDir(), "lvs-masquerade.sh")
	n.Env.Extra = fmt.Sprintf("\n[amphora_agent]\nnetwork_namespace = %s\nlvs_masquerade_script = %s\n", n.Amp.Name, script)
	n.Env.Start()
}

// masqueradeRules lists the rules of upstream's masquerade tables in the
// agent's namespace as "family table chain: rule", sorted.
func (n *netTopology) masqueradeRules(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", n.Amp.Name, "nft", "list", "ruleset").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list ruleset: %v\n%s", err, out)
	}
	var rules []string
	var table, chain string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0 || f[0] == "}":
		case f[0] == "table" && len(f) >= 3:
			table, chain = f[1]+" "+f[2], ""
		case f[0] == "chain" && len(f) >= 2:
			chain = f[1]
		case f[0] == "type" || f[0] == "policy":
		case strings.Contains(table, "octavia-ipv") && chain != "":
			rules = append(rules, table+" "+chain+": "+strings.Join(f, " "))
		}
	}
	slices.Sort(rules)
	return rules
}

// TestVIPRulesLetTCPMembersAnswer: an SR-IOV VIP's firewall (input policy
// drop) together with the masquerade script, which keeps TCP on member
// ports out of conntrack. The members' answers arrive untracked on the
// member port and must still reach HAProxy (upstream drops them, so such a
// load balancer answers 503), while the VIP keeps only what its rules allow.
func TestVIPRulesLetTCPMembersAnswer(t *testing.T) {
	r := newNetRig(t)
	r.startWithMasquerade()
	vipBody, memberBody := r.plugBodies(true)
	r.Call(t, "POST", "/1.0/plug/vip/"+tiersutil.NetVIP, vipBody, 202)
	r.Call(t, "POST", "/1.0/plug/network", memberBody, 202)
	// The case at hand: TCP untracked on the member port, tracked on the VIP's.
	rules := strings.Join(r.masqueradeRules(t), "\n")
	if !strings.Contains(rules, `prerouting: iifname "eth2" meta l4proto tcp notrack`) || strings.Contains(rules, `iifname "eth1" meta l4proto tcp notrack`) {
		t.Fatalf("masquerade rules are not those of an SR-IOV VIP with a member port:\n%s", rules)
	}
	r.Call(t, "PUT", "/1.0/interface/"+tiersutil.NetVRRP+"/rules", `[{"protocol":"TCP","cidr":null,"port":80}]`, 200)
	r.LoadBalancer(t)
	for _, url := range []string{"http://" + tiersutil.NetVIP + ":80/", "http://[" + tiersutil.NetVIP6 + "]:80/"} {
		if got := r.Get(t, url); got != "member-1" {
			t.Errorf("%s answered %q, want member-1", url, got)
		}
	}
	// The load balancer also listens on 8080, which the rules do not allow.
	r.blocked(t, net.JoinHostPort(tiersutil.NetVIP, "8080"))
	r.blocked(t, net.JoinHostPort(tiersutil.NetVIP6, "8080"))
}

// plugBodies are the controller's plug requests for the topology's VIP
// port (IPv4 VIP plus an IPv6 additional VIP; SR-IOV or not) and member
// port.
func (n *netTopology) plugBodies(vipSRIOV bool) (vip, member string) {
	vip = fmt.Sprintf(`{"subnet_cidr": "203.0.113.0/24", "gateway": "203.0.113.1", "mac_address": %q,
		"vrrp_ip": %q, "host_routes": [],
		"additional_vips": [{"ip_address": %q, "subnet_cidr": "2001:db8:1::/64", "gateway": "2001:db8:1::1", "host_routes": []}],
		"is_sriov": %t}`, n.VIPNIC.A.MAC, tiersutil.NetVRRP, tiersutil.NetVIP6, vipSRIOV)
	member = fmt.Sprintf(`{"mac_address": %q, "fixed_ips": [{"ip_address": %q,
		"subnet_cidr": "198.51.100.0/24", "gateway": null, "host_routes": []}], "is_sriov": false}`, n.MemNIC.A.MAC, tiersutil.NetMemberIP)
	return vip, member
}
