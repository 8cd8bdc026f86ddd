package netns

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// These tests use the real kernel; they need root, which CI has.
const needsRoot = "creates network namespaces and veth pairs"

// uniq returns prefix plus 6 random hex digits: short enough for link
// names (15 characters), unique across parallel test processes.
func uniq(prefix string) string {
	b := make([]byte, 3)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func ipRun(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// mounted reports whether the named namespace is mounted under RunDir.
func mounted(namespace string) bool { return isNamespaceMount(filepath.Join(RunDir, namespace)) }

// newNamespace runs EnsureWith for a unique name and deletes the namespace
// (and with it every link inside) in Cleanup.
func newNamespace(t *testing.T, prefix string) string {
	t.Helper()
	name := uniq(prefix)
	t.Cleanup(func() { exec.Command("ip", "netns", "delete", name).Run() })
	if err := EnsureWith(name, nil); err != nil {
		t.Fatalf("EnsureWith(%s): %v", name, err)
	}
	return name
}

func sysctlIn(t *testing.T, ns, key string) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "sysctl", "-n", key).CombinedOutput()
	if err != nil {
		t.Fatalf("sysctl %s in %s: %v\n%s", key, ns, err, out)
	}
	return strings.Join(strings.Fields(string(out)), " ")
}

func TestEnsureCreatesAndConfigures(t *testing.T) {
	testkit.RequireRoot(t, needsRoot)
	core, logs := observer.New(zap.WarnLevel)
	log := zap.New(core)

	name := uniq("aa-ens-")
	t.Cleanup(func() { exec.Command("ip", "netns", "delete", name).Run() })
	if mounted(name) {
		t.Fatalf("namespace %s exists before the test", name)
	}
	// Twice: the second call finds everything in place.
	for i := range 2 {
		if err := EnsureWith(name, log); err != nil {
			t.Fatalf("EnsureWith #%d: %v", i+1, err)
		}
	}
	if !mounted(name) {
		t.Fatalf("namespace %s missing after EnsureWith", name)
	}
	if !strings.Contains(ipRun(t, "netns", "list"), name) {
		t.Errorf("ip netns list does not show %s", name)
	}
	if out := ipRun(t, "-n", name, "link", "show", "lo"); !strings.Contains(out, "UP") {
		t.Errorf("lo is not up in %s:\n%s", name, out)
	}
	for _, s := range []Sysctl{
		{"net.ipv4.ip_forward", "1"},
		{"net.ipv6.conf.all.forwarding", "1"},
		{"net.ipv4.ip_nonlocal_bind", "1"},
		{"net.ipv6.ip_nonlocal_bind", "1"},
		{"net.ipv4.ip_local_port_range", "1025 65534"},
		{"net.core.somaxconn", "65534"},
	} {
		if got := sysctlIn(t, name, s.Key); got != s.Value {
			t.Errorf("%s = %q in %s, want %q", s.Key, got, name, s.Value)
		}
	}
	// Conntrack sizes are global, set in the initial namespace as upstream's
	// amphora-netns unit does (when the conntrack module is loaded).
	if _, err := os.Stat("/proc/sys/net/netfilter/nf_conntrack_max"); err == nil {
		if got, _ := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_max"); strings.TrimSpace(string(got)) != "125000" {
			t.Errorf("nf_conntrack_max = %q, want 125000", got)
		}
	}
	// The default namespace keeps its own values.
	if out, _ := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); strings.Join(strings.Fields(string(out)), " ") == "1025 65534" {
		t.Log("note: the default namespace already had ip_local_port_range 1025 65534")
	}

	// This kernel has no IPVS: each missing setting is logged at most once
	// even though EnsureWith ran twice (and the warning memory is per process,
	// so another test may have logged it already).
	seen := map[string]int{}
	for _, e := range logs.All() {
		key, _ := e.ContextMap()["sysctl"].(string)
		if key == "" {
			key = e.Message
		}
		seen[key]++
	}
	for k, n := range seen {
		if n > 1 {
			t.Errorf("missing setting %s logged %d times", k, n)
		}
	}
	if _, err := os.Stat("/proc/sys/net/ipv4/vs"); os.IsNotExist(err) {
		t.Logf("kernel without IPVS; warnings: %v", seen)
	}
}

func TestEnsureRejectsBadNames(t *testing.T) {
	for _, n := range []string{"", ".", "..", "a/b"} {
		if err := EnsureWith(n, nil); err == nil {
			t.Errorf("EnsureWith(%q) succeeded", n)
		}
	}
}

// TestAdvertise puts two namespaces on a veth pair. The peer has stale
// neighbour entries with a wrong MAC for both addresses; the gratuitous ARP
// and the unsolicited NA (Override flag) must correct them.
func TestAdvertise(t *testing.T) {
	testkit.RequireRoot(t, needsRoot)
	amp := newNamespace(t, "aa-adv-")
	peer := newNamespace(t, "aa-peer-")
	vAmp, vPeer := uniq("aav"), uniq("aap")
	const mac = "fa:16:3e:00:10:01"
	ipRun(t, "link", "add", vAmp, "address", mac, "type", "veth", "peer", "name", vPeer)
	t.Cleanup(func() { exec.Command("ip", "link", "delete", vAmp).Run() })
	ipRun(t, "link", "set", vAmp, "netns", amp, "name", "eth1")
	ipRun(t, "link", "set", vPeer, "netns", peer, "name", "eth0")
	ipRun(t, "-n", amp, "addr", "add", "198.51.100.10/24", "dev", "eth1")
	ipRun(t, "-n", amp, "addr", "add", "2001:db8:1::10/64", "dev", "eth1", "nodad")
	ipRun(t, "-n", amp, "link", "set", "eth1", "up")
	ipRun(t, "-n", peer, "addr", "add", "198.51.100.20/24", "dev", "eth0")
	ipRun(t, "-n", peer, "addr", "add", "2001:db8:1::20/64", "dev", "eth0", "nodad")
	ipRun(t, "-n", peer, "link", "set", "eth0", "up")
	for _, a := range []string{"198.51.100.10", "2001:db8:1::10"} {
		ipRun(t, "-n", peer, "neigh", "replace", a, "lladdr", "02:00:00:00:00:99", "dev", "eth0", "nud", "stale")
	}

	addrs := []netip.Addr{
		netip.MustParseAddr("198.51.100.10"),
		netip.MustParseAddr("2001:db8:1::10"),
		netip.MustParseAddr("203.0.113.77"), // not in the namespace: skipped
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if err := AdvertiseWith(ctx, amp, addrs, nil); err != nil {
			t.Fatalf("AdvertiseWith: %v", err)
		}
		out := ipRun(t, "-n", peer, "neigh", "show", "dev", "eth0")
		if strings.Count(out, "lladdr "+mac) == 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("peer neighbour table never learned %s for both addresses:\n%s", mac, out)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func TestAdvertiseMissingNamespace(t *testing.T) {
	testkit.RequireRoot(t, needsRoot)
	err := AdvertiseWith(context.Background(), uniq("aa-none-"), []netip.Addr{netip.MustParseAddr("198.51.100.1")}, nil)
	if err == nil {
		t.Fatal("AdvertiseWith in a namespace that does not exist succeeded")
	}
}

func TestGARPFrame(t *testing.T) {
	mac := []byte{0xfa, 0x16, 0x3e, 1, 2, 3}
	got := hex.EncodeToString(garpFrame(mac, netip.MustParseAddr("203.0.113.9")))
	want := "ffffffffffff" + "fa163e010203" + "0806" + "0001" + "0800" + "06" + "04" + "0001" +
		"fa163e010203" + "cb007109" + "ffffffffffff" + "cb007109"
	if got != want {
		t.Errorf("GARP frame\n got %s\nwant %s", got, want)
	}
	na := hex.EncodeToString(naMessage(mac, netip.MustParseAddr("2001:db8::1")))
	wantNA := "88000000" + "a0000000" + "20010db8000000000000000000000001" + "0201" + "fa163e010203"
	if na != wantNA {
		t.Errorf("NA message\n got %s\nwant %s", na, wantNA)
	}
}

// Work done inside a namespace leaves no thread of the process there. The
// main thread matters most: the runtime never ends it (a goroutine that
// exits locked to it wedges it instead), and /proc/<pid>/ns/net, which
// `ip link set ... netns <pid>` and /proc/self/ns/net name, is its
// namespace.
func TestOnThreadInLeavesNoThreadInside(t *testing.T) {
	testkit.RequireRoot(t, needsRoot)
	ns := uniq("aath")
	if err := EnsureWith(ns, zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "delete", ns).Run() })
	own, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		if err := onThreadIn(ns, func() error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if got, err := os.Readlink("/proc/self/task/" + task.Name() + "/ns/net"); err == nil && got != own {
			t.Errorf("thread %s (main thread: %v) is in %s, not in the process's own %s",
				task.Name(), task.Name() == strconv.Itoa(os.Getpid()), got, own)
		}
	}
}
