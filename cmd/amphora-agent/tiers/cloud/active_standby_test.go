//go:build cloud

package cloud_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/cloud"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/vm"
)

// heartbeatFresh is how old an amphora_health row may be while its
// amphora is healthy: three of the agent's 10 s heartbeat intervals.
const heartbeatFresh = 30 * time.Second

// TestCloudActiveStandby creates an ACTIVE_STANDBY load balancer (a
// flavor asks for the topology) on two amphora VMs under Octavia's own
// control plane: ACTIVE and ONLINE, two amphorae MASTER and BACKUP whose
// VRRP ports sit on the VIP bridge, exactly one VM holding the VIP (the
// two keepalived instances agree over VRRP), an HTTP listener with an
// HTTP monitor, a UDP listener with a UDP-CONNECT monitor and an SCTP
// listener with an SCTP monitor serving through the VIP, and both
// amphorae's heartbeats keeping their amphora_health rows fresh. Then,
// under steady HTTP, UDP and SCTP traffic through the VIP, an operator's
// amphora failover and load balancer failover (OperatorFailovers), and
// the VIP holder's power loss, the health manager's failover, and the
// other original amphora's power loss (MasterDies); the cascade delete
// removes every VM.
func TestCloudActiveStandby(t *testing.T) {
	// Seven VM boots over the test's life (20-30 minutes) do not fit
	// make test's budget.
	if os.Getenv("CLOUD_ACTIVE_STANDBY") != "1" {
		t.Skip("set CLOUD_ACTIVE_STANDBY=1 to run (seven amphora VM boots, 20-30 minutes)")
	}
	boot := amphoraVMs(t)
	begin := time.Now()
	// Octavia's VRRP check (every 5 s, FAULT after 2 failures) faulted a
	// healthy amphora while HAProxy took 15-18 s to reload on an emulated
	// CPU shared by three VMs, and the VIP flapped; an operator of such
	// slow amphorae allows more failures.
	cp := cloud.Start(t, cloud.Options{VMs: boot,
		Extra: fmt.Sprintf("[nova]\nenable_anti_affinity = True\n\n[health_manager]\nheartbeat_timeout = %d\n"+
			"\n[keepalived_vrrp]\nvrrp_fail_count = %d\n", int(asHeartbeatTimeout.Seconds()), asVRRPFailCount)})
	t.Logf("control plane up in %.1fs: %s", time.Since(begin).Seconds(), strings.Join(cp.Timings, ", "))
	s := newScene(cp)

	profile := s.cli(t, "loadbalancer", "flavorprofile", "create", "--name", "fp-as-vms", "--provider", "amphora",
		"--flavor-data", `{"loadbalancer_topology": "ACTIVE_STANDBY"}`, "-f", "value", "-c", "id")
	flavor := s.cli(t, "loadbalancer", "flavor", "create", "--name", "active-standby-vms", "--flavorprofile", profile,
		"--enable", "-f", "value", "-c", "id")

	created := time.Now()
	var resp struct {
		LB apiLB `json:"loadbalancer"`
	}
	s.rest(t, "POST", "/v2/lbaas/loadbalancers", map[string]any{"loadbalancer": map[string]any{
		"name": "lb-as-vms", "vip_subnet_id": cp.VIPSubnet.ID, "flavor_id": flavor}}, &resp)
	s.lb = waitLB(t, cp, resp.LB.ID, "ACTIVE", 25*time.Minute)
	s.names[s.lb.ID] = "lb"
	t.Logf("ACTIVE_STANDBY create → ACTIVE in %.1fs (%s)", time.Since(created).Seconds(), vm.Accel(boot.Image))
	defer s.logVMState(t)
	if s.lb.OperatingStatus != "ONLINE" {
		t.Errorf("operating status %s after the create, want ONLINE", s.lb.OperatingStatus)
	}

	amps := amphoraeOf(t, s, s.lb.ID)
	checkAmphorae(t, cp, amps, s.lb, "BACKUP", "MASTER")
	if len(amps) != 2 {
		t.FailNow()
	}
	vms := cp.VMs()
	for _, a := range amps {
		v := vms[a.ComputeID]
		if v == nil {
			t.Fatalf("amphora %s (%s): server %s has no VM", a.ID, a.Role, a.ComputeID)
		}
		share := cloud.AgentRequests(v.MustExec(cloud.AgentJournal))
		t.Logf("amphora %s (%s): VRRP %s; the agent's share of the create: %d requests, first to last answer %.1fs",
			a.ID, a.Role, a.VRRPIP, share.Requests, share.Span().Seconds())
	}
	checkVRRPPorts(t, cp, amps)
	// With no listener yet neither holds the VIP: as upstream's agent, the
	// VRRP check script fails while no HAProxy runs, so both keepalived
	// instances stay in FAULT.
	if holders, shows := vipHolders(t, s, amps); len(holders) != 0 {
		t.Logf("before any listener the VIP is held by %d amphorae (upstream's agent: none):\n%s", len(holders), shows)
	} else {
		t.Logf("before any listener no amphora holds the VIP:\n%s", shows)
	}
	checkHeartbeats(t, s, amps)

	s.serveMembers(t, []string{sceneMember1, sceneMember2}, 2, true)
	var holder apiAmphora
	if !t.Run("HTTP", func(t *testing.T) {
		// Checks that tolerate a stalled amphora: with one failure
		// marking a member DOWN (and the server-state file carrying that
		// into the next reload), both members were DOWN for 5 s of a
		// failover flow on an emulated CPU.
		pool := s.serve(t, "l-http", "HTTP", 80, "HTTP", "--url-path", "/", "--delay", "3", "--timeout", "3",
			"--max-retries", "2", "--max-retries-down", "6")
		holder = vipHolder(t, s, amps)
		t.Logf("the VIP %s is held by the %s", s.lb.VIPAddress, holder.Role)
		s.memberPair(t, pool, "", sceneHTTP)
		onlyFrom(t, "HTTP", s.httpAsk(80, "/"), "member-1", "member-2")
	}) {
		t.FailNow()
	}
	t.Run("UDP", func(t *testing.T) { s.lvsListener(t, "UDP", sceneUDP, "UDP-CONNECT", s.udpAsk) })
	t.Run("SCTP", func(t *testing.T) { s.lvsListener(t, "SCTP", sceneSCTP, "SCTP", s.sctpAsk) })

	// Both amphorae got every change: the listeners' configs on both VMs,
	// still one VIP holder, the same one, and both still beating.
	s.checkConfigs(t, amps)
	if again := vipHolder(t, s, amps); again.ID != holder.ID {
		t.Errorf("the VIP moved from the %s to the %s without a failure", holder.Role, again.Role)
	}
	checkHeartbeats(t, s, amphoraeOf(t, s, s.lb.ID))
	s.logTransitions(t)

	t.Run("OperatorFailovers", s.operatorFailovers)
	t.Run("MasterDies", s.masterDies)

	deleted := time.Now()
	s.rest(t, "DELETE", "/v2/lbaas/loadbalancers/"+s.lb.ID+"?cascade=true", nil, nil)
	waitLB(t, cp, s.lb.ID, "DELETED", 5*time.Minute)
	t.Logf("cascade delete → gone in %.1fs", time.Since(deleted).Seconds())
	if n, v := len(cp.Fabric.Servers()), len(cp.VMs()); n != 0 || v != 0 {
		t.Errorf("after the cascade delete: %d servers, %d VMs", n, v)
	}
}

// checkConfigs asserts that each amphora holds the load balancer's
// HAProxy config and the LVS listeners' configs, and that its keepalived
// config names the other amphora's VRRP address (it was told of its
// current peer).
func (s *scene) checkConfigs(t *testing.T, amps []apiAmphora) {
	t.Helper()
	vms := s.cp.VMs()
	for i, a := range amps {
		peer := amps[1-i]
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, out, err := vms[a.ComputeID].Exec(ctx, "ls /var/lib/octavia/"+s.lb.ID+"/haproxy.cfg /var/lib/octavia/lvs/; "+
			"grep -E 'state|priority|unicast_src_ip|"+peer.VRRPIP+"' /var/lib/octavia/vrrp/octavia-keepalived.conf")
		cancel()
		t.Logf("amphora %s (%s):\n%s", a.ID, a.Role, out)
		if err != nil || !strings.Contains(out, "haproxy.cfg") || !strings.Contains(out, ".conf") ||
			!strings.Contains(out, peer.VRRPIP) {
			t.Errorf("amphora %s (%s) lacks the listeners' configs or its keepalived does not name the %s's VRRP "+
				"address %s: %v", a.ID, a.Role, peer.Role, peer.VRRPIP, err)
		}
	}
}

// checkVRRPPorts asserts that each amphora's VRRP port is a NIC of its VM
// on br-vip (the bridge the controller serves the VIP network on), so the
// two keepalived instances reach each other.
func checkVRRPPorts(t *testing.T, cp *cloud.ControlPlane, amps []apiAmphora) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	out, err := cp.NS.Exec(ctx, "bridge", "fdb", "show", "br", "br-vip")
	cancel()
	if err != nil {
		t.Fatalf("bridge fdb: %v: %s", err, out)
	}
	ports := map[string]cloud.Port{}
	for _, p := range cp.Fabric.Ports() {
		ports[p.ID] = p
	}
	for _, a := range amps {
		mac := ports[a.VRRPPortID].MACAddress
		if mac == "" || !strings.Contains(string(out), mac) {
			t.Errorf("amphora %s (%s): its VRRP port's MAC %q was never seen on br-vip:\n%s", a.ID, a.Role, mac, out)
		}
	}
}

// vipHolders lists the amphorae whose VM holds the VIP in its
// amphora-haproxy namespace, and what each VM shows (its addresses there
// and keepalived's last state changes).
func vipHolders(t *testing.T, s *scene, amps []apiAmphora) ([]apiAmphora, string) {
	t.Helper()
	vms := s.cp.VMs()
	var holders []apiAmphora
	var shows string
	for _, a := range amps {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, out, err := vms[a.ComputeID].Exec(ctx, "ip netns exec amphora-haproxy ip -o -4 addr show; "+
			"journalctl -b --no-pager -o cat -t Keepalived_vrrp | grep -E 'Entering|FAULT|check_script' | tail -n 4")
		cancel()
		if err != nil {
			t.Fatalf("amphora %s (%s): %v", a.ID, a.Role, err)
		}
		shows += fmt.Sprintf("%s:\n%s\n", a.Role, out)
		for _, f := range strings.Fields(out) {
			if strings.HasPrefix(f, s.lb.VIPAddress+"/") {
				holders = append(holders, a)
			}
		}
	}
	return holders, shows
}

// vipHolder waits until exactly one of the amphorae's VMs holds the VIP,
// and returns that amphora. Two holders mean the keepalived instances do
// not hear each other.
func vipHolder(t *testing.T, s *scene, amps []apiAmphora) apiAmphora {
	t.Helper()
	var holders []apiAmphora
	var shows string
	defer func() {
		if t.Failed() {
			t.Logf("the amphorae at the failure:\n%s", shows)
		}
	}()
	cloud.WaitFor(t, 2*time.Minute, "exactly one amphora holding the VIP", func() bool {
		holders, shows = vipHolders(t, s, amps)
		return len(holders) == 1
	})
	t.Logf("VIP holder %s; the amphorae:\n%s", holders[0].Role, shows)
	return holders[0]
}

// beat is an amphora_health row: its age and its last_update (Unix s).
type beat struct {
	age     int
	updated float64
}

// heartbeatRows reads amphora_health by amphora id.
func heartbeatRows(t *testing.T, cp *cloud.ControlPlane) map[string]beat {
	t.Helper()
	rows, err := cp.SQL("SELECT amphora_id, TIMESTAMPDIFF(SECOND, last_update, UTC_TIMESTAMP()), " +
		"UNIX_TIMESTAMP(last_update) FROM amphora_health")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]beat{}
	for _, line := range strings.Split(rows, "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			age, _ := strconv.Atoi(f[1])
			updated, _ := strconv.ParseFloat(f[2], 64)
			out[f[0]] = beat{age, updated}
		}
	}
	return out
}

// checkHeartbeats asserts that the health manager keeps a fresh
// amphora_health row for each amphora (the agent's heartbeats reach it),
// that each row moves on between two reads, and that the API still shows
// each amphora ALLOCATED.
func checkHeartbeats(t *testing.T, s *scene, amps []apiAmphora) {
	t.Helper()
	var first, last map[string]beat
	cloud.WaitFor(t, time.Minute, "an amphora_health row for each amphora", func() bool {
		first = heartbeatRows(t, s.cp)
		return !slices.ContainsFunc(amps, func(a apiAmphora) bool { return first[a.ID].updated == 0 })
	})
	cloud.WaitFor(t, heartbeatFresh+30*time.Second, "each amphora's heartbeat row updated again", func() bool {
		last = heartbeatRows(t, s.cp)
		return !slices.ContainsFunc(amps, func(a apiAmphora) bool { return last[a.ID].updated <= first[a.ID].updated })
	})
	for _, a := range amps {
		if age := time.Duration(last[a.ID].age) * time.Second; age > heartbeatFresh {
			t.Errorf("amphora %s (%s): heartbeat row %v old, want under %v", a.ID, a.Role, age, heartbeatFresh)
		}
		t.Logf("amphora %s (%s): heartbeat row %ds old, moved on by %.0fs", a.ID, a.Role, last[a.ID].age,
			last[a.ID].updated-first[a.ID].updated)
	}
	for _, a := range amphoraeOf(t, s, s.lb.ID) {
		if a.Status != "ALLOCATED" {
			t.Errorf("amphora %s (%s) is %s in the API, want ALLOCATED", a.ID, a.Role, a.Status)
		}
	}
}
