package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/amphora-agent/amphora-agent/agent/config/configtest"
	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/netns"
	"github.com/amphora-agent/amphora-agent/netns/netnstest"
)

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// netAgent is an agent whose network state lives under a temporary
// folder and in namespace ns of kernel k (nil: the real one).
func netAgent(t *testing.T, k netns.Kernel, ns, topology string) (*Agent, string) {
	t.Helper()
	dir := t.TempDir()
	conf := `
[haproxy_amphora]
base_path = ` + filepath.Join(dir, "lib") + `
base_cert_dir = ` + filepath.Join(dir, "lib", "certs") + `
[amphora_agent]
agent_server_cert = ` + filepath.Join(dir, "server.pem") + `
agent_server_ca = ` + filepath.Join(dir, "ca.pem") + `
haproxy_user_group_file = ` + filepath.Join(dir, "lib", "haproxy-default-user-group.conf") + `
agent_server_network_dir = ` + filepath.Join(dir, "interfaces") + `
network_namespace = ` + ns + `
plugged_interfaces_file = ` + filepath.Join(dir, "plugged_interfaces") + `
nftables_rules_file = ` + filepath.Join(dir, "nftables-vip.rules") + `
pci_rescan_file = ` + filepath.Join(dir, "pci-rescan") + `
lvs_masquerade_script = /bin/true
[controller_worker]
loadbalancer_topology = ` + topology + `
`
	cfg := configtest.Load(t, dir, conf)
	return New(Options{Config: cfg, Log: zaptest.NewLogger(t), Runner: fakeRunner{}, Kernel: k}), dir
}

// TestNetworkRefusals: requests refused before anything is touched, and
// lookups in a namespace that does not exist.
func TestNetworkRefusals(t *testing.T) {
	a, _ := netAgent(t, netnstest.NewKernel(), "aa-absent-"+randHex(3), "SINGLE")
	ctx := context.Background()
	check := func(what string, err error, kind fault.Kind, msg string) {
		t.Helper()
		fe, ok := fault.As(err)
		if !ok || fe.Kind != kind || fe.Message != msg {
			t.Errorf("%s: got %v, want kind %d %q", what, err, kind, msg)
		}
	}
	_, err := a.PlugVIP(ctx, "203.0.113.10", []byte(`{"gateway": null}`))
	check("plug vip without keys", err, fault.KindInvalid, "Invalid subnet information")
	_, err = a.PlugVIP(ctx, "nope", []byte(`{"subnet_cidr": "203.0.113.0/24", "gateway": null, "mac_address": "fa:16:3e:00:00:01"}`))
	check("plug vip bad address", err, fault.KindInvalid, "Invalid VIP: 'nope' does not appear to be an IPv4 or IPv6 address")
	_, err = a.PlugNetwork(ctx, []byte(`[]`))
	check("plug network array", err, fault.KindInvalid, "Invalid port information")
	_, err = a.InterfaceFor(ctx, "1.2.3")
	check("interface bad ip", err, fault.KindInvalid, "Invalid IP address")
	_, err = a.InterfaceFor(ctx, "203.0.113.10")
	check("interface without namespace", err, fault.KindNotFound, "Error interface not found for IP address")
	err = a.SetInterfaceRules(ctx, "203.0.113.10", []byte(`[]`))
	check("rules without namespace", err, fault.KindNotFound, "Error interface not found for IP address")
}

// TestPrepareNetworkAndPlugVIP runs the agent's network operations
// against the in-memory kernel; network_system_test.go runs the same
// checks on the real one.
func TestPrepareNetworkAndPlugVIP(t *testing.T) {
	k := netnstest.NewKernel()
	const mac = "fa:16:3e:a9:00:01"
	k.AddLink("", "ens4", mac)
	// A unique name all the same: were the kernel option ever ignored, the
	// test must not touch a namespace of this host that others use.
	checkPrepareAndPlugVIP(t, k, "aa-fake-"+randHex(3), mac)
}

// checkPrepareAndPlugVIP: start-up preparation creates the namespace and
// lo.json, the host NIC with mac is plugged as the VIP, the lookup finds
// it, a second plug conflicts and a plug of an absent MAC is refused.
func checkPrepareAndPlugVIP(t *testing.T, k netns.Kernel, ns, mac string) {
	t.Helper()
	a, dir := netAgent(t, k, ns, "SINGLE")
	ctx := context.Background()
	if err := a.prepareNetwork(ctx); err != nil {
		t.Fatal(err)
	}
	if h, err := k.Open(ns); err != nil {
		t.Fatalf("namespace %s not created: %v", ns, err)
	} else {
		h.Close()
	}
	if _, err := os.Stat(filepath.Join(dir, "interfaces", "lo.json")); err != nil {
		t.Errorf("lo.json: %v", err)
	}

	body := `{"subnet_cidr": "203.0.113.0/24", "gateway": "203.0.113.1", "mac_address": "` + mac + `", "vrrp_ip": "203.0.113.4", "mtu": 1400}`
	details, err := a.PlugVIP(ctx, "203.0.113.10", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if want := "VIPs plugged on interface eth1: 203.0.113.10"; details != want {
		t.Errorf("details %q, want %q", details, want)
	}
	for _, ip := range []string{"203.0.113.10", "203.0.113.4"} {
		if name, err := a.InterfaceFor(ctx, ip); err != nil || name != "eth1" {
			t.Errorf("InterfaceFor(%s) = %q, %v; want eth1", ip, name, err)
		}
	}
	_, err = a.PlugVIP(ctx, "203.0.113.10", []byte(body))
	if fe, ok := fault.As(err); !ok || fe.Kind != fault.KindConflict {
		t.Errorf("second plug: %v, want 409", err)
	}
	plugged, _ := os.ReadFile(filepath.Join(dir, "plugged_interfaces"))
	if string(plugged) != mac+" eth1\n" {
		t.Errorf("plugged_interfaces = %q", plugged)
	}
	if l, err := linkIn(k, ns, "eth1"); err != nil || l.MTU != 1400 || l.MAC.String() != mac || !l.Up {
		t.Errorf("eth1 in %s: %+v, %v; want mtu 1400, %s, up", ns, l, err, mac)
	}
	_, err = a.PlugVIP(ctx, "203.0.113.10", []byte(strings.Replace(body, mac, "fa:16:3e:a9:00:99", 1)))
	if !errors.Is(err, netns.ErrNoInterface) {
		t.Errorf("plug of an absent MAC: %v", err)
	}
}

// linkIn is the link called name inside namespace ns.
func linkIn(k netns.Kernel, ns, name string) (netns.Link, error) {
	h, err := k.Open(ns)
	if err != nil {
		return netns.Link{}, err
	}
	defer h.Close()
	links, err := h.Links()
	if err != nil {
		return netns.Link{}, err
	}
	for _, l := range links {
		if l.Name == name {
			return l, nil
		}
	}
	return netns.Link{}, fmt.Errorf("no link %s in %s", name, ns)
}

// TestLatePortIsAdoptedWhenItAppears: after a reboot a plugged NIC that is
// not back when the agent starts is moved in and brought up from its file
// once it appears, with no controller call; the watch then ends.
func TestLatePortIsAdoptedWhenItAppears(t *testing.T) {
	k := netnstest.NewKernel()
	const mac = "fa:16:3e:a9:00:02"
	k.AddLink("", "ens4", mac)
	ns := "aa-fake-" + randHex(3)
	a, dir := netAgent(t, k, ns, "SINGLE")
	ctx := context.Background()
	if err := a.prepareNetwork(ctx); err != nil {
		t.Fatal(err)
	}
	body := `{"subnet_cidr": "203.0.113.0/24", "gateway": "203.0.113.1", "mac_address": "` + mac + `", "vrrp_ip": "203.0.113.4", "mtu": 1400}`
	if _, err := a.PlugVIP(ctx, "203.0.113.10", []byte(body)); err != nil {
		t.Fatal(err)
	}
	want := k.Dump()

	// The reboot: a kernel without the NIC, for now.
	k2 := netnstest.NewKernel()
	a2 := New(Options{Config: a.Config(), Log: zaptest.NewLogger(t), Runner: fakeRunner{}, Kernel: k2})
	if err := a2.prepareNetwork(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := linkIn(k2, ns, "eth1"); err == nil {
		t.Fatal("eth1 restored before its NIC existed")
	}
	rescan := filepath.Join(dir, "pci-rescan")
	if err := os.WriteFile(rescan, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { a2.watchLatePorts(ctx, time.Minute); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for data, _ := os.ReadFile(rescan); string(data) != "1"; data, _ = os.ReadFile(rescan) {
		if time.Now().After(deadline) {
			t.Fatal("no PCI rescan asked for while the NIC was missing")
		}
		time.Sleep(10 * time.Millisecond)
	}
	k2.AddLink("", "ens4", mac)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not end once the NIC appeared")
	}
	if got := k2.Dump(); got != want {
		t.Errorf("after the late NIC\n%s\nwant (before the reboot)\n%s", got, want)
	}
}

// TestLatePortWatchGivesUp: a NIC that never appears is looked for until
// the limit, not forever.
func TestLatePortWatchGivesUp(t *testing.T) {
	k := netnstest.NewKernel()
	ns := "aa-fake-" + randHex(3)
	a, dir := netAgent(t, k, ns, "SINGLE")
	if err := os.WriteFile(filepath.Join(dir, "plugged_interfaces"), []byte("fa:16:3e:a9:00:03 eth1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := a.prepareNetwork(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { a.watchLatePorts(ctx, 100*time.Millisecond); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch for a NIC that never appears did not end")
	}
}
