//go:build openstack

package openstack_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

type osAmphora struct {
	ID        string `json:"id"`
	ComputeID string `json:"compute_id"`
	Role      string `json:"role"`
	Status    string `json:"status"`
}

// asks is what a loop of HTTP asks through a URL saw: one entry every
// 200 ms or so, true when the answer came.
type asks struct {
	at []time.Time
	ok []bool
}

// askLoop asks url every 200 ms from outside the cloud (its root network
// namespace, on the public network), one curl at a time with a
// one-second limit, in one process inside the cloud, until stop is
// called or 30 minutes have passed. The loop ends itself (a file
// appears): killing the host's side of an exec would leave it running
// in the namespace, holding the output open.
func askLoop(c *Cloud, url string) (stop func() (asks, error)) {
	flag := fmt.Sprintf("/tmp/askloop-stop-%d", time.Now().UnixNano())
	script := `for i in $(seq 1 9000); do
	[ -e "$2" ] && break
	if curl -s -o /dev/null --max-time 1 "$1"; then r=ok; else r=fail; fi
	echo "$(date +%s.%N) $r"
	sleep 0.2
done`
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 35*time.Minute)
		defer cancel()
		out, err := c.Exec(ctx, nil, "bash", "-c", script, "askloop", url, flag)
		done <- result{out, err}
	}()
	return func() (asks, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := c.Exec(ctx, nil, "touch", flag); err != nil {
			return asks{}, err
		}
		r := <-done
		var a asks
		for _, line := range strings.Split(r.out, "\n") {
			f := strings.Fields(line)
			if len(f) != 2 {
				continue
			}
			sec, err := strconv.ParseFloat(f[0], 64)
			if err != nil {
				continue
			}
			a.at = append(a.at, time.Unix(0, int64(sec*1e9)))
			a.ok = append(a.ok, f[1] == "ok")
		}
		if len(a.at) == 0 {
			return a, fmt.Errorf("the ask loop printed nothing (%v)", r.err)
		}
		return a, nil
	}
}

// summary counts the failed asks and the longest time between two
// answered ones.
func (a asks) summary() (failed int, longest time.Duration) {
	var last time.Time
	for i, ok := range a.ok {
		if !ok {
			failed++
			continue
		}
		if !last.IsZero() && a.at[i].Sub(last) > longest {
			longest = a.at[i].Sub(last)
		}
		last = a.at[i]
	}
	return failed, longest
}

// TestOpenStackActiveStandby: a user's load balancer of Octavia's
// active-standby flavor behind a floating IP; the MASTER amphora's VM
// powered off (virsh destroy: a power cut, not a shutdown); traffic
// through the floating IP counted while the BACKUP takes the VIP over
// (VRRP through Neutron's allowed address pairs, security groups
// enforced by the Open vSwitch firewall) and while the health manager
// notices the silent amphora and rebuilds it through Nova.
func TestOpenStackActiveStandby(t *testing.T) {
	c := cloud(t)
	ctx := context.Background()
	const user = "demo"
	startTestServers(t, c, 8091, 8092)
	routedSubnet(t, c, user, "pair", "198.51.100.96/27")

	var lb osLB
	start := time.Now()
	deleteOnFailure(t, c, user, "pair")
	c.OS(t, user, &lb, "loadbalancer", "create", "--name", "pair", "--vip-subnet-id", "pair-subnet", "--flavor", "active-standby")
	lb = waitLBActive(t, c, user, lb.ID, 20*time.Minute)
	t.Logf("active-standby load balancer ACTIVE %v after the create", time.Since(start).Round(100*time.Millisecond))
	logMemory(t, c, "with the pair ACTIVE")
	for _, args := range [][]string{
		{"loadbalancer", "listener", "create", "--name", "pair-http", "--protocol", "HTTP", "--protocol-port", "80", lb.ID},
		{"loadbalancer", "pool", "create", "--name", "pair-pool", "--protocol", "HTTP", "--lb-algorithm", "ROUND_ROBIN", "--listener", "pair-http"},
		{"loadbalancer", "member", "create", "--address", "203.0.113.1", "--protocol-port", "8091", "pair-pool"},
		{"loadbalancer", "member", "create", "--address", "203.0.113.1", "--protocol-port", "8092", "pair-pool"},
	} {
		c.OS(t, user, nil, args...)
		waitLBActive(t, c, user, lb.ID, 5*time.Minute)
	}
	var fip struct {
		FloatingIPAddress string `json:"floating_ip_address"`
	}
	c.OS(t, user, &fip, "floating", "ip", "create", "--port", lb.VIPPortID, "public")
	url := "http://" + fip.FloatingIPAddress + "/"
	Until(t, "an answer through "+url, 3*time.Minute, time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		out, err := c.Exec(ctx, nil, "curl", "-s", "--max-time", "3", url)
		return err == nil && strings.TrimSpace(out) != "", fmt.Sprintf("%q %v", out, err)
	})

	cutMasterUnderTraffic(t, c, user, lb.ID, url, "the floating IP")
	// Traffic once it is all over.
	Until(t, "an answer after the failover", 2*time.Minute, time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		out, err := c.Exec(ctx, nil, "curl", "-s", "--max-time", "3", url)
		return err == nil && strings.TrimSpace(out) != "", fmt.Sprintf("%q %v", out, err)
	})
	c.OS(t, user, nil, "floating", "ip", "delete", fip.FloatingIPAddress)
	c.OS(t, user, nil, "loadbalancer", "delete", "--cascade", lb.ID)
	Until(t, "load balancer deleted", 5*time.Minute, 3*time.Second, func() (bool, string) {
		var lbs []osLB
		c.OS(t, user, &lbs, "loadbalancer", "list")
		return len(lbs) == 0, fmt.Sprintf("%+v", lbs)
	})
}

// cutMasterUnderTraffic powers the MASTER amphora of the user's
// active-standby load balancer off (virsh destroy: a power cut, not a
// shutdown) while asking url every 200 ms from outside the cloud, waits
// until the health manager has rebuilt the lost amphora through Nova,
// and logs the asks (through what, for the log) and the longest gap
// between two answers; a gap over a minute fails the test.
func cutMasterUnderTraffic(t *testing.T, c *Cloud, user, lbID, url, through string) {
	t.Helper()
	ctx := context.Background()
	var amps []osAmphora
	c.OS(t, "admin", &amps, "loadbalancer", "amphora", "list", "--loadbalancer", lbID)
	var master osAmphora
	for _, a := range amps {
		if a.Role == "MASTER" {
			master = a
		}
	}
	if master.ID == "" || len(amps) != 2 {
		t.Fatalf("want a MASTER and a BACKUP: %+v", amps)
	}
	// The list has no compute id; the amphora's own record does.
	c.OS(t, "admin", &master, "loadbalancer", "amphora", "show", master.ID)
	var server struct {
		Instance string `json:"OS-EXT-SRV-ATTR:instance_name"`
	}
	c.OS(t, "admin", &server, "server", "show", master.ComputeID)

	stopLoop := askLoop(c, url)
	// A few seconds of traffic before the cut, for the baseline.
	time.Sleep(5 * time.Second)
	if _, err := c.Exec(ctx, nil, "virsh", "destroy", server.Instance); err != nil {
		stopLoop()
		t.Fatal(err)
	}
	cut := time.Now()
	t.Logf("MASTER amphora %s (%s) powered off", master.ID, server.Instance)

	// The health manager fails the silent amphora over: a new VM in its
	// place, the load balancer ACTIVE again with two amphorae.
	var lb osLB
	Until(t, "the failover's rebuilt amphora", 20*time.Minute, 5*time.Second, func() (bool, string) {
		c.OS(t, "admin", &amps, "loadbalancer", "amphora", "list", "--loadbalancer", lbID)
		c.OS(t, user, &lb, "loadbalancer", "show", lbID)
		replaced := true
		for _, a := range amps {
			if a.ID == master.ID {
				replaced = false
			}
		}
		return replaced && len(amps) == 2 && lb.ProvisioningStatus == "ACTIVE", fmt.Sprintf("%s %+v", lb.ProvisioningStatus, amps)
	})
	time.Sleep(10 * time.Second)
	a, err := stopLoop()
	if err != nil {
		t.Fatal(err)
	}
	failed, longest := a.summary()
	t.Logf("failover done %v after the power cut; through %s: %d asks, %d failed, longest gap between answers %v",
		time.Since(cut).Round(time.Second), through, len(a.ok), failed, longest.Round(100*time.Millisecond))
	if longest > time.Minute {
		t.Errorf("traffic through %s stopped for %v after the MASTER's power cut: the BACKUP did not take over", through, longest)
	}
}
