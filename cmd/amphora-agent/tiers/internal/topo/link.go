package topo

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// LinkOptions tunes a veth pair. The zero value keeps the kernel defaults.
type LinkOptions struct {
	MTU  int    // MTU of both ends; 0 = kernel default (1500)
	AMAC string // MAC of the a end, e.g. "fa:16:3e:00:00:01"; "" = random
	BMAC string // MAC of the b end; "" = random
}

// End is one end of a veth pair as it was created.
type End struct {
	NS    *Namespace // nil = the test process's own namespace
	Name  string
	Index int
	MAC   string
}

// Veth is a veth pair made by Link or HotplugNIC.
type Veth struct {
	A, B End
}

// Link creates a veth pair with end aIf in namespace a and end bIf in b (nil
// = the test process's own namespace), adds the addresses (CIDR strings such
// as "198.51.100.1/30" or "2001:db8::1/64"; IPv6 ones with IFA_F_NODAD so
// they are usable at once) and brings both ends up. It returns once both
// ends carry traffic: operationally up, and IPv6 answering neighbour
// solicitations for the addresses. Ends in test namespaces also get
// accept_dad=0, so their link-local address is never tentative (keepalived
// sends IPv6 VRRP from it). Each end is created directly in its namespace,
// so no end ever sits in the default namespace unless asked. An empty name
// gets UniqueName("tp"); a name given for an end in the default namespace
// must be unique across processes (use UniqueName). The pair is deleted in
// t.Cleanup; pairs whose ends are both in test namespaces also die with
// them.
func Link(t testing.TB, a *Namespace, aIf string, aAddrs []string, b *Namespace, bIf string, bAddrs []string, opts ...LinkOptions) *Veth {
	t.Helper()
	var o LinkOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	v := createVeth(t, a, aIf, o.AMAC, b, bIf, o.BMAC, o.MTU)
	configure(t, &v.A, aAddrs, true)
	configure(t, &v.B, bAddrs, true)
	for _, w := range []struct {
		e     *End
		addrs []string
	}{{&v.A, aAddrs}, {&v.B, bAddrs}} {
		if err := w.e.waitReady(w.addrs, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// waitReady waits until the end is operationally up (carrier processed,
// queue active) and IPv6 listens on the solicited-node group of each of its
// IPv6 addresses (before that, neighbour solicitations for them go
// unanswered and the first connection stalls for a second).
func (e *End) waitReady(addrs []string, timeout time.Duration) error {
	var groups []string
	for _, s := range addrs {
		a, err := netlink.ParseAddr(s)
		if err != nil || a.IP.To4() != nil {
			continue
		}
		ip := a.IP.To16()
		groups = append(groups, fmt.Sprintf("ff0200000000000000000001ff%02x%02x%02x", ip[13], ip[14], ip[15]))
	}
	h, err := e.NS.netlink()
	if err != nil {
		return err
	}
	defer h.Close()
	deadline := time.Now().Add(timeout)
	for {
		state, missing := "", ""
		l, err := h.LinkByIndex(e.Index)
		if err != nil {
			return fmt.Errorf("%s in %s: %w", e.Name, e.NS.String(), err)
		}
		if s := l.Attrs().OperState; s != netlink.OperUp {
			state = s.String()
		} else if len(groups) > 0 {
			missing, err = e.missingGroups(groups)
			if err != nil {
				return err
			}
		}
		if state == "" && missing == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s in %s not ready after %v: operstate %q, IPv6 groups not joined: %s",
				e.Name, e.NS.String(), timeout, state, missing)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// missingGroups returns those of the multicast groups (igmp6 hex form) the
// end has not joined.
func (e *End) missingGroups(groups []string) (string, error) {
	var table []byte
	err := e.NS.Run(func() error {
		var err error
		table, err = os.ReadFile("/proc/thread-self/net/igmp6")
		return err
	})
	if err != nil {
		return "", err
	}
	joined := map[string]bool{}
	for _, line := range strings.Split(string(table), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[1] == e.Name {
			joined[f[2]] = true
		}
	}
	var missing []string
	for _, g := range groups {
		if !joined[g] {
			missing = append(missing, g)
		}
	}
	return strings.Join(missing, " "), nil
}

// HotplugNIC creates a veth pair whose peer end (peerIf in peer, configured
// with peerAddrs and up) is reachable, and whose other end A stays in the
// test process's own namespace, DOWN, without addresses, with the given MAC
// ("" = UniqueMAC()) and a generated unique name (v.A.Name) - a NIC Nova
// just hot-plugged, for the agent's plug tests to find by MAC, move into its
// namespace, rename and configure. A MAC already used by a link in the
// default namespace fails the test: the agent could pick the wrong NIC. The
// pair is deleted in t.Cleanup wherever the agent moved end A.
func HotplugNIC(t testing.TB, peer *Namespace, peerIf string, peerAddrs []string, mac string, opts ...LinkOptions) *Veth {
	t.Helper()
	var o LinkOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	h, err := (*Namespace)(nil).netlink()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for attempt := 0; ; attempt++ {
		pick := mac
		if pick == "" {
			pick = UniqueMAC()
		}
		hw, err := net.ParseMAC(pick)
		if err != nil {
			t.Fatalf("hot-plug NIC MAC %q: %v", pick, err)
		}
		used, err := macInUse(h, hw)
		if err != nil {
			t.Fatalf("list links: %v", err)
		}
		if !used {
			mac = pick
			break
		}
		if mac != "" || attempt > 10 {
			t.Fatalf("hot-plug NIC MAC %s is already used by a link in the default namespace", pick)
		}
	}
	v := createVeth(t, nil, UniqueName("hp"), mac, peer, peerIf, o.BMAC, o.MTU)
	configure(t, &v.B, peerAddrs, true)
	return v
}

func parseMAC(t testing.TB, s string) net.HardwareAddr {
	t.Helper()
	if s == "" {
		return nil
	}
	hw, err := net.ParseMAC(s)
	if err != nil {
		t.Fatalf("MAC %q: %v", s, err)
	}
	return hw
}

// createVeth creates the pair with each end directly in its namespace and
// registers its deletion.
func createVeth(t testing.TB, a *Namespace, aIf, aMAC string, b *Namespace, bIf, bMAC string, mtu int) *Veth {
	t.Helper()
	if aIf == "" {
		aIf = UniqueName("tp")
	}
	if bIf == "" {
		bIf = UniqueName("tp")
	}
	for _, name := range []string{aIf, bIf} {
		if len(name) > ifNameMax {
			t.Fatalf("interface name %q is longer than %d characters", name, ifNameMax)
		}
	}
	if a == b && aIf == bIf {
		t.Fatalf("both ends of a veth pair in namespace %s are named %s", a.String(), aIf)
	}
	v := &Veth{A: End{NS: a, Name: aIf}, B: End{NS: b, Name: bIf}}
	// The kernel delays a veth's carrier-on processing by up to a second
	// (linkwatch) unless the event is "urgent", which for a veth means its
	// ifindex differs from its peer's. Fresh namespaces number their links
	// alike (lo 1, then 2, ...), so the first link between two of them
	// would get 2 on both ends and carry no traffic (IPv4 packets dropped
	// on the not yet activated queue, IPv6 neighbour solicitations ignored)
	// for up to a second. So the end in a test namespace is created as the
	// main link with a random high ifindex; the peer gets the next free one.
	main, peer := &v.A, &v.B
	mainMAC, peerMAC := aMAC, bMAC
	if main.NS == nil && peer.NS != nil {
		main, peer = peer, main
		mainMAC, peerMAC = peerMAC, mainMAC
	}
	nsMain, err := main.NS.handle()
	if err != nil {
		t.Fatal(err)
	}
	defer nsMain.Close()
	nsPeer, err := peer.NS.handle()
	if err != nil {
		t.Fatal(err)
	}
	defer nsPeer.Close()
	h, err := (*Namespace)(nil).netlink()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()

	t.Cleanup(func() { v.destroy(t) })
	for attempt := 0; ; attempt++ {
		veth := &netlink.Veth{
			LinkAttrs: netlink.LinkAttrs{
				Name:         main.Name,
				MTU:          mtu,
				HardwareAddr: parseMAC(t, mainMAC),
				Namespace:    netlink.NsFd(nsMain),
				TxQLen:       -1,
			},
			PeerName:         peer.Name,
			PeerHardwareAddr: parseMAC(t, peerMAC),
			PeerNamespace:    netlink.NsFd(nsPeer),
			PeerTxQLen:       -1,
		}
		if main.NS != nil {
			veth.Index = randIndex()
		}
		err := h.LinkAdd(veth)
		if errors.Is(err, unix.EBUSY) && veth.Index != 0 && attempt < 10 {
			continue // that ifindex is taken in the namespace
		}
		if err != nil {
			t.Fatalf("create veth %s(%s) <-> %s(%s): %v", aIf, a.String(), bIf, b.String(), err)
		}
		if err := main.lookup(); err != nil {
			t.Fatal(err)
		}
		if err := peer.lookup(); err != nil {
			t.Fatal(err)
		}
		if main.Index != peer.Index || attempt >= 10 {
			break
		}
		// Same ifindex on both ends after all: delete and retry.
		if _, err := main.delete(); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// randIndex picks an ifindex far above what a test namespace uses.
func randIndex() int {
	var b [2]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return 1000 + (int(b[0])<<8 | int(b[1])) // 1000..66535
}

// lookup fills in Index and MAC.
func (e *End) lookup() error {
	h, err := e.NS.netlink()
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(e.Name)
	if err != nil {
		return fmt.Errorf("veth end %s in %s: %w", e.Name, e.NS.String(), err)
	}
	e.Index = l.Attrs().Index
	e.MAC = l.Attrs().HardwareAddr.String()
	return nil
}

// configure adds addresses to an end and optionally brings it up.
func configure(t testing.TB, e *End, addrs []string, up bool) {
	t.Helper()
	h, err := e.NS.netlink()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByIndex(e.Index)
	if err != nil {
		t.Fatalf("%s in %s: %v", e.Name, e.NS.String(), err)
	}
	for _, s := range addrs {
		a, err := netlink.ParseAddr(s)
		if err != nil {
			t.Fatalf("address %q for %s: %v", s, e.Name, err)
		}
		if a.IP.To4() == nil {
			a.Flags |= unix.IFA_F_NODAD
		}
		if err := h.AddrAdd(l, a); err != nil {
			t.Fatalf("add %s to %s in %s: %v", s, e.Name, e.NS.String(), err)
		}
	}
	if up {
		// Without this the link-local address stays tentative for about a
		// second after the link comes up, and until then the kernel sends
		// no neighbour solicitation from this end: the first IPv6
		// connection through it would stall 1-2 s. The test process's own
		// namespace is left alone.
		if e.NS != nil {
			err := e.NS.Run(func() error {
				return os.WriteFile(sysctlPath("net/ipv6/conf/"+e.Name+"/accept_dad"), []byte("0"), 0o644)
			})
			if err != nil && !errors.Is(err, os.ErrNotExist) { // no IPv6 in the kernel
				t.Fatalf("disable DAD on %s in %s: %v", e.Name, e.NS.String(), err)
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatalf("bring %s up in %s: %v", e.Name, e.NS.String(), err)
		}
	}
}

// destroy deletes the pair through whichever end is still where it was
// created (deleting one end of a veth deletes both). An end that the agent
// moved elsewhere is found through its peer; ends inside deleted
// namespaces are already gone.
func (v *Veth) destroy(t testing.TB) {
	for _, e := range []End{v.A, v.B} {
		if e.Index == 0 || !e.NS.Exists() {
			continue
		}
		gone, err := e.delete()
		if err != nil {
			t.Errorf("topo: delete veth %s in %s: %v", e.Name, e.NS.String(), err)
		}
		if gone {
			return
		}
	}
}

// delete removes the end if the link at its index is still this veth (same
// MAC); gone reports whether the pair is deleted now.
func (e End) delete() (gone bool, err error) {
	h, err := e.NS.netlink()
	if err != nil {
		return false, err
	}
	defer h.Close()
	l, err := h.LinkByIndex(e.Index)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
			return false, nil
		}
		return false, err
	}
	if l.Type() != "veth" || l.Attrs().HardwareAddr.String() != e.MAC {
		return false, nil
	}
	if err := h.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
		return false, err
	}
	return true, nil
}
