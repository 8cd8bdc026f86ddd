//go:build cloud

// The cloud tier: Octavia's own control plane (Debian's API, worker,
// health manager and housekeeping with MariaDB and RabbitMQ) drives the
// cloud through the project's compute and network drivers
// (internal/cloud).
//
//	make test-cloud   (or: go test -tags cloud -p 1 -run Cloud -v ./cmd/amphora-agent/tiers/cloud/)
package cloud_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/cloud"
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

// checkPlumbing lists load balancers with the CLI on a fresh control
// plane, and runs a load balancer's create and delete flows through the
// project's drivers with Octavia's no-op amphora driver (no VM): the
// plumbing from the API through RabbitMQ, the worker's amphorav2 flows
// and the drivers into the Go fabric, and the config drive the worker
// asks for.
func checkPlumbing(t *testing.T, cp *cloud.ControlPlane) {
	t.Helper()
	out, err := cp.OpenStack("loadbalancer", "list", "-f", "value")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != "" {
		t.Fatalf("a fresh control plane lists load balancers: %q", out)
	}
	checkBridgeMACFixed(t, cp, "br-vip")

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

// checkBridgeMACFixed adds a port with a lower MAC than any to bridge and
// asserts that the bridge's MAC (the gateway's and the clients' on that
// network) stays what the control plane set.
func checkBridgeMACFixed(t *testing.T, cp *cloud.ControlPlane, bridge string) {
	t.Helper()
	ip := func(args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := cp.NS.Exec(ctx, "ip", args...)
		if err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	ip("link", "add", "lowmac0", "address", "02:00:00:00:00:01", "type", "veth", "peer", "name", "lowmac1")
	defer ip("link", "del", "lowmac0")
	ip("link", "set", "lowmac0", "master", bridge)
	ip("link", "set", "lowmac0", "up")
	if got, want := ip("-br", "link", "show", bridge), cloud.BridgeMAC(bridge); !strings.Contains(got, want) {
		t.Errorf("%s after a port with a lower MAC joined: %q, want its own MAC %s", bridge, got, want)
	}
}
