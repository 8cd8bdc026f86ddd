//go:build cloud

package cloud_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/cloud"
)

// failoverHeartbeatTimeout is [health_manager] heartbeat_timeout for
// TestCloudFailoverNoop: short, so a heartbeat row goes stale quickly.
const failoverHeartbeatTimeout = 10 * time.Second

// apiAmphora is an amphora as GET /v2/octavia/amphorae shows it.
type apiAmphora struct {
	ID          string `json:"id"`
	LBID        string `json:"loadbalancer_id"`
	ComputeID   string `json:"compute_id"`
	LBNetworkIP string `json:"lb_network_ip"`
	Status      string `json:"status"`
	Role        string `json:"role"`
	VRRPIP      string `json:"vrrp_ip"`
	HAIP        string `json:"ha_ip"`
	VRRPPortID  string `json:"vrrp_port_id"`
	HAPortID    string `json:"ha_port_id"`
}

// amphoraeOf lists the load balancer's amphorae that are not DELETED,
// ordered by role.
func amphoraeOf(t *testing.T, s *scene, lbID string) []apiAmphora {
	t.Helper()
	var got struct {
		Amphorae []apiAmphora `json:"amphorae"`
	}
	s.rest(t, "GET", "/v2/octavia/amphorae?loadbalancer_id="+lbID, nil, &got)
	var out []apiAmphora
	for _, a := range got.Amphorae {
		if a.Status != "DELETED" {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b apiAmphora) int { return strings.Compare(a.Role, b.Role) })
	return out
}

// driverCalls is the fabric's call log since from, with repeats of one
// call in a row counted ("network/get_port×3").
func driverCalls(cp *cloud.ControlPlane, from int) string {
	calls := cp.Fabric.Calls()[from:]
	var out []string
	for i := 0; i < len(calls); {
		j := i
		for j < len(calls) && calls[j] == calls[i] {
			j++
		}
		if j-i > 1 {
			out = append(out, fmt.Sprintf("%s×%d", calls[i], j-i))
		} else {
			out = append(out, calls[i])
		}
		i = j
	}
	return strings.Join(out, " ")
}

// checkAmphorae asserts what the API and the fabric hold for the load
// balancer's amphorae: roles as want (sorted), each ALLOCATED on a server
// that exists, its VRRP port on the VIP network, bound to that server,
// ACTIVE, with the VIP as allowed address; with two, both servers in one
// anti-affinity server group.
func checkAmphorae(t *testing.T, cp *cloud.ControlPlane, amps []apiAmphora, lb apiLB, want ...string) {
	t.Helper()
	var roles []string
	for _, a := range amps {
		roles = append(roles, a.Role)
	}
	if !slices.Equal(roles, want) {
		t.Fatalf("amphorae roles %v, want %v: %+v", roles, want, amps)
	}
	servers := map[string]cloud.Server{}
	for _, s := range cp.Fabric.Servers() {
		servers[s.ID] = s
	}
	ports := map[string]cloud.Port{}
	for _, p := range cp.Fabric.Ports() {
		ports[p.ID] = p
	}
	groups := map[string]bool{}
	for _, a := range amps {
		s, ok := servers[a.ComputeID]
		if !ok || a.Status != "ALLOCATED" {
			t.Errorf("amphora %s (%s): status %s, server %s exists %v", a.ID, a.Role, a.Status, a.ComputeID, ok)
			continue
		}
		groups[s.ServerGroupID] = true
		p, ok := ports[a.VRRPPortID]
		if !ok || p.NetworkID != cp.VIPNet.ID || p.DeviceID != s.ID || p.Status() != "ACTIVE" ||
			!slices.Contains(p.AllowedAddresses, lb.VIPAddress) || p.FixedIPs[0].IPAddress != a.VRRPIP ||
			a.HAIP != lb.VIPAddress || a.HAPortID != lb.VIPPortID {
			t.Errorf("amphora %s (%s): VRRP port %s = %+v (exists %v, status %s), ha %s/%s; want on the VIP network, bound to %s, "+
				"ACTIVE, allowed %s", a.ID, a.Role, a.VRRPPortID, p, ok, p.Status(), a.HAIP, a.HAPortID, s.ID, lb.VIPAddress)
		}
	}
	if len(amps) == 2 {
		var group cloud.ServerGroup
		for _, g := range cp.Fabric.ServerGroups() {
			if groups[g.ID] {
				group = g
			}
		}
		if len(groups) != 1 || group.Policy != "anti-affinity" || len(group.Members) != 2 {
			t.Errorf("the two amphorae's servers are in groups %v; group %+v; want one anti-affinity group of two", groups, group)
		}
	}
}

// checkGone asserts that the replaced amphorae's servers and every port
// they held (management and VRRP) are gone from the fabric.
func checkGone(t *testing.T, cp *cloud.ControlPlane, old []apiAmphora, oldPorts []cloud.Port) {
	t.Helper()
	for _, s := range cp.Fabric.Servers() {
		for _, a := range old {
			if s.ID == a.ComputeID {
				t.Errorf("the replaced amphora %s's server %s is still there", a.ID, s.ID)
			}
		}
	}
	now := map[string]bool{}
	for _, p := range cp.Fabric.Ports() {
		now[p.ID] = true
	}
	for _, p := range oldPorts {
		for _, a := range old {
			if (p.DeviceID == a.ComputeID || p.ID == a.VRRPPortID) && now[p.ID] {
				t.Errorf("the replaced amphora %s's port %s (%s) is still there", a.ID, p.ID, p.Name)
			}
		}
	}
}

// replaced reports which of old are no longer among now.
func replaced(old, now []apiAmphora) []apiAmphora {
	var out []apiAmphora
	for _, o := range old {
		if !slices.ContainsFunc(now, func(n apiAmphora) bool { return n.ID == o.ID }) {
			out = append(out, o)
		}
	}
	return out
}

// TestCloudFailoverNoop runs Octavia's failover flows against the fabric
// with the no-op amphora driver (no VM), after the plumbing check
// (checkPlumbing: the CLI, a create and a delete): an ACTIVE_STANDBY load balancer
// (a flavor asks for the topology; anti-affinity on) with an amphora
// failover and a load balancer failover from the CLI, then the health
// manager's own failover of an amphora whose heartbeat row went stale;
// a SINGLE load balancer's failover. After each: ACTIVE, the amphorae
// replaced as asked, the VIP unchanged, the replaced servers and their
// ports gone; the cascade deletes leave no server, port or server group.
func TestCloudFailoverNoop(t *testing.T) {
	begin := time.Now()
	cp := cloud.Start(t, cloud.Options{AmphoraDriver: "amphora_noop_driver", Extra: fmt.Sprintf(
		"[nova]\nenable_anti_affinity = True\n\n[health_manager]\nheartbeat_timeout = %d\n",
		int(failoverHeartbeatTimeout.Seconds()))})
	t.Logf("control plane up in %.1fs: %s", time.Since(begin).Seconds(), strings.Join(cp.Timings, ", "))
	t.Run("Plumbing", func(t *testing.T) { checkPlumbing(t, cp) })
	s := &scene{cp: cp}

	profile := s.cli(t, "loadbalancer", "flavorprofile", "create", "--name", "fp-active-standby", "--provider", "amphora",
		"--flavor-data", `{"loadbalancer_topology": "ACTIVE_STANDBY"}`, "-f", "value", "-c", "id")
	flavor := s.cli(t, "loadbalancer", "flavor", "create", "--name", "active-standby", "--flavorprofile", profile,
		"--enable", "-f", "value", "-c", "id")

	// flow runs do (which returns the load balancer's id), waits for the
	// load balancer to be ACTIVE again and logs the time and the driver
	// calls made meanwhile.
	flow := func(what string, do func() string) apiLB {
		t.Helper()
		from := len(cp.Fabric.Calls())
		start := time.Now()
		lb := waitLB(t, cp, do(), "ACTIVE", 3*time.Minute)
		t.Logf("%s → ACTIVE in %.1fs; driver calls: %s", what, time.Since(start).Seconds(), driverCalls(cp, from))
		return lb
	}
	// create asks for a load balancer with the given VIP (and flavor).
	create := func(name string, fields map[string]any) string {
		t.Helper()
		var resp struct {
			LB apiLB `json:"loadbalancer"`
		}
		fields["name"] = name
		s.rest(t, "POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": fields}, &resp)
		return resp.LB.ID
	}
	portsNow := cp.Fabric.Ports

	as := flow("ACTIVE_STANDBY create", func() string {
		return create("lb-as", map[string]any{"vip_subnet_id": cp.VIPSubnet.ID, "flavor_id": flavor})
	})
	amps := amphoraeOf(t, s, as.ID)
	checkAmphorae(t, cp, amps, as, "BACKUP", "MASTER")
	vip := as.VIPAddress

	// One amphora (the BACKUP) failed over by an operator.
	old, oldPorts := amps, portsNow()
	as = flow("amphora failover (BACKUP)", func() string {
		s.cli(t, "loadbalancer", "amphora", "failover", amps[0].ID)
		return as.ID
	})
	amps = amphoraeOf(t, s, as.ID)
	checkAmphorae(t, cp, amps, as, "BACKUP", "MASTER")
	if r := replaced(old, amps); len(r) != 1 || r[0].ID != old[0].ID || as.VIPAddress != vip {
		t.Errorf("amphora failover replaced %+v (want only %s), VIP %s (was %s)", r, old[0].ID, as.VIPAddress, vip)
	}
	checkGone(t, cp, replaced(old, amps), oldPorts)

	// The whole load balancer failed over: both amphorae replaced.
	old, oldPorts = amps, portsNow()
	as = flow("load balancer failover (ACTIVE_STANDBY)", func() string {
		s.cli(t, "loadbalancer", "failover", as.ID)
		return as.ID
	})
	amps = amphoraeOf(t, s, as.ID)
	checkAmphorae(t, cp, amps, as, "BACKUP", "MASTER")
	if r := replaced(old, amps); len(r) != 2 || as.VIPAddress != vip {
		t.Errorf("load balancer failover replaced %d of 2 amphorae, VIP %s (was %s)", len(r), as.VIPAddress, vip)
	}
	checkGone(t, cp, replaced(old, amps), oldPorts)

	// The health manager's failover: the MASTER's heartbeat row (the
	// no-op driver's amphorae send none) goes stale after heartbeat_timeout.
	master := amps[1]
	old, oldPorts = amps, portsNow()
	from := len(cp.Fabric.Calls())
	beat := time.Now()
	if _, err := cp.SQL(fmt.Sprintf("INSERT INTO amphora_health (amphora_id, last_update, busy) VALUES ('%s', UTC_TIMESTAMP(), 0)",
		master.ID)); err != nil {
		t.Fatal(err)
	}
	var started time.Duration
	cloud.WaitFor(t, 3*time.Minute, "the health manager failing the stale MASTER over", func() bool {
		lb := waitLBNoError(t, cp, as.ID)
		if started == 0 && lb.ProvisioningStatus == "PENDING_UPDATE" {
			started = time.Since(beat)
		}
		return lb.ProvisioningStatus == "ACTIVE" && len(replaced(old, amphoraeOf(t, s, as.ID))) == 1
	})
	took := time.Since(beat)
	t.Logf("health manager failover: started %.1fs after the last heartbeat (heartbeat_timeout %v), ACTIVE after %.1fs; driver calls: %s",
		started.Seconds(), failoverHeartbeatTimeout, took.Seconds(), driverCalls(cp, from))
	if started != 0 && started < failoverHeartbeatTimeout {
		t.Errorf("failover began %.1fs after the last heartbeat, before heartbeat_timeout %v", started.Seconds(), failoverHeartbeatTimeout)
	}
	amps = amphoraeOf(t, s, as.ID)
	checkAmphorae(t, cp, amps, as, "BACKUP", "MASTER")
	if r := replaced(old, amps); len(r) != 1 || r[0].ID != master.ID {
		t.Errorf("the health manager replaced %+v, want the MASTER %s", r, master.ID)
	}
	checkGone(t, cp, replaced(old, amps), oldPorts)
	if rows, err := cp.SQL("SELECT amphora_id FROM amphora_health"); err != nil || rows != "" {
		t.Errorf("amphora_health after the failover: %q, %v; want the stale row gone", rows, err)
	}

	// A SINGLE load balancer's failover: a new amphora, the same VIP. Its
	// VIP is asked for by network: the API picks the subnet by the
	// network's IP availability.
	from = len(cp.Fabric.Calls())
	single := flow("SINGLE create", func() string { return create("lb-single", map[string]any{"vip_network_id": cp.VIPNet.ID}) })
	if !strings.Contains(driverCalls(cp, from), "network/get_network_ip_availability") ||
		!strings.HasPrefix(single.VIPAddress, "203.0.113.") {
		t.Errorf("a VIP by network: %s, without the API asking for the IP availability", single.VIPAddress)
	}
	old, oldPorts = amphoraeOf(t, s, single.ID), portsNow()
	checkAmphorae(t, cp, old, single, "STANDALONE")
	after := flow("load balancer failover (SINGLE)", func() string {
		s.cli(t, "loadbalancer", "failover", single.ID)
		return single.ID
	})
	amps = amphoraeOf(t, s, single.ID)
	checkAmphorae(t, cp, amps, after, "STANDALONE")
	if len(replaced(old, amps)) != 1 || after.VIPAddress != single.VIPAddress || after.VIPPortID != single.VIPPortID {
		t.Errorf("SINGLE failover: amphorae %+v (before %+v), VIP %s/%s (was %s/%s)", amps, old,
			after.VIPAddress, after.VIPPortID, single.VIPAddress, single.VIPPortID)
	}
	checkGone(t, cp, replaced(old, amps), oldPorts)

	for _, id := range []string{as.ID, single.ID} {
		s.rest(t, "DELETE", "/v2/lbaas/loadbalancers/"+id+"?cascade=true", nil, nil)
		waitLB(t, cp, id, "DELETED", 3*time.Minute)
	}
	if n, p, g := len(cp.Fabric.Servers()), cp.Fabric.Ports(), cp.Fabric.ServerGroups(); n != 0 || len(p) != 0 || len(g) != 0 {
		t.Errorf("after the cascade deletes: %d servers, ports %+v, server groups %+v", n, p, g)
	}
}

// waitLBNoError reads the load balancer once, failing the test on ERROR.
func waitLBNoError(t *testing.T, cp *cloud.ControlPlane, id string) apiLB {
	t.Helper()
	var got struct {
		LB apiLB `json:"loadbalancer"`
	}
	if _, err := cp.API("GET", "/v2/lbaas/loadbalancers/"+id, cloudProject, nil, &got); err != nil {
		t.Fatal(err)
	}
	if got.LB.ProvisioningStatus == "ERROR" {
		t.Fatalf("load balancer %s went to ERROR: %+v", id, got.LB)
	}
	return got.LB
}
