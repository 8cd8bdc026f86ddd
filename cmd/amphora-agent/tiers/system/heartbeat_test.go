//go:build system

package system_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/health"
	"github.com/amphora-agent/amphora-agent/agent/pidfile"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/hbutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/tiersutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
)

// The running agent reports a real HAProxy, which it runs in an amphora
// namespace, with members in their own namespaces: heartbeats show the
// listener OPEN and the members UP; a member whose server stops turns DOWN
// in a later heartbeat and UP again once it serves again.
func TestHeartbeatSystemMemberStatus(t *testing.T) {
	lb, hm, env, members := startHBLoadBalancer(t, "hb", 2)
	if resp, err := lb.HTTPClient(false).Get(lb.URL(80, "/")); err != nil {
		t.Fatalf("traffic through the VIP: %v", err)
	} else {
		resp.Body.Close()
	}

	memberStatus := func(m health.Message, i int) string {
		return m.Pools[hbutil.Pool+":"+hbutil.Listener].Members[members[i].ID]
	}
	key := "insecure"
	start := time.Now()
	// Counters are deltas since the previous heartbeat, and the socket
	// still holds heartbeats built before the request: the request shows
	// in exactly one heartbeat, the first built after it, so the
	// connections are summed over all of them. A request never counted
	// leaves the sum at 0 and the wait fails.
	var conns int64
	m, _ := hm.WaitFor(hbutil.Wait, key, "listener OPEN, both members UP and the request through the VIP counted", func(m health.Message) bool {
		l, ok := m.Listeners[hbutil.Listener]
		conns += l.Stats.TotConns
		return ok && l.Status == "OPEN" && memberStatus(m, 0) == "UP" && memberStatus(m, 1) == "UP" && conns >= 1
	})
	t.Logf("seq %d after %v, %d connection(s) counted: %+v", m.Seq, time.Since(start).Round(time.Millisecond), conns, m)
	if m.ID != env.AmphoraID || m.Ver != 3 || len(m.Listeners) != 1 || len(m.Pools) != 1 || m.Pools[hbutil.Pool+":"+hbutil.Listener].Status != "UP" {
		t.Fatalf("heartbeat %+v", m)
	}

	if err := lb.Members[0].Server.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	m, _ = hm.WaitFor(hbutil.Wait, key, "member 1 DOWN", func(m health.Message) bool {
		return strings.HasPrefix(memberStatus(m, 0), "DOWN")
	})
	t.Logf("member 1 stopped: seq %d reports %q after %v (member 2 %q, pool %q)", m.Seq, memberStatus(m, 0),
		time.Since(stopped).Round(time.Millisecond), memberStatus(m, 1), m.Pools[hbutil.Pool+":"+hbutil.Listener].Status)
	if memberStatus(m, 1) != "UP" || m.Listeners[hbutil.Listener].Status != "OPEN" {
		t.Errorf("the other member or the listener changed: %+v", m)
	}

	if err := lb.Members[0].Server.Start(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	m, _ = hm.WaitFor(hbutil.Wait, key, "member 1 UP again", func(m health.Message) bool {
		return memberStatus(m, 0) == "UP" && memberStatus(m, 1) == "UP"
	})
	t.Logf("member 1 serving again: seq %d reports UP after %v", m.Seq, time.Since(restarted).Round(time.Millisecond))
}

// startHBLoadBalancer starts an agent sending heartbeats every second to
// hm, and a load balancer with n members in a topology named after
// prefix; the test's end removes it.
func startHBLoadBalancer(t *testing.T, prefix string, n int) (*topo.LB, *hbutil.Receiver, *testenv.Env, []hbutil.Member) {
	topo.RequireRoot(t)
	name := topo.UniqueName(prefix)
	lb := topo.LBTopology(t, topo.LBOptions{AmphoraName: name, Members: n})
	hm := hbutil.NewReceiver(t)
	env := testenv.New(t)
	env.Extra = fmt.Sprintf("[amphora_agent]\nnetwork_namespace = %s\n[health_manager]\ncontroller_ip_port_list = %s\nheartbeat_interval = 1\n", name, hm.Addr())
	env.Start()
	base := env.Path("lib")
	t.Cleanup(func() { hbRemoveLB(t, env, base) })
	ids := []string{"e1a2b3c4-d5e6-4f70-8192-a3b4c5d6e7f8", "f2b3c4d5-e6f7-4081-9203-b4c5d6e7f809"}
	var members []hbutil.Member
	for i := range n {
		members = append(members, hbutil.Member{ID: ids[i], Addr: lb.Members[i].HostPort(), Weight: 1, Check: true})
	}
	cfg := hbutil.Config(t, base, net.JoinHostPort(lb.VIP, "80"), members)
	if status, _, body := env.Do("PUT", "/1.0/loadbalancer/"+env.AmphoraID+"/"+hbutil.LB+"/haproxy", []byte(cfg)); status != 202 {
		t.Fatalf("upload: %d %s", status, body)
	}
	if status, _, body := env.Do("PUT", "/1.0/loadbalancer/"+hbutil.LB+"/start", nil); status != 202 {
		t.Fatalf("start: %d %s\n%s", status, body, env.Output())
	}
	return lb, hm, env, members
}

// hbRemoveLB deletes the LB through the API (the agent stops HAProxy) and
// kills a master that survived (HAProxy outlives the agent by design).
func hbRemoveLB(t *testing.T, env *testenv.Env, base string) {
	select {
	case <-env.Exited():
	default:
		client := env.Client()
		req, _ := http.NewRequest("DELETE", env.URL("/1.0/listeners/"+hbutil.LB), nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	if pid, err := pidfile.Read(filepath.Join(base, hbutil.LB, hbutil.LB+".pid")); err == nil {
		syscall.Kill(-pid, syscall.SIGKILL)
	}
}

// A config change reaches the running sender without a restart: after
// PUT /1.0/config the heartbeats go to the new destination signed with the
// new key, at the new interval; after SIGHUP (file edited) the same
// (§7.4, §7.24, issue requirement 1). The interval is shown by the median
// spacing of received datagrams: about 1 s, then 2 s after the PUT, then
// 1 s again after SIGHUP.
func TestHeartbeatSystemConfigChanges(t *testing.T) {
	first, second, third := hbutil.NewReceiver(t), hbutil.NewReceiver(t), hbutil.NewReceiver(t)
	env := testenv.New(t)
	env.Extra = fmt.Sprintf("[health_manager]\ncontroller_ip_port_list = %s\nheartbeat_interval = 1\nheartbeat_key = key-one\n", first.Addr())
	env.Start()
	m, _ := first.WaitFor(hbutil.Wait, "key-one", "the first heartbeat", func(health.Message) bool { return true })
	if m.Seq > 1 || m.ID != env.AmphoraID || len(m.Listeners) != 0 || len(m.Pools) != 0 {
		t.Fatalf("first heartbeat %+v", m)
	}
	if med, gaps := first.MedianSpacing(hbSpacingGaps, "key-one"); med >= 1500*time.Millisecond {
		t.Errorf("heartbeat_interval = 1: median spacing %v (gaps %v), want about 1 s", med, gaps)
	} else {
		t.Logf("heartbeat_interval = 1: median spacing %v (gaps %v)", med, gaps)
	}

	upload := env.Config() + fmt.Sprintf("[health_manager]\ncontroller_ip_port_list = %s\nheartbeat_interval = 2\nheartbeat_key = key-two\n", second.Addr())
	if status, _, body := env.Do("PUT", "/1.0/config", []byte(upload)); status != 202 {
		t.Fatalf("PUT /1.0/config: %d %s", status, body)
	}
	m2, _ := second.WaitFor(hbutil.Wait, "key-two", "a heartbeat after PUT /1.0/config", func(health.Message) bool { return true })
	if m2.Seq <= m.Seq {
		t.Errorf("seq went from %d to %d", m.Seq, m2.Seq)
	}
	if med, gaps := second.MedianSpacing(hbSpacingGaps, "key-two"); med < 1500*time.Millisecond || med > 3500*time.Millisecond {
		t.Errorf("heartbeat_interval = 2 after PUT /1.0/config: median spacing %v (gaps %v), want about 2 s", med, gaps)
	} else {
		t.Logf("heartbeat_interval = 2 after PUT /1.0/config: median spacing %v (gaps %v)", med, gaps)
	}

	edited := env.Config() + fmt.Sprintf("[health_manager]\ncontroller_ip_port_list = %s\nheartbeat_interval = 1\nheartbeat_key = key-three\n", third.Addr())
	if err := os.WriteFile(env.ConfigPath, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := env.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	m3, _ := third.WaitFor(hbutil.Wait, "key-three", "a heartbeat after SIGHUP", func(health.Message) bool { return true })
	if m3.Seq <= m2.Seq {
		t.Errorf("seq went from %d to %d", m2.Seq, m3.Seq)
	}
	if med, gaps := third.MedianSpacing(hbSpacingGaps, "key-three"); med >= 1500*time.Millisecond {
		t.Errorf("heartbeat_interval = 1 after SIGHUP: median spacing %v (gaps %v), want about 1 s", med, gaps)
	} else {
		t.Logf("heartbeat_interval = 1 after SIGHUP: median spacing %v (gaps %v)", med, gaps)
	}
	t.Logf("seq %d (key-one) → %d (key-two, after PUT) → %d (key-three, after SIGHUP)", m.Seq, m2.Seq, m3.Seq)
}

// hbSpacingGaps is how many intervals between datagrams a spacing
// measurement takes the median of.
const hbSpacingGaps = 4

// SIGHUP with a file that PUT /1.0/config would refuse keeps the
// configuration in force: one error line says why, and heartbeats go on
// to the same health manager signed with the same key.
func TestHeartbeatSystemSIGHUPKeepsConfigOnBrokenFile(t *testing.T) {
	hm := hbutil.NewReceiver(t)
	env := testenv.New(t)
	env.Extra = fmt.Sprintf("[health_manager]\ncontroller_ip_port_list = %s\nheartbeat_interval = 1\nheartbeat_key = key-one\n", hm.Addr())
	env.Start()
	hm.WaitFor(hbutil.Wait, "key-one", "the first heartbeat", func(health.Message) bool { return true })

	const refused = "configuration reload failed; keeping the current configuration"
	cases := []struct{ name, file, why string }{
		// In force, it would sign with the key "None".
		{"substitution in the key", env.Config() + "[health_manager]\nheartbeat_key = $foo\n", `substitution of \"$foo\"`},
		// In force, it would send no heartbeats at all.
		{"empty file", "", "controller_ip_port_list and [health_manager] heartbeat_key are not set"},
	}
	for _, c := range cases {
		before := env.Count(refused)
		if err := os.WriteFile(env.ConfigPath, []byte(c.file), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := env.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, 10*time.Second, c.name+": the reload refused", func() bool { return env.Count(refused) > before })
		if n := env.Count(refused, c.why, env.ConfigPath); n != 1 {
			t.Errorf("%s: %d error lines naming the file and %q, want 1:\n%s", c.name, n, c.why, env.Output())
		}
		// Whatever was sent before the refusal is behind us after three
		// more; each must verify with the old key.
		for i := 0; i < 3; i++ {
			hm.WaitFor(hbutil.Wait, "key-one", c.name+": a heartbeat after SIGHUP", func(health.Message) bool { return true })
		}
	}
}

// A HAProxy worker stopped (SIGSTOP) for 3 s answers no stats read, yet
// every heartbeat of those 3 s carries its listener: the last reading
// stands in while the read goes on, as a busy HAProxy must not look like
// a failed one to the health manager. Once the worker runs again, fresh
// readings follow.
func TestHeartbeatSystemStoppedWorkerKeepsListener(t *testing.T) {
	_, hm, env, _ := startHBLoadBalancer(t, "hbstop", 1)
	base := env.Path("lib")
	key := "insecure"
	hm.WaitFor(hbutil.Wait, key, "the listener OPEN", func(m health.Message) bool {
		return m.Listeners[hbutil.Listener].Status == "OPEN"
	})

	cfgPath := filepath.Join(base, hbutil.LB, "haproxy.cfg")
	var workers []int
	for _, pid := range tiersutil.DaemonsOf("haproxy", cfgPath) {
		if !slices.Contains(mainsOf("haproxy", cfgPath), pid) {
			workers = append(workers, pid)
		}
	}
	if len(workers) == 0 {
		t.Fatalf("no HAProxy worker runs %s", cfgPath)
	}
	resume := func() {
		for _, pid := range workers {
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	for _, pid := range workers {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	const stop = 3 * time.Second
	stopped := time.Now()
	// Heartbeats built before the stop may still wait in the socket; they
	// carry the listener too, so every datagram of the stop is checked.
	beats := 0
	for time.Since(stopped) < stop {
		m, ok := hm.NextMessage(stopped.Add(stop), key)
		if !ok {
			break
		}
		beats++
		if _, ok := m.Listeners[hbutil.Listener]; !ok {
			t.Fatalf("heartbeat seq %d, %v into the stop, left the listener out: %+v\n%s", m.Seq,
				time.Since(stopped).Round(time.Millisecond), m, env.Output())
		}
	}
	resume()
	if beats < 2 {
		t.Fatalf("%d heartbeats during a %v stop at heartbeat_interval = 1", beats, stop)
	}
	resumed := time.Now()
	m, _ := hm.WaitFor(hbutil.Wait, key, "a heartbeat after the worker runs again", func(m health.Message) bool {
		return m.Listeners[hbutil.Listener].Status == "OPEN"
	})
	t.Logf("%d heartbeats during the %v stop, all with the listener; seq %d %v after SIGCONT", beats, stop, m.Seq,
		time.Since(resumed).Round(time.Millisecond))
}
