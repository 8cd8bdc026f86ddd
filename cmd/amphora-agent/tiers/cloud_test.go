//go:build cloud

// The cloud tier: Octavia's own control plane (Debian's API, worker,
// health manager and housekeeping with MariaDB and RabbitMQ) drives the
// cloud through the project's compute and network drivers
// (internal/cloud).
//
//	make test-cloud   (or: go test -tags cloud -p 1 -run Cloud -v ./cmd/amphora-agent/tiers/)
package tiers_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/cloud"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/vm"
)

const cloudProject = "5f0c1e7a2b3d4c5e8f9a0b1c2d3e4f50"

type apiLB struct {
	ID                 string `json:"id"`
	ProvisioningStatus string `json:"provisioning_status"`
	OperatingStatus    string `json:"operating_status"`
	VIPAddress         string `json:"vip_address"`
	VIPPortID          string `json:"vip_port_id"`
}

// createLB asks for a load balancer on the fabric's VIP subnet and
// returns its id. The CLI cannot (it resolves the subnet in Neutron), so
// this is the REST call a user's script makes.
func createLB(t *testing.T, cp *cloud.ControlPlane, name string) string {
	t.Helper()
	var resp struct {
		LB apiLB `json:"loadbalancer"`
	}
	body := map[string]any{"loadbalancer": map[string]any{"name": name, "vip_subnet_id": cp.VIPSubnet.ID}}
	if _, err := cp.API("POST", "/v2/lbaas/loadbalancers", cloudProject, body, &resp); err != nil {
		t.Fatal(err)
	}
	return resp.LB.ID
}

// waitLB polls the load balancer until its provisioning status is want
// (or, for want "DELETED", until the API no longer finds it) and returns
// the last answer; an ERROR status ends the wait at once.
func waitLB(t *testing.T, cp *cloud.ControlPlane, id, want string, timeout time.Duration) apiLB {
	t.Helper()
	var last apiLB
	var lastErr error
	deadline := time.Now().Add(timeout)
	for {
		var got struct {
			LB apiLB `json:"loadbalancer"`
		}
		code, err := cp.API("GET", "/v2/lbaas/loadbalancers/"+id, cloudProject, nil, &got)
		switch {
		case want == "DELETED" && code == 404:
			return last
		case err == nil:
			last = got.LB
			if last.ProvisioningStatus == want {
				return last
			}
			if last.ProvisioningStatus == "ERROR" {
				t.Fatalf("load balancer %s went to ERROR (waiting for %s): %+v", id, want, last)
			}
		default:
			lastErr = err
		}
		if time.Now().After(deadline) {
			t.Fatalf("load balancer %s not %s within %v: last %+v, %v", id, want, timeout, last, lastErr)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestCloudControlPlaneNoop brings the control plane up, lists load
// balancers with the CLI, and runs a load balancer's create and delete
// flows through the project's drivers with Octavia's no-op amphora
// driver (no VM): the plumbing from the API through RabbitMQ, the
// worker's amphorav2 flows and the drivers into the Go fabric.
func TestCloudControlPlaneNoop(t *testing.T) {
	begin := time.Now()
	cp := cloud.Start(t, cloud.Options{AmphoraDriver: "amphora_noop_driver"})
	t.Logf("control plane up in %.1fs: %s", time.Since(begin).Seconds(), strings.Join(cp.Timings, ", "))

	out, err := cp.OpenStack("loadbalancer", "list", "-f", "value")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != "" {
		t.Fatalf("a fresh control plane lists load balancers: %q", out)
	}

	created := time.Now()
	lb := waitLB(t, cp, createLB(t, cp, "lb-noop"), "ACTIVE", 3*time.Minute)
	t.Logf("create → ACTIVE in %.1fs: %+v", time.Since(created).Seconds(), lb)
	if !strings.HasPrefix(lb.VIPAddress, "203.0.113.") || lb.VIPPortID == "" {
		t.Errorf("VIP not from the fabric's VIP subnet: %+v", lb)
	}
	servers := cp.Fabric.Servers()
	if len(servers) != 1 || servers[0].Status != "ACTIVE" {
		t.Fatalf("servers after create: %+v", servers)
	}
	for _, f := range []string{"/etc/octavia/amphora-agent.conf", "/etc/octavia/certs/server.pem", "/etc/octavia/certs/client_ca.pem"} {
		if len(servers[0].Files[f]) == 0 {
			t.Errorf("config drive lacks %s (has %d files)", f, len(servers[0].Files))
		}
	}
	conf := string(servers[0].Files["/etc/octavia/amphora-agent.conf"])
	if !strings.Contains(conf, cloud.ControllerIP) {
		t.Errorf("amphora-agent.conf does not name the controller %s:\n%s", cloud.ControllerIP, conf)
	}
	out, err = cp.OpenStack("loadbalancer", "show", "lb-noop", "-f", "value", "-c", "provisioning_status")
	if err != nil || strings.TrimSpace(out) != "ACTIVE" {
		t.Fatalf("CLI shows %q, %v", out, err)
	}

	deleted := time.Now()
	if _, err := cp.API("DELETE", "/v2/lbaas/loadbalancers/"+lb.ID+"?cascade=true", cloudProject, nil, nil); err != nil {
		t.Fatal(err)
	}
	waitLB(t, cp, lb.ID, "DELETED", 3*time.Minute)
	t.Logf("delete → gone in %.1fs", time.Since(deleted).Seconds())
	if s := cp.Fabric.Servers(); len(s) != 0 {
		t.Errorf("servers left after delete: %+v", s)
	}
	t.Logf("driver calls: %s", strings.Join(cp.Fabric.Calls(), " "))
	t.Logf("memory:\n%s", strings.Join(cp.Memory(), "\n"))
}

// TestCloudLoadBalancerVM creates a SINGLE load balancer with Octavia's
// REST amphora driver: the compute driver boots an amphora VM from the
// project's image with the agent's package (AMPHORA_AGENT_DEB), the
// worker's flows reach the agent on the management bridge, plug the VIP
// and mark the load balancer ACTIVE and ONLINE; then an HTTP listener, a
// pool and two members serve through the VIP; the cascade delete removes
// the VM.
func TestCloudLoadBalancerVM(t *testing.T) {
	deb := os.Getenv("AMPHORA_AGENT_DEB")
	if deb == "" {
		t.Fatal("AMPHORA_AGENT_DEB is not set (make test-cloud builds the package and sets it)")
	}
	img := vm.BuildImage(t)
	begin := time.Now()
	cp := cloud.Start(t, cloud.Options{VMs: &cloud.AmphoraVMs{Image: img, Package: deb}})
	t.Logf("control plane up in %.1fs: %s", time.Since(begin).Seconds(), strings.Join(cp.Timings, ", "))

	created := time.Now()
	lb := waitLB(t, cp, createLB(t, cp, "lb-vm"), "ACTIVE", 20*time.Minute)
	createTime := time.Since(created)
	vms := cp.VMs()
	if len(vms) != 1 {
		t.Fatalf("%d VMs after create, want 1", len(vms))
	}
	for _, v := range vms {
		share := cloud.AgentRequests(v.MustExec("journalctl -u amphora-agent --no-pager"))
		t.Logf("create → ACTIVE in %.1fs (%s); the agent's share: %d requests, first to last answer %.1fs",
			createTime.Seconds(), vm.Accel(img), share.Requests, share.Span().Seconds())
		v.MustExec("ip netns exec amphora-haproxy ip -4 addr show | grep -q 'inet " + lb.VIPAddress + "/'")
	}
	if lb.OperatingStatus != "ONLINE" {
		t.Errorf("operating status %s, want ONLINE (the health manager's view of the heartbeats)", lb.OperatingStatus)
	}
	// The VIP answers on its network (the controller's namespace is the
	// VIP subnet's gateway).
	cloud.WaitFor(t, time.Minute, "a ping of the VIP from its gateway", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := cp.NS.Exec(ctx, "ping", "-c", "1", "-W", "2", lb.VIPAddress)
		return err == nil
	})
	if s := cp.Fabric.Servers(); len(s) == 1 {
		t.Logf("amphora-agent.conf from the worker:\n%s", s[0].Files["/etc/octavia/amphora-agent.conf"])
	}
	serveThroughVIP(t, cp, lb)

	deleted := time.Now()
	if _, err := cp.API("DELETE", "/v2/lbaas/loadbalancers/"+lb.ID+"?cascade=true", cloudProject, nil, nil); err != nil {
		t.Fatal(err)
	}
	waitLB(t, cp, lb.ID, "DELETED", 5*time.Minute)
	t.Logf("delete → gone in %.1fs", time.Since(deleted).Seconds())
	if n := len(cp.VMs()); n != 0 {
		t.Errorf("%d VMs left after the delete", n)
	}
	t.Logf("driver calls: %s", strings.Join(cp.Fabric.Calls(), " "))
	t.Logf("memory:\n%s", strings.Join(cp.Memory(), "\n"))
}

// serveThroughVIP adds an HTTP listener and a pool with the CLI, two
// members on the member network through REST (the CLI's --subnet-id
// needs Neutron), each step ACTIVE before the next, and checks that
// requests to the VIP reach both members: the member flow's network
// delta hot-plugs the member network into the amphora.
func serveThroughVIP(t *testing.T, cp *cloud.ControlPlane, lb apiLB) {
	t.Helper()
	step := func(what string, do func()) {
		t.Helper()
		start := time.Now()
		do()
		waitLB(t, cp, lb.ID, "ACTIVE", 5*time.Minute)
		t.Logf("%s → ACTIVE in %.1fs", what, time.Since(start).Seconds())
	}
	cli := func(args ...string) string {
		t.Helper()
		out, err := cp.OpenStack(args...)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	step("listener HTTP:80", func() {
		cli("loadbalancer", "listener", "create", "--name", "l1", "--protocol", "HTTP", "--protocol-port", "80", lb.ID)
	})
	var pool string
	step("pool ROUND_ROBIN", func() {
		pool = cli("loadbalancer", "pool", "create", "--name", "p1", "--lb-algorithm", "ROUND_ROBIN", "--listener", "l1",
			"--protocol", "HTTP", "-f", "value", "-c", "id")
	})
	members := map[string]string{"198.51.100.130": "member-1", "198.51.100.131": "member-2"}
	for addr, name := range members {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := cp.NS.Exec(ctx, "ip", "addr", "add", addr+"/25", "dev", "br-member")
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		cp.NS.ServeHTTP(t, addr+":8080", topo.MemberHandler(name))
	}
	for addr, name := range members {
		step("member "+name, func() {
			body := map[string]any{"member": map[string]any{"name": name, "address": addr, "protocol_port": 8080,
				"subnet_id": cp.MemberSubnet.ID}}
			if _, err := cp.API("POST", "/v2/lbaas/pools/"+pool+"/members", cloudProject, body, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
	client := cp.NS.HTTPClient(false)
	seen := map[string]int{}
	cloud.WaitFor(t, 2*time.Minute, "both members answering through the VIP", func() bool {
		resp, err := client.Get("http://" + lb.VIPAddress + "/")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		seen[resp.Header.Get("X-Member")]++
		return seen["member-1"] > 0 && seen["member-2"] > 0
	})
	t.Logf("answers through the VIP: %v", seen)
}
