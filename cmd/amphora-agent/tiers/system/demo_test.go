//go:build system

package system_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/health"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/hbutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/tiersutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
)

// demo narrates TestDemo on stdout (`make demo` runs it with -v).
type demo struct {
	t     *testing.T
	start time.Time
}

func (d *demo) say(format string, args ...any) {
	fmt.Printf("[%5.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

// call is one controller request; anything but want fails the demo.
func (d *demo) call(env *testenv.Env, method, path string, body []byte, want int) {
	d.t.Helper()
	code, _, out := env.Do(method, path, body)
	d.say("controller: %s %s -> %d %s", method, path, code, strings.TrimSpace(string(out)))
	if code != want {
		d.t.Fatalf("%s %s: %d, want %d\n%s", method, path, code, want, env.Output())
	}
}

// members renders a heartbeat's member statuses by name.
func demoMembers(m health.Message, names map[string]string) string {
	var parts []string
	for _, p := range m.Pools {
		for id, st := range p.Members {
			parts = append(parts, names[id]+" "+st)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// TestDemo plays the controller against the real agent, end to end, and
// tells what happens (`make demo`): namespaces with a client and two
// member servers, VIP and member ports plugged, a load balancer config
// shaped like the controller's uploaded and started, traffic through the
// VIP counted per member, a member stopped and DOWN in the decoded
// heartbeats, a reload under traffic without one failed request, and
// `amphora-agent status` at the end. Every step that goes wrong fails it;
// everything is removed afterwards.
func TestDemo(t *testing.T) {
	d := &demo{t: t, start: time.Now()}
	n := newNetTopology(t)
	const member2 = "198.51.100.3"
	if out, err := exec.Command("ip", "-n", n.Member.Name, "addr", "add", member2+"/24", "dev", "eth0").CombinedOutput(); err != nil {
		t.Fatalf("second member address: %v %s", err, out)
	}
	servers := []*topo.Server{
		n.Member.ServeHTTP(t, net.JoinHostPort(tiersutil.NetMember, "80"), topo.MemberHandler("member-1")),
		n.Member.ServeHTTP(t, net.JoinHostPort(member2, "80"), topo.MemberHandler("member-2")),
	}
	d.say("topology: client namespace %s (203.0.113.100), member namespace %s (member-1 %s:80, member-2 %s:80); the amphora namespace %s is the agent's to make",
		n.Client.Name, n.Member.Name, tiersutil.NetMember, member2, n.Amp.Name)

	hm := hbutil.NewReceiver(t)
	const key = "demo-key"
	n.Env.Extra = fmt.Sprintf("[amphora_agent]\nnetwork_namespace = %s\n[health_manager]\ncontroller_ip_port_list = %s\nheartbeat_interval = 1\nheartbeat_key = %s\n",
		n.Amp.Name, hm.Addr(), key)
	base := n.Env.Path("lib")
	tiersutil.WatchHAProxy(t, filepath.Join(base, hbutil.LB, hbutil.LB+".pid"))
	n.Env.Start()
	d.say("agent started: pid %d, API https://%s (mutual TLS), heartbeats every 1 s to the health manager at %s", n.Env.Pid(), n.Env.Addr(), hm.Addr())

	d.call(n.Env, "POST", "/1.0/plug/vip/"+tiersutil.NetVIP, []byte(fmt.Sprintf(`{"subnet_cidr": "203.0.113.0/24", "gateway": null, "mac_address": %q, "vrrp_ip": %q, "host_routes": []}`,
		n.VIPNIC.A.MAC, tiersutil.NetVRRP)), 202)
	d.call(n.Env, "POST", "/1.0/plug/network", []byte(fmt.Sprintf(`{"mac_address": %q, "fixed_ips": [{"ip_address": %q, "subnet_cidr": "198.51.100.0/24", "gateway": null, "host_routes": []}]}`,
		n.MemNIC.A.MAC, tiersutil.NetMemberIP)), 202)

	members := []hbutil.Member{
		{ID: "e1a2b3c4-d5e6-4f70-8192-a3b4c5d6e7f8", Addr: net.JoinHostPort(tiersutil.NetMember, "80"), Weight: 1, Check: true},
		{ID: "f2b3c4d5-e6f7-4081-9203-b4c5d6e7f809", Addr: net.JoinHostPort(member2, "80"), Weight: 1, Check: true},
	}
	names := map[string]string{members[0].ID: "member-1", members[1].ID: "member-2"}
	cfg := hbutil.Config(t, base, net.JoinHostPort(tiersutil.NetVIP, "80"), members)
	d.call(n.Env, "PUT", "/1.0/loadbalancer/"+n.Env.AmphoraID+"/"+hbutil.LB+"/haproxy", []byte(cfg), 202)
	d.call(n.Env, "PUT", "/1.0/loadbalancer/"+hbutil.LB+"/start", nil, 202)

	// Traffic through the VIP from the client namespace, answers counted.
	client := n.Client.HTTPClient(false)
	url := "http://" + net.JoinHostPort(tiersutil.NetVIP, "80") + "/"
	count := func(requests int) map[string]int {
		got := map[string]int{}
		for range requests {
			who, err := tiersutil.GetMember(client, url, "X-Member")
			if err != nil {
				t.Fatalf("request through the VIP: %v\n%s", err, n.Env.Output())
			}
			got[who]++
		}
		return got
	}
	testenv.WaitFor(t, 10*time.Second, "the VIP answering", func() bool { _, err := tiersutil.GetMember(client, url, "X-Member"); return err == nil })
	got := count(40)
	d.say("client: 40 requests to %s answered by member-1 %d times, member-2 %d times", url, got["member-1"], got["member-2"])
	if got["member-1"] == 0 || got["member-2"] == 0 {
		t.Fatalf("both members should answer: %v", got)
	}
	m, _ := hm.WaitFor(hbutil.Wait, key, "both members UP", func(m health.Message) bool {
		return demoMembers(m, names) == "member-1 UP, member-2 UP"
	})
	d.say("health manager: heartbeat seq %d: listener %s, members %s", m.Seq, m.Listeners[hbutil.Listener].Status, demoMembers(m, names))

	// A member stops: HAProxy's check marks it down, the heartbeat says so.
	if err := servers[0].Stop(); err != nil {
		t.Fatal(err)
	}
	d.say("member-1 stopped")
	m, _ = hm.WaitFor(hbutil.Wait, key, "member-1 DOWN", func(m health.Message) bool {
		return strings.HasPrefix(demoMembers(m, names), "member-1 DOWN")
	})
	d.say("health manager: heartbeat seq %d: members %s", m.Seq, demoMembers(m, names))
	got = count(10)
	d.say("client: 10 requests answered by member-2 %d times, member-1 %d times", got["member-2"], got["member-1"])
	if err := servers[0].Start(); err != nil {
		t.Fatal(err)
	}
	m, _ = hm.WaitFor(hbutil.Wait, key, "member-1 UP again", func(m health.Message) bool {
		return demoMembers(m, names) == "member-1 UP, member-2 UP"
	})
	d.say("member-1 started again; heartbeat seq %d: members %s", m.Seq, demoMembers(m, names))

	// Reloads while clients keep sending requests: none may fail.
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := n.Client.HTTPClient(true)
			for ctx.Err() == nil {
				if _, err := tiersutil.GetMember(c, url, "X-Member"); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				ok.Add(1)
			}
		}()
	}
	for range 3 {
		d.call(n.Env, "PUT", "/1.0/loadbalancer/"+hbutil.LB+"/reload", nil, 202)
	}
	stop()
	wg.Wait()
	d.say("client: %d requests during 3 reloads, %d failed", ok.Load(), failed.Load())
	if failed.Load() != 0 || ok.Load() == 0 {
		t.Fatalf("%d requests failed during the reloads (first: %v), %d ok", failed.Load(), firstErr.Load(), ok.Load())
	}

	out, err := exec.Command(testenv.Binary(t), "status", "--config-file", n.Env.ConfigPath).CombinedOutput()
	if err != nil {
		t.Fatalf("amphora-agent status: %v\n%s", err, out)
	}
	d.say("amphora-agent status:\n%s", out)
	d.call(n.Env, "DELETE", "/1.0/listeners/"+hbutil.LB, nil, 200)
	d.say("done; the agent, its namespace and the test namespaces are removed now")
	fmt.Fprintln(os.Stdout)
}
