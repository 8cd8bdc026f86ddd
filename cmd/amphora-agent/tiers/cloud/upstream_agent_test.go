//go:build cloud

package cloud_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/cloud"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/vm"
)

// upstreamAgentTag is the image tag of build.sh's upstream-agent variant
// (Debian's octavia-agent); an Octavia flavor carrying it as
// amp_image_tag makes the worker build the amphora from that image.
const upstreamAgentTag = "upstream-agent"

// agentSide is one load balancer of TestCloudUpstreamAgent and what the
// test made on it.
type agentSide struct {
	name    string // "ours" or "upstream"
	s       *scene
	active  time.Duration // create → ACTIVE
	udpPool string
	vm      *vm.VM
}

// lbStatus is the API's status tree of a load balancer, flattened to
// "name=OPERATING/PROVISIONING" per object, in the tree's order.
func lbStatus(cp *cloud.ControlPlane, id string) (string, error) {
	var tree struct {
		Statuses struct {
			LB struct {
				OperatingStatus    string `json:"operating_status"`
				ProvisioningStatus string `json:"provisioning_status"`
				Listeners          []struct {
					Name               string `json:"name"`
					OperatingStatus    string `json:"operating_status"`
					ProvisioningStatus string `json:"provisioning_status"`
					Pools              []struct {
						Name               string `json:"name"`
						OperatingStatus    string `json:"operating_status"`
						ProvisioningStatus string `json:"provisioning_status"`
						Members            []struct {
							Name               string `json:"name"`
							OperatingStatus    string `json:"operating_status"`
							ProvisioningStatus string `json:"provisioning_status"`
						} `json:"members"`
					} `json:"pools"`
				} `json:"listeners"`
			} `json:"loadbalancer"`
		} `json:"statuses"`
	}
	if _, err := cp.API("GET", "/v2/lbaas/loadbalancers/"+id+"/status", cloudProject, nil, &tree); err != nil {
		return "", err
	}
	lb := tree.Statuses.LB
	parts := []string{"lb=" + lb.OperatingStatus + "/" + lb.ProvisioningStatus}
	for _, l := range lb.Listeners {
		parts = append(parts, l.Name+"="+l.OperatingStatus+"/"+l.ProvisioningStatus)
		for _, p := range l.Pools {
			parts = append(parts, p.Name+"="+p.OperatingStatus+"/"+p.ProvisioningStatus)
			for _, m := range p.Members {
				parts = append(parts, l.Name+":"+m.Name+"="+m.OperatingStatus+"/"+m.ProvisioningStatus)
			}
		}
	}
	return strings.Join(parts, " "), nil
}

// TestCloudUpstreamAgent runs the same scenario, in one control plane,
// against a SINGLE load balancer on this project's agent and one on
// Debian's octavia-agent (Octavia's own Python agent, chosen through an
// Octavia flavor whose amp_image_tag names the upstream-agent image),
// and prints what each shows: the time from create to ACTIVE; an HTTP
// listener with an HTTP monitor and a UDP listener with a UDP-CONNECT
// monitor, members ONLINE and serving; then, while the HTTP listener's
// connection limit changes, the operating statuses the API reports for
// everything, each change with its time. Opt-in (CLOUD_UPSTREAM_AGENT=1):
// it builds a second image and boots two VMs.
func TestCloudUpstreamAgent(t *testing.T) {
	if os.Getenv("CLOUD_UPSTREAM_AGENT") != "1" {
		t.Skip("set CLOUD_UPSTREAM_AGENT=1 to compare with Debian's octavia-agent (builds a second image)")
	}
	boot := amphoraVMs(t)
	upstream := vm.BuildImageVariant(t, upstreamAgentTag)
	t.Logf("images: %s; %s", boot.Image.Info, upstream.Info)
	boot.Variants = map[string]vm.Image{upstreamAgentTag: upstream}
	cp := cloud.Start(t, cloud.Options{VMs: boot})

	// An operator's flavor for the Python agent's image, made with the CLI.
	if _, err := cp.OpenStack("loadbalancer", "flavorprofile", "create", "--name", "fp-"+upstreamAgentTag,
		"--provider", "amphora", "--flavor-data", `{"amp_image_tag": "`+upstreamAgentTag+`"}`); err != nil {
		t.Fatal(err)
	}
	flavor, err := cp.OpenStack("loadbalancer", "flavor", "create", "--name", upstreamAgentTag,
		"--flavorprofile", "fp-"+upstreamAgentTag, "--enable", "-f", "value", "-c", "id")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	sides := []*agentSide{{name: "ours"}, {name: "upstream"}}
	created := time.Now()
	for _, side := range sides {
		lb := map[string]any{"name": "lb-" + side.name, "vip_subnet_id": cp.VIPSubnet.ID}
		if side.name == "upstream" {
			lb["flavor_id"] = strings.TrimSpace(flavor)
		}
		var resp struct {
			LB apiLB `json:"loadbalancer"`
		}
		if _, err := cp.API("POST", "/v2/lbaas/loadbalancers", cloudProject, map[string]any{"loadbalancer": lb}, &resp); err != nil {
			t.Fatal(err)
		}
		side.s = &scene{cp: cp, lb: resp.LB, client: cp.NS.HTTPClient(false), names: names, http: map[string]*topo.Server{}}
	}
	waitBothActive(t, cp, sides, created)
	t.Logf("create → ACTIVE, both created at once (%s): ours %.1fs, upstream's Python agent %.1fs",
		vm.Accel(boot.Image), sides[0].active.Seconds(), sides[1].active.Seconds())
	findVMs(t, cp, sides)

	sides[0].s.serveMembers(t, []string{sceneMember1, sceneMember2}, 2, false)

	for _, side := range sides {
		t.Run("Serve-"+side.name, func(t *testing.T) {
			s := side.s
			pool := s.serve(t, side.name+"-http", "HTTP", 80, "HTTP", "--url-path", "/", "--delay", "2", "--timeout", "2",
				"--max-retries", "1", "--max-retries-down", "1")
			s.memberPair(t, pool, "", sceneHTTP)
			onlyFrom(t, side.name+" HTTP", s.httpAsk(80, "/"), "member-1", "member-2")
			// keepalived runs each UDP-CONNECT check as a shell and netcat
			// in the guest; on a busy host an emulated vCPU took longer
			// than 2 s for one, on both images alike ("Misc check ...
			// timed out"), and a single miss turned a member ERROR. The
			// comparison is of what each agent does to UDP while the HTTP
			// listener changes, so one slow check must not count.
			side.udpPool = s.serve(t, side.name+"-udp", "UDP", sceneUDP, "UDP-CONNECT", "--delay", "5", "--timeout", "4",
				"--max-retries", "1", "--max-retries-down", "3")
			s.memberPair(t, side.udpPool, "udp-", sceneUDP)
			onlyFrom(t, side.name+" UDP", s.udpAsk, "udp-member-1", "udp-member-2")
		})
	}
	if t.Failed() {
		for _, side := range sides {
			logAgent(t, side)
		}
		t.FailNow()
	}

	for _, limit := range []string{"5000", "-1"} {
		t.Run("HTTPListenerChange-limit"+limit, func(t *testing.T) {
			watchListenerChange(t, cp, sides, limit)
		})
	}
	sides[0].s.logTransitions(t)
	for _, side := range sides {
		logAgent(t, side)
	}
	for _, side := range sides {
		if _, err := cp.API("DELETE", "/v2/lbaas/loadbalancers/"+side.s.lb.ID+"?cascade=true", cloudProject, nil, nil); err != nil {
			t.Error(err)
		}
	}
	for _, side := range sides {
		waitLB(t, cp, side.s.lb.ID, "DELETED", 5*time.Minute)
	}
	if n := len(cp.VMs()); n != 0 {
		t.Errorf("%d VMs left after the deletes", n)
	}
}

// waitBothActive polls both load balancers until each is ACTIVE,
// recording when each got there; ERROR on either ends the test.
func waitBothActive(t *testing.T, cp *cloud.ControlPlane, sides []*agentSide, created time.Time) {
	t.Helper()
	deadline := created.Add(20 * time.Minute)
	for {
		pending := 0
		for _, side := range sides {
			if side.active != 0 {
				continue
			}
			var got struct {
				LB apiLB `json:"loadbalancer"`
			}
			if _, err := cp.API("GET", "/v2/lbaas/loadbalancers/"+side.s.lb.ID, cloudProject, nil, &got); err != nil {
				pending++
				continue
			}
			switch got.LB.ProvisioningStatus {
			case "ACTIVE":
				side.active = time.Since(created)
				side.s.lb = got.LB
				side.s.names[got.LB.ID] = "lb-" + side.name
			case "ERROR":
				t.Fatalf("load balancer %s went to ERROR: %+v", side.name, got.LB)
			default:
				pending++
			}
		}
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("load balancers not ACTIVE within 20 minutes")
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// findVMs pairs each side with its amphora VM by the image tag the
// worker built it with: the flavor's tag for the Python agent, the
// configured amp_image_tag for ours.
func findVMs(t *testing.T, cp *cloud.ControlPlane, sides []*agentSide) {
	t.Helper()
	vms := cp.VMs()
	for _, srv := range cp.Fabric.Servers() {
		side := sides[0]
		if srv.ImageTag == upstreamAgentTag {
			side = sides[1]
		}
		if side.vm != nil {
			t.Fatalf("two servers for the %s agent (image tags of all: %+v)", side.name, cp.Fabric.Servers())
		}
		side.vm = vms[srv.ID]
		t.Logf("%s: server %s built with image tag %q", side.name, srv.ID, srv.ImageTag)
	}
	for _, side := range sides {
		if side.vm == nil {
			t.Fatalf("no VM for the %s agent", side.name)
		}
	}
	// Each Debian release's own: Octavia 11 in bookworm, 16 in trixie.
	want := map[string]string{"bookworm": "octavia-agent 11.", "trixie": "octavia-agent 16."}[vm.Suite()]
	if out := sides[1].vm.MustExec("dpkg-query -W -f='${Package} ${Version}\\n' octavia-agent amphora-agent 2>&1; true"); want == "" || !strings.Contains(out, want) {
		t.Fatalf("the upstream-agent amphora has no %q (Debian %s): %s", want, vm.Suite(), out)
	}
}

// watchListenerChange sets the HTTP listener's connection limit on both
// load balancers at once and, for 40 s (eight heartbeats), polls each
// one's status tree, logging every change; afterwards both must be ACTIVE
// with their UDP members ONLINE again. Whether the UDP listener, pool or
// members left ONLINE meanwhile is reported per agent, not asserted: that
// is what the comparison is for.
func watchListenerChange(t *testing.T, cp *cloud.ControlPlane, sides []*agentSide, limit string) {
	last := map[string]string{}
	for _, side := range sides {
		st, err := lbStatus(cp, side.s.lb.ID)
		if err != nil {
			t.Fatal(err)
		}
		last[side.name] = st
		t.Logf("%s before: %s", side.name, st)
	}
	start := time.Now()
	for _, side := range sides {
		side.s.cli(t, "loadbalancer", "listener", "set", "--connection-limit", limit, side.name+"-http")
	}
	udpLeft := map[string][]string{}
	for time.Since(start) < 40*time.Second {
		for _, side := range sides {
			st, err := lbStatus(cp, side.s.lb.ID)
			if err != nil || st == last[side.name] {
				continue
			}
			last[side.name] = st
			t.Logf("%s +%4.1fs: %s", side.name, time.Since(start).Seconds(), st)
			for _, f := range strings.Fields(st) {
				if strings.Contains(f, side.name+"-udp") && !strings.Contains(f, "=ONLINE/") {
					udpLeft[side.name] = append(udpLeft[side.name], fmt.Sprintf("+%.1fs %s", time.Since(start).Seconds(), f))
				}
			}
		}
		time.Sleep(time.Second)
	}
	for _, side := range sides {
		waitLB(t, cp, side.s.lb.ID, "ACTIVE", 5*time.Minute)
		// A flow that failed on the amphora reverts: the load balancer is
		// ACTIVE again but the listener it changed is ERROR.
		if got := side.s.cli(t, "loadbalancer", "listener", "show", side.name+"-http", "-f", "value", "-c", "provisioning_status"); got != "ACTIVE" {
			t.Errorf("%s agent: the HTTP listener is %s after its connection limit changed to %s, want ACTIVE (worker: %s)",
				side.name, got, limit, workerAgentErrors(cp))
		}
		side.s.waitOperating(t, side.name+" UDP pool", "/v2/lbaas/pools/"+side.udpPool, "pool", "ONLINE")
		if len(udpLeft[side.name]) == 0 {
			t.Logf("%s agent: the UDP listener, pool and members stayed ONLINE while the HTTP listener changed", side.name)
		} else {
			t.Logf("%s agent: UDP objects left ONLINE while the HTTP listener changed: %s", side.name, strings.Join(udpLeft[side.name], "; "))
		}
	}
}

// logAgent prints the end of the agent's log and keepalived's lines
// from the side's amphora.
func logAgent(t *testing.T, side *agentSide) {
	script := "journalctl -u amphora-agent -o short-precise --no-pager | tail -n 60"
	if side.name == "upstream" {
		// Its HAProxy runs as a systemd unit of its own (haproxy-<lb>),
		// whose failures only the unit's journal tells.
		script = "tail -n 80 /var/log/octavia/octavia-agent.log; " +
			"journalctl -u octavia-agent -o short-precise --no-pager | grep -E 'Error|Exception|Traceback|WARNING' | tail -n 20; " +
			"echo '--- haproxy units:'; journalctl -u 'haproxy-*' -o short-precise --no-pager | tail -n 40; " +
			"sysctl fs.nr_open fs.file-max; ls /etc/sysctl.d /usr/lib/sysctl.d; systemctl show -p LimitNOFILE 'haproxy-*'; " +
			"grep -h Limit /etc/systemd/system/haproxy-*.service"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, out, err := side.vm.Exec(ctx, script+"; echo '--- keepalived:'; journalctl -o short-precise --no-pager | grep -i keepalived | tail -n 40")
	t.Logf("%s agent's log (%v):\n%s", side.name, err, out)
}

// workerAgentErrors is what the worker logged of the agents' error
// answers.
func workerAgentErrors(cp *cloud.ControlPlane) string {
	var out []string
	for _, svc := range cp.Services {
		if svc.Name != "octavia-worker" {
			continue
		}
		data, _ := os.ReadFile(svc.Log)
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, "Amphora agent returned unexpected result code") {
				out = append(out, line)
			}
		}
	}
	return strings.Join(out, "\n")
}
