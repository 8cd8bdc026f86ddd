package netns

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

func TestListLinksRefusesBadNames(t *testing.T) {
	for _, name := range []string{"", ".", "..", "../etc", "a/b"} {
		if _, err := ListLinks(name); err == nil {
			t.Errorf("ListLinks(%q) succeeded", name)
		}
	}
	_, err := ListLinks(fmt.Sprintf("aa-nolinks-%d", os.Getpid()))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing namespace: %v, want fs.ErrNotExist", err)
	}
}

// Each link comes with its MAC, counters and every address it carries,
// and only those.
func TestListLinks(t *testing.T) {
	testkit.RequireRoot(t, needsRoot)
	name := newNamespace(t, "aa-links-")
	h, err := openHandle(name)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	mac, _ := net.ParseMAC("02:00:5e:00:53:05")
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth5", HardwareAddr: mac}, PeerName: "other5"}); err != nil {
		t.Fatal(err)
	}
	eth5, err := h.LinkByName("eth5")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"198.51.100.5/24", "2001:db8::5/64"} {
		addr, _ := netlink.ParseAddr(a)
		if err := h.AddrAdd(eth5, addr); err != nil {
			t.Fatal(err)
		}
	}

	links, err := ListLinks(name)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(links, func(l LinkReport) bool { return l.Name == "eth5" })
	if i < 0 {
		t.Fatalf("no eth5 in %+v", links)
	}
	got := links[i]
	var addrs []string
	for _, ip := range got.Addrs {
		addrs = append(addrs, ip.String())
	}
	slices.Sort(addrs)
	if got.MAC.String() != mac.String() || !got.Counted || !slices.Equal(addrs, []string{"198.51.100.5", "2001:db8::5"}) {
		t.Fatalf("eth5 = %+v (addresses %v)", got, addrs)
	}
	for _, l := range links {
		for _, ip := range l.Addrs {
			if l.Name != "eth5" && slices.Contains(addrs, ip.String()) {
				t.Errorf("%s carries eth5's address %s", l.Name, ip)
			}
		}
	}
}
