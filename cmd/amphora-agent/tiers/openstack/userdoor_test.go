//go:build openstack

package openstack_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The test server octavia-tempest-plugin copies onto its member servers
// (the path in the cloud's root):
// answers GET / with its id.
const pluginTestServer = "/usr/lib/python3/dist-packages/octavia_tempest_plugin/contrib/test_server/test_server.bin"

// startTestServers runs the plugin's test server on the cloud's own
// address outside the cloud, 203.0.113.1, once per port, with ids 1, 2…
// (they end with the cloud).
func startTestServers(t *testing.T, c *Cloud, ports ...int) {
	t.Helper()
	for i, port := range ports {
		if _, err := c.Exec(context.Background(), nil, "sh", "-c",
			fmt.Sprintf("setsid %s -port %d -id %d >/dev/null 2>&1 </dev/null &", pluginTestServer, port, i+1)); err != nil {
			t.Fatal(err)
		}
	}
}

// routedSubnet makes the user's network NAME-net with subnet NAME-subnet
// of cidr, behind router NAME-router whose gateway is on the public
// network, and returns the subnet's name.
func routedSubnet(t *testing.T, c *Cloud, user, name, cidr string) string {
	t.Helper()
	c.OS(t, user, nil, "network", "create", name+"-net")
	c.OS(t, user, nil, "subnet", "create", "--network", name+"-net", "--subnet-range", cidr, name+"-subnet")
	c.OS(t, user, nil, "router", "create", name+"-router")
	c.OS(t, user, nil, "router", "set", "--external-gateway", "public", name+"-router")
	c.OS(t, user, nil, "router", "add", "subnet", name+"-router", name+"-subnet")
	return name + "-subnet"
}

type osLB struct {
	ID                 string `json:"id"`
	ProvisioningStatus string `json:"provisioning_status"`
	OperatingStatus    string `json:"operating_status"`
	VIPAddress         string `json:"vip_address"`
	VIPPortID          string `json:"vip_port_id"`
}

// waitLBActive polls the load balancer as user until it is ACTIVE; an
// ERROR ends the test.
func waitLBActive(t *testing.T, c *Cloud, user, id string, limit time.Duration) osLB {
	t.Helper()
	var lb osLB
	Until(t, "load balancer "+id+" ACTIVE", limit, 3*time.Second, func() (bool, string) {
		c.OS(t, user, &lb, "loadbalancer", "show", id)
		if lb.ProvisioningStatus == "ERROR" {
			t.Fatalf("load balancer %s: provisioning status ERROR", id)
		}
		return lb.ProvisioningStatus == "ACTIVE", lb.ProvisioningStatus + "/" + lb.OperatingStatus
	})
	return lb
}

// TestOpenStackUserDoor is what a user of the cloud does, through
// Keystone and the CLI, with nothing but the member role: a network of
// their own routed to the public network, a load balancer on it created
// with --vip-subnet-id, an HTTP listener with a pool of two members and a
// health monitor, a floating IP on the VIP port, and traffic from outside
// the cloud through that floating IP reaching both members. The members
// are servers outside the cloud (on the public network's far side, where
// the tier's own address is), reached through the project's router.
func TestOpenStackUserDoor(t *testing.T) {
	c := cloud(t)
	ctx := context.Background()
	const user = "demo"
	startTestServers(t, c, 8081, 8082)
	routedSubnet(t, c, user, "door", "198.51.100.64/27")

	var lb osLB
	start := time.Now()
	deleteOnFailure(t, c, user, "door")
	c.OS(t, user, &lb, "loadbalancer", "create", "--name", "door", "--vip-subnet-id", "door-subnet")
	lb = waitLBActive(t, c, user, lb.ID, 15*time.Minute)
	t.Logf("load balancer %s ACTIVE %v after the create (VIP %s)", lb.ID, time.Since(start).Round(100*time.Millisecond), lb.VIPAddress)

	step := func(args ...string) {
		t.Helper()
		s := time.Now()
		c.OS(t, user, nil, args...)
		waitLBActive(t, c, user, lb.ID, 5*time.Minute)
		t.Logf("%s %s: ACTIVE after %v", args[0], args[1], time.Since(s).Round(100*time.Millisecond))
	}
	step("loadbalancer", "listener", "create", "--name", "door-http", "--protocol", "HTTP", "--protocol-port", "80", lb.ID)
	step("loadbalancer", "pool", "create", "--name", "door-pool", "--protocol", "HTTP", "--lb-algorithm", "ROUND_ROBIN", "--listener", "door-http")
	step("loadbalancer", "healthmonitor", "create", "--delay", "5", "--timeout", "4", "--max-retries", "2", "--type", "HTTP", "door-pool")
	step("loadbalancer", "member", "create", "--name", "m1", "--address", "203.0.113.1", "--protocol-port", "8081", "door-pool")
	step("loadbalancer", "member", "create", "--name", "m2", "--address", "203.0.113.1", "--protocol-port", "8082", "door-pool")

	var fip struct {
		FloatingIPAddress string `json:"floating_ip_address"`
	}
	c.OS(t, user, &fip, "floating", "ip", "create", "--port", lb.VIPPortID, "public")
	t.Logf("floating IP %s on the VIP port", fip.FloatingIPAddress)

	// From outside: the cloud's own address on the public network is the
	// upstream router's.
	url := "http://" + fip.FloatingIPAddress + "/"
	seen := map[string]int{}
	Until(t, "both members answering through "+url, 3*time.Minute, time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		out, err := c.Exec(ctx, nil, "curl", "-s", "--max-time", "3", url)
		if err == nil {
			seen[strings.TrimSpace(out)]++
		}
		return seen["1"] > 0 && seen["2"] > 0, fmt.Sprintf("answers %v, last error %v", seen, err)
	})
	t.Logf("answers through the floating IP: %v", seen)
	logMemory(t, c, "serving one load balancer")

	var members []struct {
		Name            string `json:"name"`
		OperatingStatus string `json:"operating_status"`
	}
	Until(t, "both members ONLINE (the amphora's heartbeats)", 3*time.Minute, 3*time.Second, func() (bool, string) {
		c.OS(t, user, &members, "loadbalancer", "member", "list", "door-pool")
		online := 0
		for _, m := range members {
			if m.OperatingStatus == "ONLINE" {
				online++
			}
		}
		return online == 2, fmt.Sprintf("%+v", members)
	})

	c.OS(t, user, nil, "floating", "ip", "delete", fip.FloatingIPAddress)
	s := time.Now()
	c.OS(t, user, nil, "loadbalancer", "delete", "--cascade", lb.ID)
	Until(t, "load balancer deleted", 5*time.Minute, 3*time.Second, func() (bool, string) {
		var lbs []osLB
		c.OS(t, user, &lbs, "loadbalancer", "list")
		return len(lbs) == 0, fmt.Sprintf("%+v", lbs)
	})
	t.Logf("cascade delete: gone after %v", time.Since(s).Round(100*time.Millisecond))
	var servers []struct{ Name string }
	Until(t, "the amphora's server deleted", 5*time.Minute, 3*time.Second, func() (bool, string) {
		c.OS(t, "admin", &servers, "server", "list", "--all-projects")
		return len(servers) == 0, fmt.Sprintf("%+v", servers)
	})
}
