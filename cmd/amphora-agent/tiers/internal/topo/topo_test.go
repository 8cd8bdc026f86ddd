//go:build system

package topo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// TestMain fails the run if anything carrying this process's tag survives
// all the tests' cleanups.
func TestMain(m *testing.M) {
	code := m.Run()
	if os.Geteuid() == 0 {
		left, err := waitNoLeftovers(10 * time.Second)
		if err != nil {
			fmt.Fprintln(os.Stderr, "topo: leftovers check:", err)
			code = 1
		} else if len(left) > 0 {
			fmt.Fprintln(os.Stderr, "topo: left behind after all tests:", left)
			code = 1
		}
	}
	os.Exit(code)
}

func waitNoLeftovers(d time.Duration) ([]string, error) {
	var left []string
	var err error
	testkit.Until(d, func() bool {
		left, err = Leftovers()
		return err != nil || len(left) == 0
	})
	return left, err
}

func nsInode(t testing.TB, path string) string {
	t.Helper()
	s, err := os.Readlink(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func get(t testing.TB, c *http.Client, url string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: body: %v", url, err)
	}
	return resp, string(body)
}

func TestRunExecSysctl(t *testing.T) {
	RequireRoot(t)
	ns := NewNamespace(t, "t")

	runtime.LockOSThread()
	mine := nsInode(t, "/proc/thread-self/ns/net")
	runtime.UnlockOSThread()

	var inside string
	if err := ns.Run(func() error {
		s, err := os.Readlink("/proc/thread-self/ns/net")
		inside = s
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if inside == mine {
		t.Fatalf("Run did not switch namespace: %s", inside)
	}
	var back string
	if err := (*Namespace)(nil).Run(func() error {
		var err error
		back, err = os.Readlink("/proc/thread-self/ns/net")
		return err
	}); err != nil || back != mine {
		t.Fatalf("Run in the default namespace: %s %v, want %s", back, err, mine)
	}

	sentinel := errors.New("sentinel")
	if err := ns.Run(func() error { return sentinel }); !errors.Is(err, sentinel) {
		t.Fatalf("Run error = %v, want sentinel", err)
	}
	if err := ns.Run(func() error { runtime.Goexit(); return nil }); !errors.Is(err, errGoexit) {
		t.Fatalf("Run with Goexit = %v", err)
	}
	func() {
		defer func() {
			if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "boom") {
				t.Fatalf("panic not re-raised: %v", p)
			}
		}()
		_ = ns.Run(func() error { panic("boom") })
	}()

	hostFwd := (*Namespace)(nil).ReadSysctl(t, "net.ipv4.ip_forward")
	ns.Sysctl(t, "net.ipv4.ip_forward", "1")
	if got := ns.ReadSysctl(t, "net.ipv4.ip_forward"); got != "1" {
		t.Fatalf("ip_forward in namespace = %q", got)
	}
	if got := (*Namespace)(nil).ReadSysctl(t, "net.ipv4.ip_forward"); got != hostFwd {
		t.Fatalf("ip_forward in default namespace changed: %q -> %q", hostFwd, got)
	}
	out, err := ns.Exec(context.Background(), "sysctl", "-n", "net.ipv4.ip_forward")
	if err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Fatalf("sysctl via Exec: %q %v", out, err)
	}

	out, err = ns.Exec(context.Background(), "ip", "-o", "link", "show", "lo")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "UP") {
		t.Fatalf("lo not up: %s", out)
	}
	if _, err := ns.Exec(context.Background(), "ip", "link", "show", "nonexistent0"); err == nil ||
		!strings.Contains(err.Error(), "nonexistent0") {
		t.Fatalf("Exec error should carry stderr: %v", err)
	}
}

func TestLinkOptionsAndDualStack(t *testing.T) {
	RequireRoot(t)
	a := NewNamespace(t, "la")
	b := NewNamespace(t, "lb")
	start := time.Now()
	v := Link(t, a, "eth0", []string{"198.51.100.1/24", "2001:db8:ff::1/64"},
		b, "eth7", []string{"198.51.100.2/24", "2001:db8:ff::2/64"},
		LinkOptions{MTU: 1400, AMAC: "fa:16:3e:aa:00:01", BMAC: "fa:16:3e:bb:00:02"})
	// The first link between two fresh namespaces is the case where the
	// kernel would defer carrier processing by up to a second.
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Errorf("Link took %v", d)
	}
	if v.A.Index == v.B.Index {
		t.Errorf("both ends have ifindex %d", v.A.Index)
	}
	if v.A.MAC != "fa:16:3e:aa:00:01" || v.B.MAC != "fa:16:3e:bb:00:02" {
		t.Fatalf("MACs: %+v", v)
	}
	for _, e := range []End{v.A, v.B} {
		h, err := e.NS.netlink()
		if err != nil {
			t.Fatal(err)
		}
		l, err := h.LinkByName(e.Name)
		h.Close()
		if err != nil {
			t.Fatal(err)
		}
		if l.Attrs().MTU != 1400 {
			t.Fatalf("%s MTU %d", e.Name, l.Attrs().MTU)
		}
	}
	b.ServeHTTP(t, ":8080", MemberHandler("b"))
	c := a.HTTPClient(false)
	for _, host := range []string{"198.51.100.2", "[2001:db8:ff::2]"} {
		// The link is usable as soon as Link returns: no stall while the
		// kernel processes carrier or IPv6 comes up (a lost first SYN or
		// neighbour solicitation costs a 1 s retransmission).
		start := time.Now()
		if _, body := get(t, c, "http://"+host+":8080/", nil); body != "b" {
			t.Fatalf("%s: body %q", host, body)
		}
		if d := time.Since(start); d > 900*time.Millisecond {
			t.Errorf("first request to %s took %v", host, d)
		}
	}
	// Nothing of this pair is in the default namespace.
	h, err := (*Namespace)(nil).netlink()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, name := range []string{"eth7"} {
		if _, err := h.LinkByName(name); err == nil {
			t.Fatalf("%s exists in the default namespace", name)
		}
	}
}

func TestHotplugNIC(t *testing.T) {
	RequireRoot(t)
	peer := NewNamespace(t, "hpp")
	amp := NewNamespace(t, "hpa")
	v := HotplugNIC(t, peer, "eth0", []string{"198.51.100.1/24", "2001:db8:2::1/64"}, "")
	if !strings.HasPrefix(v.A.MAC, "fa:16:3e:") {
		t.Fatalf("MAC %s", v.A.MAC)
	}

	// As the agent does: find the NIC by MAC in the default namespace.
	host, err := (*Namespace)(nil).netlink()
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	links, err := host.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var found int
	for _, l := range links {
		if l.Attrs().HardwareAddr.String() != v.A.MAC {
			continue
		}
		found++
		if l.Attrs().Name != v.A.Name || l.Attrs().Flags&net.FlagUp != 0 {
			t.Fatalf("hot-plugged NIC %s: flags %v", l.Attrs().Name, l.Attrs().Flags)
		}
		addrs, err := host.AddrList(l, 0)
		if err != nil || len(addrs) != 0 {
			t.Fatalf("hot-plugged NIC has addresses %v (%v)", addrs, err)
		}
		// Move it, rename it, configure it.
		ns, err := amp.handle()
		if err != nil {
			t.Fatal(err)
		}
		err = host.LinkSetNsFd(l, int(ns))
		ns.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if found != 1 {
		t.Fatalf("%d links with MAC %s in the default namespace", found, v.A.MAC)
	}
	if _, err := host.LinkByName(v.A.Name); err == nil {
		t.Fatal("NIC still in the default namespace after the move")
	}
	ctx := context.Background()
	for _, args := range [][]string{
		{"link", "set", v.A.Name, "name", "eth1"},
		{"addr", "add", "198.51.100.2/24", "dev", "eth1"},
		{"addr", "add", "2001:db8:2::2/64", "dev", "eth1", "nodad"},
		{"link", "set", "eth1", "up"},
	} {
		if out, err := amp.Exec(ctx, "ip", args...); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	peer.ServeHTTP(t, ":80", MemberHandler("peer"))
	c := amp.HTTPClient(true)
	for _, host := range []string{"198.51.100.1", "[2001:db8:2::1]"} {
		if _, body := get(t, c, "http://"+host+"/", nil); body != "peer" {
			t.Fatalf("%s: %q", host, body)
		}
	}
}

func TestLBTopology(t *testing.T) {
	RequireRoot(t)
	lb := LBTopology(t, LBOptions{Members: 3, IPv6: true})
	if len(lb.Members) != 3 {
		t.Fatalf("%d members", len(lb.Members))
	}
	for key, want := range map[string]string{
		"net.ipv4.ip_nonlocal_bind":    "1",
		"net.ipv6.ip_nonlocal_bind":    "1",
		"net.ipv4.ip_forward":          "1",
		"net.ipv6.conf.all.forwarding": "1",
	} {
		if got := lb.Amphora.ReadSysctl(t, key); got != want {
			t.Errorf("%s = %s in amphora namespace", key, got)
		}
	}

	// From inside the amphora namespace every member answers on both
	// families, naming itself and echoing X-Gen untouched.
	c := lb.Amphora.HTTPClient(false)
	for i, m := range lb.Members {
		want := fmt.Sprintf("member-%d", i+1)
		for _, hp := range []string{m.HostPort(), m.HostPort6()} {
			gen := fmt.Sprintf("gen-%d %s", i, hp)
			resp, body := get(t, c, "http://"+hp+"/x", map[string]string{"X-Gen": gen})
			if resp.StatusCode != 200 || body != want || resp.Header.Get("X-Member") != want {
				t.Fatalf("%s: %d %q %v", hp, resp.StatusCode, body, resp.Header)
			}
			if got := resp.Header.Values("X-Gen"); len(got) != 1 || got[0] != gen {
				t.Fatalf("%s: X-Gen %q, want %q", hp, got, gen)
			}
		}
	}
	// Without X-Gen in the request, none in the response.
	if resp, _ := get(t, c, "http://"+lb.Members[0].HostPort()+"/", nil); resp.Header["X-Gen"] != nil {
		t.Fatalf("X-Gen invented: %v", resp.Header)
	}

	// The client reaches the VIP side (a stand-in listener on the VIP)...
	lb.Amphora.ServeHTTP(t, net.JoinHostPort(lb.VIP, "8080"), MemberHandler("vip"))
	lb.Amphora.ServeHTTP(t, net.JoinHostPort(lb.VIP6, "8080"), MemberHandler("vip6"))
	cc := lb.HTTPClient(true)
	if _, body := get(t, cc, lb.URL(8080, "/"), nil); body != "vip" {
		t.Fatalf("VIP: %q", body)
	}
	if _, body := get(t, cc, lb.URL6(8080, "/"), nil); body != "vip6" {
		t.Fatalf("VIP6: %q", body)
	}
	// ...but never a member directly.
	for _, hp := range []string{lb.Members[0].HostPort(), lb.Members[0].HostPort6()} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := lb.Client.DialContext(ctx, "tcp", hp)
		cancel()
		if err == nil {
			conn.Close()
			t.Fatalf("client reached member %s directly", hp)
		}
		if !errors.Is(err, syscall.ENETUNREACH) {
			t.Logf("client -> %s: %v", hp, err)
		}
	}

	// ip_nonlocal_bind: HAProxy may bind an address the namespace lacks.
	for _, addr := range []string{"203.0.113.99:8081", "[2001:db8:1::99]:8081"} {
		l, err := lb.Amphora.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("non-local bind %s: %v", addr, err)
		}
		l.Close()
	}
}

func TestMemberStopStart(t *testing.T) {
	RequireRoot(t)
	lb := LBTopology(t, LBOptions{Members: 2, MemberPort: 8000})
	m1, m2 := lb.Members[0], lb.Members[1]
	c := lb.Amphora.HTTPClient(true)
	url1, url2 := "http://"+m1.HostPort()+"/", "http://"+m2.HostPort()+"/"
	if _, body := get(t, c, url1, nil); body != "member-1" {
		t.Fatal(body)
	}

	if err := m1.Server.Stop(); err != nil {
		t.Fatal(err)
	}
	if m1.Server.Running() {
		t.Fatal("Running after Stop")
	}
	_ = m1.Server.Stop() // idempotent
	resp, err := c.Get(url1)
	if err == nil {
		resp.Body.Close()
		t.Fatal("member-1 answered while stopped")
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("member-1 stopped: %v, want connection refused", err)
	}
	if _, body := get(t, c, url2, nil); body != "member-2" {
		t.Fatal(body)
	}

	if err := m1.Server.Start(); err != nil {
		t.Fatal(err)
	}
	if err := m1.Server.Start(); err == nil {
		t.Fatal("second Start succeeded")
	}
	if _, body := get(t, c, url1, nil); body != "member-1" {
		t.Fatal(body)
	}
	if n := m1.Server.Requests(); n != 2 {
		t.Fatalf("member-1 served %d requests, want 2", n)
	}
	if m1.Server.Addr() != "[::]:8000" {
		t.Fatalf("Addr %s", m1.Server.Addr())
	}
}

// ipNetnsList is `ip netns list` as a set of names.
func ipNetnsList(t testing.TB) map[string]bool {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			set[f[0]] = true
		}
	}
	return set
}

// ipLinks is `ip -o link` of the default namespace as a set of names.
func ipLinks(t testing.TB) map[string]bool {
	t.Helper()
	out, err := exec.Command("ip", "-o", "link").Output()
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.SplitN(line, ": ", 3)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(f[1], "@")
		set[name] = true
	}
	return set
}

func TestCleanupLeavesNothing(t *testing.T) {
	RequireRoot(t)
	nsBefore, linksBefore := ipNetnsList(t), ipLinks(t)
	var names []string // everything the subtest creates

	t.Run("build", func(t *testing.T) {
		lb := LBTopology(t, LBOptions{Members: 2, IPv6: true, AmphoraName: UniqueName("amp")})
		names = append(names, lb.Amphora.Name, lb.Client.Name)
		for _, m := range lb.Members {
			names = append(names, m.NS.Name)
		}

		// A namespace the "agent" creates, with a process left inside.
		ag := AdoptNamespace(t, UniqueName("ag"))
		names = append(names, ag.Name)
		if out, err := exec.Command("ip", "netns", "add", ag.Name).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		cmd := ag.Command(context.Background(), "sleep", "300")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { _ = cmd.Wait() }()

		// A hot-plugged NIC left in the default namespace, and one the
		// agent moved into its namespace.
		v1 := HotplugNIC(t, lb.Members[0].NS, "eth9", nil, "")
		v2 := HotplugNIC(t, lb.Members[1].NS, "eth9", nil, "")
		names = append(names, v1.A.Name, v2.A.Name)
		if out, err := exec.Command("ip", "link", "set", v2.A.Name, "netns", ag.Name).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}

		// A veth end in the default namespace made by Link.
		v3 := Link(t, nil, "", nil, lb.Client, "eth5", []string{"198.51.100.253/30"})
		names = append(names, v3.A.Name)

		// Idle keep-alive connections from two namespaces.
		c := lb.Amphora.HTTPClient(true)
		get(t, c, "http://"+lb.Members[0].HostPort()+"/", nil)
		lb.Amphora.ServeHTTP(t, net.JoinHostPort(lb.VIP, "80"), MemberHandler("vip"))
		get(t, lb.HTTPClient(true), lb.URL(80, "/"), nil)

		nsNow, linksNow := ipNetnsList(t), ipLinks(t)
		for _, n := range []string{lb.Amphora.Name, lb.Client.Name, ag.Name} {
			if !nsNow[n] {
				t.Fatalf("namespace %s missing from ip netns list", n)
			}
		}
		if !linksNow[v1.A.Name] || !linksNow[v3.A.Name] || linksNow[v2.A.Name] {
			t.Fatalf("default-namespace links unexpected: %v", linksNow)
		}
	})
	if len(names) == 0 {
		t.Fatal("subtest created nothing")
	}

	// Kernel teardown of a deleted namespace is asynchronous: poll.
	var left []string
	deadline := time.Now().Add(5 * time.Second)
	for {
		left = left[:0]
		nsAfter, linksAfter := ipNetnsList(t), ipLinks(t)
		for _, n := range names {
			if nsAfter[n] {
				left = append(left, "netns "+n)
			}
			if linksAfter[n] {
				left = append(left, "link "+n)
			}
		}
		// Whatever appeared meanwhile must belong to another process.
		for n := range nsAfter {
			if !nsBefore[n] && strings.Contains(n, Tag()) {
				left = append(left, "new netns "+n)
			}
		}
		for n := range linksAfter {
			if !linksBefore[n] && strings.Contains(n, Tag()) {
				left = append(left, "new link "+n)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
	if l, err := Leftovers(); err != nil || len(l) > 0 {
		t.Fatalf("Leftovers: %v %v", l, err)
	}
}
