//go:build system

package system_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/fsutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/tiersutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
)

// netTopology is tiersutil's topology with this tier's methods on it.
type netTopology struct{ tiersutil.NetTopology }

func newNetTopology(t *testing.T) netTopology {
	t.Helper()
	return netTopology{tiersutil.NewNetTopology(t)}
}

// netRig is a netTopology whose member serves HTTP and whose agent runs
// a masquerade script that logs its calls.
type netRig struct {
	netTopology
	scripts string // log of the masquerade script
}

func newNetRig(t *testing.T) *netRig {
	t.Helper()
	r := &netRig{netTopology: newNetTopology(t)}
	r.Member.ServeHTTP(t, ":80", topo.MemberHandler("member-1"))

	// The interface files name the LVS masquerade script; this one records
	// its arguments and the namespace it ran in.
	r.scripts = r.Env.Path("masquerade.log")
	script := r.Env.Path("masquerade.sh")
	body := fmt.Sprintf("#!/bin/sh\necho \"$* $(readlink /proc/self/ns/net)\" >> %s\n", r.scripts)
	if err := fsutil.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	// The PCI rescan trigger exists, as on a VM.
	if err := fsutil.WriteFile(r.Env.Path("pci-rescan"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r.Env.Extra = fmt.Sprintf("\n[amphora_agent]\nnetwork_namespace = %s\nlvs_masquerade_script = %s\n", r.Amp.Name, script)
	return r
}

// state is what must survive a reboot: addresses, MTUs, static routes of
// every table, rules and the firewall.
func (r *netRig) state(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, dev := range []string{"eth1", "eth2"} {
		b.WriteString(r.IP(t, "-br", "addr", "show", "dev", dev))
		link := r.IP(t, "-o", "link", "show", "dev", dev)
		b.WriteString(regexp.MustCompile(`mtu \d+`).FindString(link) + "\n")
	}
	b.WriteString(r.IP(t, "-4", "route", "show", "table", "all", "proto", "static"))
	b.WriteString(r.IP(t, "-6", "route", "show", "table", "all", "proto", "static"))
	b.WriteString(r.IP(t, "rule", "show"))
	b.WriteString(r.IP(t, "-6", "rule", "show"))
	b.WriteString(r.nft(t))
	return b.String()
}

func (r *netRig) nft(t *testing.T) string {
	t.Helper()
	out, err := r.Amp.Exec(context.Background(), "nft", "list", "ruleset")
	if err != nil {
		t.Fatalf("%v\nagent output:\n%s", err, r.Env.Output())
	}
	return string(out)
}

// blocked checks that a TCP connection to addr from the client does not
// get through (the firewall drops it).
func (r *netRig) blocked(t *testing.T, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	conn, err := r.Client.DialContext(ctx, "tcp", addr)
	if err == nil {
		conn.Close()
		t.Errorf("connection to %s went through the VIP firewall", addr)
	}
}

// foreignRules are tables some other software owns in the namespace: one
// in the agent's family with a base chain on the input hook, a named set
// and a regular chain, and one with the agent's table name in another
// family.
const foreignRules = `table inet other {
	set blocked {
		type ipv4_addr
		elements = { 192.0.2.200 }
	}
	chain other_in {
		type filter hook input priority 10; policy accept;
		ip saddr @blocked drop
		tcp dport 9999 jump other_helper
	}
	chain other_helper {
		tcp dport 9999 accept
	}
}
table ip amphora_table {
	chain keep {
		udp dport 4789 accept
	}
}
`

// foreignTables loads foreignRules in the namespace and returns how nft
// lists them.
func (r *netRig) foreignTables(t *testing.T) map[string]string {
	t.Helper()
	file := r.Env.Path("foreign.nft")
	if err := fsutil.WriteFile(file, []byte(foreignRules), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := r.Amp.Exec(context.Background(), "nft", "-f", file); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	got := map[string]string{}
	for name, wants := range map[string][]string{
		"inet other":       {"elements = { 192.0.2.200 }", "ip saddr @blocked drop", "jump other_helper", "chain other_helper"},
		"ip amphora_table": {"chain keep", "udp dport 4789 accept"},
	} {
		family, table, _ := strings.Cut(name, " ")
		listing := r.nftTable(t, family, table)
		for _, want := range wants {
			if !strings.Contains(listing, want) {
				t.Fatalf("foreign table %s lacks %q:\n%s", name, want, listing)
			}
		}
		got[name] = listing
	}
	return got
}

// checkForeignTables fails unless the foreign tables are listed as they
// were when loaded.
func (r *netRig) checkForeignTables(t *testing.T, want map[string]string, when string) {
	t.Helper()
	for name, listing := range want {
		family, table, _ := strings.Cut(name, " ")
		out, err := r.Amp.Exec(context.Background(), "nft", "list", "table", family, table)
		if err != nil {
			t.Errorf("%s: foreign table %s is gone: %v", when, name, err)
			continue
		}
		if string(out) != listing {
			t.Errorf("%s: foreign table %s changed:\n%s\nwant\n%s", when, name, out, listing)
		}
	}
}

// nftTable lists one table in the namespace.
func (r *netRig) nftTable(t *testing.T, family, table string) string {
	t.Helper()
	out, err := r.Amp.Exec(context.Background(), "nft", "list", "table", family, table)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func nsInode(t *testing.T, name string) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join("/run/netns", name), &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("net:[%d]", st.Ino)
}

func TestNetworkPlugTrafficRebootRestore(t *testing.T) {
	r := newNetRig(t)
	r.Env.Start()

	// Requirement 1: the agent created the namespace at start, lo up,
	// the amphora's sysctls applied.
	if !r.Amp.Exists() {
		t.Fatalf("agent did not create namespace %s\n%s", r.Amp.Name, r.Env.Output())
	}
	for key, want := range map[string]string{
		"net.ipv4.ip_nonlocal_bind": "1", "net.ipv6.ip_nonlocal_bind": "1",
		"net.ipv4.ip_forward": "1", "net.ipv6.conf.all.forwarding": "1",
	} {
		if got := r.Amp.ReadSysctl(t, key); got != want {
			t.Errorf("%s = %s in the namespace, want %s", key, got, want)
		}
	}
	if out := r.IP(t, "link", "show", "lo"); !strings.Contains(out, "UP") {
		t.Errorf("lo not up:\n%s", out)
	}

	// A MAC that is not there yet: rescan and the retryable 404.
	missing := `{"subnet_cidr": "203.0.113.0/24", "gateway": null, "mac_address": "fa:16:3e:00:00:01"}`
	if got := r.Call(t, "POST", "/1.0/plug/vip/"+tiersutil.NetVIP, missing, 404); got != `{"details":"No suitable network interface found"}` {
		t.Errorf("missing NIC body %s", got)
	}
	if data, _ := os.ReadFile(r.Env.Path("pci-rescan")); string(data) != "1" {
		t.Errorf("PCI rescan file holds %q, want 1", data)
	}

	// Requirement 2: the VIP port, IPv4 VIP + IPv6 additional VIP, host
	// route, MTU.
	vipBody := fmt.Sprintf(`{"subnet_cidr": "203.0.113.0/24", "gateway": "203.0.113.1", "mac_address": %q,
		"vrrp_ip": %q, "mtu": 1450, "host_routes": [{"nexthop": "203.0.113.5", "destination": "192.0.2.0/24"}],
		"additional_vips": [{"ip_address": %q, "subnet_cidr": "2001:db8:1::/64", "gateway": "2001:db8:1::1", "host_routes": []}],
		"is_sriov": false}`, r.VIPNIC.A.MAC, tiersutil.NetVRRP, tiersutil.NetVIP6)
	got := r.Call(t, "POST", "/1.0/plug/vip/"+tiersutil.NetVIP, vipBody, 202)
	if want := `{"message":"OK","details":"VIPs plugged on interface eth1: 203.0.113.10, 2001:0db8:0001:0000:0000:0000:0000:0010"}`; got != want {
		t.Errorf("plug vip = %s\nwant %s", got, want)
	}
	if got := r.Call(t, "POST", "/1.0/plug/vip/"+tiersutil.NetVIP, vipBody, 409); got != `{"message":"Interface already exists"}` {
		t.Errorf("second plug vip = %s", got)
	}

	// Requirement 3: a member port.
	memberBody := fmt.Sprintf(`{"mac_address": %q, "mtu": 1400, "fixed_ips": [{"ip_address": %q,
		"subnet_cidr": "198.51.100.0/24", "gateway": null, "host_routes": []}], "is_sriov": false}`, r.MemNIC.A.MAC, tiersutil.NetMemberIP)
	if got := r.Call(t, "POST", "/1.0/plug/network", memberBody, 202); got != `{"message":"OK","details":"Plugged on interface eth2"}` {
		t.Errorf("plug network = %s", got)
	}
	if got := r.Call(t, "POST", "/1.0/plug/network", memberBody, 202); got != `{"message":"OK","details":"Updated existing interface eth2"}` {
		t.Errorf("plug network again = %s", got)
	}

	// What the kernel holds now.
	eth1 := r.IP(t, "addr", "show", "dev", "eth1")
	for _, want := range []string{"mtu 1450", "inet 203.0.113.4/24", "inet 203.0.113.10/32", "inet6 2001:db8:1::10/128", r.VIPNIC.A.MAC} {
		if !strings.Contains(eth1, want) {
			t.Errorf("eth1 lacks %q:\n%s", want, eth1)
		}
	}
	eth2 := r.IP(t, "addr", "show", "dev", "eth2")
	for _, want := range []string{"mtu 1400", "inet 198.51.100.20/24", r.MemNIC.A.MAC} {
		if !strings.Contains(eth2, want) {
			t.Errorf("eth2 lacks %q:\n%s", want, eth2)
		}
	}
	routes := r.IP(t, "-4", "route", "show", "table", "1") + r.IP(t, "-6", "route", "show", "table", "1") +
		r.IP(t, "-4", "route", "show") + r.IP(t, "-6", "route", "show")
	for _, want := range []string{
		"default via 203.0.113.1 dev eth1 proto static onlink",
		"192.0.2.0/24 via 203.0.113.5 dev eth1 proto static onlink",
		"203.0.113.0/24 dev eth1 proto static scope link src 203.0.113.10",
		"2001:db8:1::/64 dev eth1 proto static src 2001:db8:1::10",
		"default via 2001:db8:1::1 dev eth1 proto static",
	} {
		if !strings.Contains(routes, want) {
			t.Errorf("routes lack %q:\n%s", want, routes)
		}
	}
	rules := r.IP(t, "rule", "show") + r.IP(t, "-6", "rule", "show")
	for _, want := range []string{"from 203.0.113.10 lookup 1", "from 2001:db8:1::10 lookup 1"} {
		if !strings.Contains(rules, want) {
			t.Errorf("rules lack %q:\n%s", want, rules)
		}
	}
	// The default namespace still has no such links.
	if out, _ := exec.Command("ip", "link", "show", r.VIPNIC.A.Name).CombinedOutput(); !strings.Contains(string(out), "does not exist") {
		t.Errorf("the VIP NIC is still in the default namespace: %s", out)
	}
	// The up scripts ran inside the namespace.
	scripts, _ := os.ReadFile(r.scripts)
	inode := nsInode(t, r.Amp.Name)
	for _, want := range []string{"add ipv4 eth1 " + inode, "add ipv6 eth1 " + inode, "add ipv4 eth2 " + inode} {
		if !strings.Contains(string(scripts), want) {
			t.Errorf("masquerade script log lacks %q:\n%s", want, scripts)
		}
	}
	var file map[string]any
	data, err := os.ReadFile(r.Env.Path("interfaces", "eth1.json"))
	if err != nil || json.Unmarshal(data, &file) != nil || file["if_type"] != "vip" {
		t.Errorf("eth1.json: %v %s", err, data)
	}
	if plugged, _ := os.ReadFile(r.Env.Path("lib", "plugged_interfaces")); string(plugged) != r.VIPNIC.A.MAC+" eth1\n"+r.MemNIC.A.MAC+" eth2\n" {
		t.Errorf("plugged_interfaces:\n%s", plugged)
	}

	// Requirement 4: lookups in the namespace only.
	for ip, want := range map[string]string{tiersutil.NetVIP: "eth1", tiersutil.NetVRRP: "eth1", "2001:0db8:0001::0010": "eth1", tiersutil.NetMemberIP: "eth2"} {
		if got := r.Call(t, "GET", "/1.0/interface/"+ip, "", 200); got != `{"message":"OK","interface":"`+want+`"}` {
			t.Errorf("interface %s = %s", ip, got)
		}
	}
	if host := defaultNamespaceAddr(); host != "" {
		r.Call(t, "GET", "/1.0/interface/"+host, "", 404)
	}
	r.Call(t, "GET", "/1.0/interface/xx", "", 400)

	// Requirement 5: the VIP firewall. Tables that are not the agent's
	// (another family's table of the same name included) exist before the
	// first rules arrive; applying rules must leave them exactly as they are.
	foreign := r.foreignTables(t)
	rulesBody := `[{"protocol":"TCP","cidr":"203.0.113.0/24","port":80},{"protocol":"TCP","cidr":"2001:db8:1::/64","port":80},
		{"protocol":"UDP","cidr":null,"port":53},{"protocol":"vrrp","cidr":"203.0.113.5/32","port":112}]`
	if got := r.Call(t, "PUT", "/1.0/interface/"+tiersutil.NetVRRP+"/rules", rulesBody, 200); got != `{"message":"OK"}` {
		t.Errorf("rules = %s", got)
	}
	r.checkForeignTables(t, foreign, "after the first rules")
	// Invalid bodies: upstream's framework 400, byte for byte.
	for _, bad := range []string{`[{"protocol":"tcp","cidr":null,"port":80}]`, `[{"protocol":"TCP","cidr":null,"port":0}]`,
		`{"protocol":"TCP","cidr":null,"port":80}`, `not json`} {
		if got := r.Call(t, "PUT", "/1.0/interface/"+tiersutil.NetVRRP+"/rules", bad, 400); got != `{"error":"400 Bad Request: Invalid rules information","http_code":400}` {
			t.Errorf("rules %s = %s", bad, got)
		}
	}
	r.Call(t, "PUT", "/1.0/interface/192.0.2.99/rules", rulesBody, 404)
	ruleset := r.nft(t)
	ours := r.nftTable(t, "inet", "amphora_table")
	for _, want := range []string{
		"table inet amphora_table", "chain amphora_chain", "type filter hook input priority filter; policy drop;",
		"iifname \"eth1\" goto amphora_vip_chain", "chain amphora_vip_chain",
		"ip saddr 203.0.113.0/24 tcp dport 80 accept", "ip6 saddr 2001:db8:1::/64 tcp dport 80 accept",
		"udp dport 53 accept", "ip saddr 203.0.113.5 ip protocol vrrp accept",
	} {
		if !strings.Contains(ours, want) {
			t.Errorf("nft list table inet amphora_table lacks %q:\n%s", want, ours)
		}
	}
	if st, err := os.Stat(r.Env.Path("lib", "nftables-vip.rules")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("rules file: %v %v", st, err)
	}
	// Other rules replace the agent's table: nothing of the previous
	// rules is left; the foreign tables are untouched.
	r.Call(t, "PUT", "/1.0/interface/"+tiersutil.NetVRRP+"/rules", `[{"protocol":"TCP","cidr":null,"port":8443}]`, 200)
	replaced := r.nftTable(t, "inet", "amphora_table")
	if !strings.Contains(replaced, "tcp dport 8443 accept") {
		t.Errorf("new rules not applied:\n%s", replaced)
	}
	for _, gone := range []string{"tcp dport 80 accept", "udp dport 53 accept", "ip protocol vrrp accept"} {
		if strings.Contains(replaced, gone) {
			t.Errorf("previous rule %q survived the replacement:\n%s", gone, replaced)
		}
	}
	r.checkForeignTables(t, foreign, "after other rules")
	// Sending the first rules again, twice, gives back exactly the first
	// ruleset (replaced, not added to).
	for i := 0; i < 2; i++ {
		r.Call(t, "PUT", "/1.0/interface/"+tiersutil.NetVRRP+"/rules", rulesBody, 200)
		if again := r.nft(t); again != ruleset {
			t.Errorf("ruleset differs when the first rules were applied again (%d):\n%s\nwant\n%s", i+1, again, ruleset)
		}
		r.checkForeignTables(t, foreign, "after the first rules again")
	}
	// The foreign tables go, or the state compared across the reboot
	// below would hold tables nothing restores.
	for _, table := range [][]string{{"inet", "other"}, {"ip", "amphora_table"}} {
		if out, err := r.Amp.Exec(context.Background(), "nft", "delete", "table", table[0], table[1]); err != nil {
			t.Fatalf("%v %s", err, out)
		}
	}
	if got := r.nftTable(t, "inet", "amphora_table"); got != ours {
		t.Errorf("deleting the foreign tables changed ours:\n%s", got)
	}

	// Traffic: client -> VIP -> HAProxy in the namespace -> member.
	hap := r.LoadBalancer(t)
	if got := r.Get(t, "http://"+tiersutil.NetVIP+":80/"); got != "member-1" {
		t.Errorf("IPv4 VIP answered %q", got)
	}
	if got := r.Get(t, "http://["+tiersutil.NetVIP6+"]:80/"); got != "member-1" {
		t.Errorf("IPv6 VIP answered %q", got)
	}
	r.blocked(t, net.JoinHostPort(tiersutil.NetVIP, "8080"))

	// Requirement 6: the subcommand takes eth2 down and up again from its file.
	bin := testenv.Binary(t)
	for _, action := range []string{"down", "up"} {
		out, err := exec.Command(bin, "interface", "--config-file", r.Env.ConfigPath, action, "eth2").CombinedOutput()
		if err != nil {
			t.Fatalf("interface %s eth2: %v\n%s", action, err, out)
		}
		got := r.IP(t, "-br", "addr", "show", "dev", "eth2")
		if action == "down" && (strings.Contains(got, tiersutil.NetMemberIP) || strings.Contains(got, " UP ")) {
			t.Errorf("after interface down: %s", got)
		}
		if action == "up" && !strings.Contains(got, tiersutil.NetMemberIP+"/24") {
			t.Errorf("after interface up: %s", got)
		}
	}
	if out, err := exec.Command(bin, "interface", "--config-file", r.Env.ConfigPath, "up", "eth9").CombinedOutput(); err == nil {
		t.Errorf("interface up eth9 (no file) succeeded: %s", out)
	} else if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Errorf("interface up eth9: %v, want exit status 2", err)
	}
	if got := r.Get(t, "http://"+tiersutil.NetVIP+":80/"); got != "member-1" {
		t.Errorf("after interface down/up the VIP answered %q", got)
	}

	before := r.state(t)
	t.Logf("namespace state before the reboot:\n%s", before)

	// Simulated reboot: the agent and HAProxy stop, the NICs come back in
	// the default namespace, bare (default MTU, no addresses), under their
	// boot names, the namespace is gone. (Moving a veth out first:
	// deleting the namespace would destroy it.) The member NIC comes back
	// late: it waits in a namespace of its own until the agent runs.
	r.Env.Stop()
	hap.Kill()
	pid := strconv.Itoa(os.Getpid())
	hold := topo.NewNamespace(t, "late")
	for dev, to := range map[string]string{"eth1": pid, "eth2": hold.Name} {
		orig := map[string]string{"eth1": r.VIPNIC.A.Name, "eth2": r.MemNIC.A.Name}[dev]
		r.IP(t, "addr", "flush", "dev", dev)
		r.IP(t, "link", "set", "dev", dev, "down")
		r.IP(t, "link", "set", "dev", dev, "mtu", "1500")
		r.IP(t, "link", "set", "dev", dev, "netns", to, "name", orig)
	}
	if out, err := exec.Command("ip", "netns", "delete", r.Amp.Name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns delete: %v %s", err, out)
	}
	testenv.WaitFor(t, 5*time.Second, "the namespace to disappear", func() bool { return !r.Amp.Exists() })

	r.Env.Start()
	if !r.Amp.Exists() {
		t.Fatalf("namespace not recreated\n%s", r.Env.Output())
	}
	if out, err := r.Amp.Exec(context.Background(), "ip", "link", "show", "dev", "eth2"); err == nil {
		t.Fatalf("eth2 is in the namespace before its NIC came back:\n%s", out)
	}
	// The late NIC appears; the agent moves it in and brings it up from
	// its file, with no controller call.
	if out, err := hold.Exec(context.Background(), "ip", "link", "set", "dev", r.MemNIC.A.Name, "netns", pid); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	testenv.WaitFor(t, 20*time.Second, "the late member NIC moved into the namespace", func() bool {
		_, err := r.Amp.Exec(context.Background(), "ip", "link", "show", "dev", "eth2")
		return err == nil
	})
	after := r.state(t)
	for deadline := time.Now().Add(10 * time.Second); after != before && time.Now().Before(deadline); after = r.state(t) {
		time.Sleep(50 * time.Millisecond) // its addresses and routes follow the move
	}
	if after != before {
		t.Errorf("state after the reboot differs\n--- after\n%s\n--- before\n%s\nagent output:\n%s", after, before, r.Env.Output())
	}
	// The agent restores the load balancer on its own, after the network.
	if got := r.Get(t, "http://"+tiersutil.NetVIP+":80/"); got != "member-1" {
		t.Errorf("after the reboot the IPv4 VIP answered %q", got)
	}
	if got := r.Get(t, "http://["+tiersutil.NetVIP6+"]:80/"); got != "member-1" {
		t.Errorf("after the reboot the IPv6 VIP answered %q", got)
	}
	r.blocked(t, net.JoinHostPort(tiersutil.NetVIP, "8080"))
	if t.Failed() {
		t.Logf("agent output:\n%s", r.Env.Output())
	}
}

// defaultNamespaceAddr is a non-loopback address of the test's own
// namespace, to show the lookup never searches there ("" if none).
func defaultNamespaceAddr() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}
