//go:build cloud

package cloud_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/cloud"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/vm"
)

// The second load balancer's members: IPv6 addresses of the controller's
// namespace on the IPv6 member network (br-member6).
const (
	v6Member1 = "2001:db8:0:198::10"
	v6Member2 = "2001:db8:0:198::11"
)

// secondLB is a load balancer on the IPv6 VIP subnet, created right after
// the first is ACTIVE so that its create flow (and its amphora's boot)
// runs while the first load balancer's scenarios make their changes: two
// flows at once against two amphorae.
type secondLB struct {
	s       *scene // its own scene: the second load balancer, IPv6 members
	first   string // the first load balancer's id
	created time.Time

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once

	mu     sync.Mutex
	active time.Duration // from the create call to the first poll seeing ACTIVE
	polls  int           // polls while it was being created
	both   int           // of them, polls seeing the first load balancer PENDING_UPDATE
}

// amphoraVMs are the VMs of this scene's load balancer (other load
// balancers' amphorae may run beside it).
func (s *scene) amphoraVMs(t *testing.T) map[string]*vm.VM {
	t.Helper()
	all := s.cp.VMs()
	out := map[string]*vm.VM{}
	for _, a := range amphoraeOf(t, s, s.lb.ID) {
		if v, ok := all[a.ComputeID]; ok {
			out[a.ComputeID] = v
		}
	}
	if len(out) == 0 {
		t.Fatalf("no VM runs for load balancer %s", s.lb.ID)
	}
	return out
}

// memberSubnetID is the subnet the scene's members are added on: its
// own, else the fabric's IPv4 member subnet.
func (s *scene) memberSubnetID() string {
	if s.memberSubnet != "" {
		return s.memberSubnet
	}
	return s.cp.MemberSubnet.ID
}

// startSecondLB asks for a load balancer on the IPv6 VIP subnet through
// REST, as a user's script would (the CLI resolves subnets in Neutron),
// and watches its creation in the background.
func (s *scene) startSecondLB(t *testing.T) *secondLB {
	t.Helper()
	var resp struct {
		LB apiLB `json:"loadbalancer"`
	}
	created := time.Now()
	s.rest(t, "POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"name": "lb-v6", "vip_subnet_id": s.cp.VIP6Subnet.ID}}, &resp)
	b := &secondLB{first: s.lb.ID, created: created, stop: make(chan struct{}), done: make(chan struct{}),
		s: &scene{cp: s.cp, lb: resp.LB, client: s.client, http: map[string]*topo.Server{},
			names: map[string]string{resp.LB.ID: "lb-v6"}, memberSubnet: s.cp.Member6Subnet.ID}}
	t.Logf("second load balancer %s asked for on the IPv6 VIP subnet: VIP %s", resp.LB.ID, resp.LB.VIPAddress)
	go b.watch()
	t.Cleanup(b.halt)
	return b
}

// watch polls both load balancers every second until the second is no
// longer PENDING_CREATE, noting when it became ACTIVE and how often the
// first was being changed (a flow of its own running) meanwhile.
func (b *secondLB) watch() {
	defer close(b.done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		var list struct {
			LBs []apiLB `json:"loadbalancers"`
		}
		if _, err := b.s.cp.API("GET", "/v2/lbaas/loadbalancers", cloudProject, nil, &list); err == nil {
			status := map[string]string{}
			for _, lb := range list.LBs {
				status[lb.ID] = lb.ProvisioningStatus
			}
			mine := status[b.s.lb.ID]
			b.mu.Lock()
			if mine == "PENDING_CREATE" {
				b.polls++
				if status[b.first] == "PENDING_UPDATE" {
					b.both++
				}
			}
			if mine == "ACTIVE" {
				b.active = time.Since(b.created)
			}
			b.mu.Unlock()
			if mine != "" && mine != "PENDING_CREATE" {
				return
			}
		}
		select {
		case <-b.stop:
			return
		case <-tick.C:
		}
	}
}

func (b *secondLB) halt() {
	b.stopOnce.Do(func() { close(b.stop) })
	<-b.done
}

// finish: the second load balancer ACTIVE and ONLINE with its VIP and its
// amphora's VRRP address on the IPv6 VIP subnet (in the amphora's
// namespace too), an HTTP listener, a pool with an HTTP monitor and two
// IPv6 members → members ONLINE and traffic through the IPv6 VIP to both;
// then its cascade delete → its VM, ports and database rows gone.
func (b *secondLB) finish(t *testing.T) {
	s := b.s
	defer b.removeAfterFailure(t)
	beside := time.Since(b.created)
	s.lb = waitLB(t, s.cp, s.lb.ID, "ACTIVE", 20*time.Minute)
	select {
	case <-b.done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the second load balancer's watcher did not see it leave PENDING_CREATE")
	}
	b.mu.Lock()
	active, polls, both := b.active, b.polls, b.both
	b.mu.Unlock()
	t.Logf("second load balancer create → ACTIVE in %.1fs; the first load balancer's scenarios ran beside it for %.1fs; "+
		"%d of %d polls during its creation saw the first PENDING_UPDATE", active.Seconds(), min(active, beside).Seconds(), both, polls)
	if both == 0 {
		t.Errorf("no poll saw the first load balancer being changed while the second was created (%d polls): no two flows at once", polls)
	}
	s.waitOperating(t, "second load balancer", "/v2/lbaas/loadbalancers/"+s.lb.ID, "loadbalancer", "ONLINE")
	amp := b.checkAddresses(t)

	for _, addr := range []string{v6Member1, v6Member2} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := s.cp.NS.Exec(ctx, "ip", "addr", "add", addr+"/64", "dev", "br-member6", "nodad")
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	s.http["v6-member-1"] = s.cp.NS.ServeHTTP(t, net.JoinHostPort(v6Member1, fmt.Sprint(sceneHTTP)), topo.MemberHandler("v6-member-1"))
	s.http["v6-member-2"] = s.cp.NS.ServeHTTP(t, net.JoinHostPort(v6Member2, fmt.Sprint(sceneHTTP)), topo.MemberHandler("v6-member-2"))
	pool := s.serve(t, "l6-http", "HTTP", 80, "HTTP", "--url-path", "/", "--delay", "2", "--timeout", "2",
		"--max-retries", "1", "--max-retries-down", "1")
	ids := map[string]string{}
	for name, addr := range map[string]string{"v6-member-1": v6Member1, "v6-member-2": v6Member2} {
		ids[name] = s.addMember(t, pool, name, addr, sceneHTTP)
	}
	for name, id := range ids {
		s.waitMember(t, pool, id, name, "ONLINE")
	}
	b.checkMemberNIC(t, amp)
	onlyFrom(t, "HTTP through the IPv6 VIP", s.httpAsk(80, "/"), "v6-member-1", "v6-member-2")
	b.cascadeDelete(t, amp, pool, ids)
}

// removeAfterFailure deletes the second load balancer (cascade) when its
// subtest failed before doing so, so the first load balancer's later
// scenarios, which count servers and ports, see only their own.
func (b *secondLB) removeAfterFailure(t *testing.T) {
	if !t.Failed() {
		return
	}
	// Asked again until the API no longer finds it: a load balancer in
	// a PENDING state refuses the delete (409).
	path := "/v2/lbaas/loadbalancers/" + b.s.lb.ID
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		if code, _ := b.s.cp.API("DELETE", path+"?cascade=true", cloudProject, nil, nil); code == 404 {
			t.Logf("after the failure: the second load balancer is deleted")
			return
		}
	}
	t.Logf("after the failure: the second load balancer %s is still there after 5 minutes of cascade deletes", b.s.lb.ID)
}

// checkAddresses: the VIP and the amphora's VRRP address are on the IPv6
// VIP subnet, its management address is IPv4, and the amphora's
// namespace holds both IPv6 addresses. Returns the amphora.
func (b *secondLB) checkAddresses(t *testing.T) apiAmphora {
	s := b.s
	vip6 := netip.MustParsePrefix(cloud.VIP6CIDR)
	in := func(addr string) bool {
		a, err := netip.ParseAddr(addr)
		return err == nil && vip6.Contains(a)
	}
	amps := amphoraeOf(t, s, s.lb.ID)
	if len(amps) != 1 {
		t.Fatalf("the second load balancer has %d amphorae, want 1: %+v", len(amps), amps)
	}
	amp := amps[0]
	t.Logf("second load balancer: VIP %s, amphora %s vrrp_ip %s, management %s", s.lb.VIPAddress, amp.ID, amp.VRRPIP, amp.LBNetworkIP)
	if !in(s.lb.VIPAddress) || !in(amp.VRRPIP) || amp.HAIP != s.lb.VIPAddress {
		t.Errorf("VIP %s, vrrp_ip %s, ha_ip %s: want the VIP and the VRRP address on %s", s.lb.VIPAddress, amp.VRRPIP, amp.HAIP, cloud.VIP6CIDR)
	}
	if a, err := netip.ParseAddr(amp.LBNetworkIP); err != nil || !a.Is4() {
		t.Errorf("management address %q, want the IPv4 management network's", amp.LBNetworkIP)
	}
	for _, p := range s.cp.Fabric.Ports() {
		if p.ID == s.lb.VIPPortID || p.DeviceID == amp.ComputeID && p.NetworkID == s.cp.VIPNet.ID {
			if len(p.FixedIPs) != 1 || p.FixedIPs[0].SubnetID != s.cp.VIP6Subnet.ID {
				t.Errorf("port %s (%s) on the dual-stack VIP network has %+v, want one address on the IPv6 subnet", p.ID, p.Name, p.FixedIPs)
			}
		}
	}
	v := s.amphoraVMs(t)[amp.ComputeID]
	if v == nil {
		t.Fatalf("amphora %s: no VM for server %s", amp.ID, amp.ComputeID)
	}
	out := b.vmAddrs(t, v)
	// The VRRP address has the subnet's prefix; the VIP may be a host
	// address (upstream's agent adds it as one).
	for _, want := range []string{s.lb.VIPAddress + "/", amp.VRRPIP + "/64 "} {
		if !strings.Contains(out, " "+want) {
			t.Errorf("the amphora's namespace lacks %s:\n%s", want, out)
		}
	}
	return amp
}

// vmAddrs lists the IPv6 addresses in the amphora's namespace.
func (b *secondLB) vmAddrs(t *testing.T, v *vm.VM) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, out, err := v.Exec(ctx, "ip -n amphora-haproxy -6 -o addr show")
	if err != nil || code != 0 {
		t.Fatalf("ip addr in the amphora: exit %d, %v: %s", code, err, out)
	}
	return out
}

// checkMemberNIC: the member network was plugged with one port holding
// one address of the IPv6 member subnet, configured in the amphora.
func (b *secondLB) checkMemberNIC(t *testing.T, amp apiAmphora) {
	s := b.s
	var addrs []string
	for _, p := range s.cp.Fabric.Ports() {
		if p.DeviceID == amp.ComputeID && p.NetworkID == s.cp.Member6Net.ID {
			for _, ip := range p.FixedIPs {
				addrs = append(addrs, ip.IPAddress)
				if ip.SubnetID != s.cp.Member6Subnet.ID {
					t.Errorf("member port %s has %+v, want only the IPv6 member subnet", p.ID, p.FixedIPs)
				}
			}
		}
	}
	if len(addrs) != 1 {
		t.Fatalf("the amphora's addresses on the IPv6 member network: %v, want one", addrs)
	}
	out := b.vmAddrs(t, s.amphoraVMs(t)[amp.ComputeID])
	if !strings.Contains(out, " "+addrs[0]+"/64 ") {
		t.Errorf("the amphora's namespace lacks its member address %s/64:\n%s", addrs[0], out)
	}
	t.Logf("amphora's member address %s (MAC-matched NIC hot-plugged)", addrs[0])
}

// lbRows counts the database rows of one load balancer and what hangs off
// it, naming the tables that hold any.
func (b *secondLB) lbRows(t *testing.T, amp apiAmphora, pool string, members map[string]string) string {
	t.Helper()
	id := b.s.lb.ID
	var ms []string
	for _, m := range members {
		ms = append(ms, "'"+m+"'")
	}
	where := map[string]string{
		"load_balancer": "id = '" + id + "'", "vip": "load_balancer_id = '" + id + "'",
		"listener": "load_balancer_id = '" + id + "'", "pool": "load_balancer_id = '" + id + "'",
		"member": "id IN (" + strings.Join(ms, ",") + ")", "health_monitor": "pool_id = '" + pool + "'",
		"amphora": "id = '" + amp.ID + "'", "amphora_health": "amphora_id = '" + amp.ID + "'",
	}
	return b.s.countRows(t, []string{"load_balancer", "vip", "listener", "pool", "member", "health_monitor",
		"amphora", "amphora_health"}, where)
}

// countRows counts the rows of each table matching its condition in
// where, naming the tables that hold any ("pool=1 member=2").
func (s *scene) countRows(t *testing.T, tables []string, where map[string]string) string {
	t.Helper()
	var parts []string
	for _, table := range tables {
		parts = append(parts, fmt.Sprintf("SELECT '%s', COUNT(*) FROM %s WHERE %s", table, table, where[table]))
	}
	out, err := s.cp.SQL(strings.Join(parts, " UNION ALL "))
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[1] != "0" {
			left = append(left, f[0]+"="+f[1])
		}
	}
	return strings.Join(left, " ")
}

// cascadeDelete: the second load balancer's cascade delete → the API no
// longer finds it, its VM and its ports are gone, its listener, pool,
// members and monitor rows at once, and housekeeping purges the rest; the
// first load balancer keeps its own.
func (b *secondLB) cascadeDelete(t *testing.T, amp apiAmphora, pool string, members map[string]string) {
	s := b.s
	if left := b.lbRows(t, amp, pool, members); !strings.Contains(left, "member=2") || !strings.Contains(left, "load_balancer=1") {
		t.Errorf("rows before the delete: %q, want the load balancer and both members", left)
	}
	start := time.Now()
	s.rest(t, "DELETE", "/v2/lbaas/loadbalancers/"+s.lb.ID+"?cascade=true", nil, nil)
	waitLB(t, s.cp, s.lb.ID, "DELETED", 5*time.Minute)
	t.Logf("second load balancer: cascade delete → gone in %.1fs", time.Since(start).Seconds())
	if _, ok := s.cp.VMs()[amp.ComputeID]; ok {
		t.Errorf("the second load balancer's VM %s still runs", amp.ComputeID)
	}
	for _, srv := range s.cp.Fabric.Servers() {
		if srv.ID == amp.ComputeID {
			t.Errorf("server %s still exists (%s)", srv.ID, srv.Status)
		}
	}
	for _, p := range s.cp.Fabric.Ports() {
		for _, ip := range p.FixedIPs {
			if ip.SubnetID == s.cp.VIP6Subnet.ID || ip.SubnetID == s.cp.Member6Subnet.ID {
				t.Errorf("port %s (%s) with %s left after the delete", p.ID, p.Name, ip.IPAddress)
			}
		}
	}
	left := b.lbRows(t, amp, pool, members)
	t.Logf("the second load balancer's rows right after the delete: %q", left)
	for _, table := range []string{"listener", "pool", "member", "health_monitor"} {
		if strings.Contains(" "+left, " "+table+"=") {
			t.Errorf("the cascade delete left rows in %s: %s", table, left)
		}
	}
	purge := time.Now()
	cloud.WaitFor(t, 2*time.Minute, "housekeeping purging the second load balancer and its amphora", func() bool {
		left = b.lbRows(t, amp, pool, members)
		return left == ""
	})
	t.Logf("the second load balancer's rows gone %.1fs after the delete", time.Since(purge).Seconds())
	if n := len(s.cp.VMs()); n != 1 {
		t.Errorf("%d VMs after the second load balancer's delete, want the first's only", n)
	}
}
