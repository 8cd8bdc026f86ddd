package topo

import (
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/vishvananda/netlink"
)

// ifNameMax is the longest interface name Linux accepts (IFNAMSIZ-1).
const ifNameMax = 15

// netnsDir is where `ip netns add` and netns.NewNamed bind-mount named
// namespaces.
const netnsDir = "/run/netns"

var (
	tagOnce sync.Once
	tag     string
	seq     atomic.Uint64
)

// Tag is this test process's share of every generated name: the pid in base
// 36, zero-padded to 5 characters (Linux pids stay below 36^5), followed by
// two random base-36 characters. Pids are unique among the processes running
// at one time, so parallel `go test` processes never generate the same
// name; the random part covers processes that share the network namespaces
// but not the pid namespace. Leftovers uses it to find what this process
// left behind.
func Tag() string {
	tagOnce.Do(func() {
		p := strconv.FormatInt(int64(os.Getpid()), 36)
		if len(p) < 5 {
			p = strings.Repeat("0", 5-len(p)) + p
		}
		tag = p + randBase36(2)
	})
	return tag
}

func randBase36(n int) string {
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	for i := range b {
		b[i] = digits[int(b[i])%len(digits)]
	}
	return string(b)
}

// UniqueName returns prefix followed by Tag and a per-process sequence
// number, e.g. "amp00k3fx91". The result is at most 15 characters (the
// prefix is shortened if needed), so it is valid both as a namespace name
// and as an interface name in the default namespace. Use it to pick the
// namespace name an agent under test is configured with.
func UniqueName(prefix string) string {
	s := Tag() + strconv.FormatUint(seq.Add(1), 36)
	if max := ifNameMax - len(s); len(prefix) > max {
		prefix = prefix[:max]
	}
	return prefix + s
}

// UniqueMAC returns a random unicast MAC in OpenStack's fa:16:3e range (the
// locally administered prefix Neutron uses), for NICs a test hot-plugs.
func UniqueMAC() string {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return fmt.Sprintf("fa:16:3e:%02x:%02x:%02x", b[0], b[1], b[2])
}

// Leftovers lists what carries this process's Tag and still exists: named
// network namespaces ("netns NAME") and links in the process's own network
// namespace ("link NAME"). After every test's cleanup has run it should be
// empty; namespace teardown in the kernel is asynchronous, so poll briefly.
func Leftovers() ([]string, error) {
	var out []string
	entries, err := os.ReadDir(netnsDir)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), Tag()) {
			out = append(out, "netns "+e.Name())
		}
	}
	h, err := (*Namespace)(nil).netlink()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	for _, l := range links {
		if strings.Contains(l.Attrs().Name, Tag()) {
			out = append(out, "link "+l.Attrs().Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// macInUse reports whether a link of h already has the given MAC.
func macInUse(h *netlink.Handle, mac net.HardwareAddr) (bool, error) {
	links, err := h.LinkList()
	if err != nil {
		return false, err
	}
	for _, l := range links {
		if l.Attrs().HardwareAddr.String() == mac.String() {
			return true, nil
		}
	}
	return false, nil
}
