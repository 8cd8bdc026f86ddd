//go:build cloud

package cloud_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/cloud"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/vm"
)

// scenesHeartbeatTimeout is TestCloudScenarios' [health_manager]
// heartbeat_timeout: six of the amphora's 5 s heartbeat intervals. The
// longest silence the scenarios cause on purpose is AgentFaults' kill -9
// (systemd's 3 s RestartSec, then the agent's start on a TCG VM), which
// AgentFaults measures and keeps under this value; the power cut of
// AmphoraFailover is noticed 30 s sooner than with the base config's 60 s.
const scenesHeartbeatTimeout = 30 * time.Second

// vmRun runs script in v and fails t unless it exits 0. Not v.MustExec:
// a fabric-booted VM reports to the test that booted it, not to a subtest.
func vmRun(t *testing.T, v *vm.VM, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code, out, err := v.Exec(ctx, script)
	if err != nil || code != 0 {
		t.Fatalf("in VM %s: %q: exit %d, %v\n%s", v.Name, script, code, err, out)
	}
	return out
}

// theAmphora is the scene's one amphora and its VM.
func (s *scene) theAmphora(t *testing.T) (apiAmphora, *vm.VM) {
	t.Helper()
	amps := amphoraeOf(t, s, s.lb.ID)
	if len(amps) != 1 {
		t.Fatalf("%d amphorae, want 1: %+v", len(amps), amps)
	}
	v := s.cp.VMs()[amps[0].ComputeID]
	if v == nil {
		t.Fatalf("amphora %s: server %s has no VM", amps[0].ID, amps[0].ComputeID)
	}
	return amps[0], v
}

// watchHeartbeat samples the amphora's amphora_health row every second
// until the returned stop is called, which answers the oldest the row
// was seen: how close the health manager came to a failover.
func (s *scene) watchHeartbeat(ampID string) (stop func() time.Duration) {
	done, worst := make(chan struct{}), make(chan time.Duration, 1)
	go func() {
		oldest := 0
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			out, err := s.cp.SQL("SELECT TIMESTAMPDIFF(SECOND, last_update, UTC_TIMESTAMP()) FROM amphora_health " +
				"WHERE amphora_id = '" + ampID + "'")
			if n, perr := strconv.Atoi(strings.TrimSpace(out)); err == nil && perr == nil && n > oldest {
				oldest = n
			}
			select {
			case <-done:
				worst <- time.Duration(oldest) * time.Second
				return
			case <-tick.C:
			}
		}
	}()
	return func() time.Duration { close(done); return <-worst }
}

// failoverRecord is what the health manager logs when it finds an
// amphora's heartbeats stale, and the failover flows' names as taskflow
// logs their states.
var failoverRecord = regexp.MustCompile(`Stale amphora's id is|octavia-failover-`)

// failoverLines are the lines of the health manager's and the worker's
// logs after the offsets that show a failover.
func (s *scene) failoverLines(offsets map[string]int64) string {
	var out []string
	for name, offset := range offsets {
		for _, line := range strings.Split(logSince(s.serviceLog(name), offset), "\n") {
			if failoverRecord.MatchString(line) {
				out = append(out, name+": "+line[:min(len(line), 300)])
			}
		}
	}
	return strings.Join(out, "\n")
}

// logOffsets is where the health manager's and the worker's logs end now.
func (s *scene) logOffsets() map[string]int64 {
	out := map[string]int64{}
	for _, name := range []string{"octavia-health-manager", "octavia-worker"} {
		out[name] = fileSize(s.serviceLog(name))
	}
	return out
}

// faultWatcher runs detached in the amphora (setsid: the guest agent's
// exec returns at once): it follows the agent's journal and, at the
// first request record ($1, an extended regular expression; the agent
// logs one after each answer) after it was armed, runs the fault ($2),
// then waits until systemd has the agent active again under a new pid
// (the old one is $3). /run/aa-fault.at and .back hold the VM's clock at
// the fault and at the agent's return; the journal keeps being followed
// until the test reads it, so it shows the requests after the fault.
const faultWatcher = `journalctl -f -n1 -o cat -u amphora-agent.service >/run/aa-fault.journal 2>&1 &
echo $! >/run/aa-fault.jpid
i=0; while [ $i -lt 300 ] && [ ! -s /run/aa-fault.journal ]; do sleep 0.1; i=$((i+1)); done
touch /run/aa-fault.armed
i=0; while [ $i -lt 3000 ] && ! tail -n +2 /run/aa-fault.journal | grep -qE "$1"; do sleep 0.1; i=$((i+1)); done
tail -n +2 /run/aa-fault.journal | grep -m1 -E "$1" >/run/aa-fault.request || exit 1
date +%s.%N >/run/aa-fault.at
sh -c "$2"
i=0; while [ $i -lt 3000 ]; do
	pid=$(systemctl show -p MainPID --value amphora-agent.service)
	if [ "$pid" != 0 ] && [ "$pid" != "$3" ] && [ "$(systemctl is-active amphora-agent.service)" = active ]; then break; fi
	sleep 0.1; i=$((i+1))
done
date +%s.%N >/run/aa-fault.back
`

// faultDuring arms fault (a shell command in the amphora) to run at the
// agent's first request record matching trigger, makes the update
// through the API (change: ACTIVE again, no failed flow), and asserts
// that the fault landed inside the update's flow (the agent answered a
// request of it afterwards) and that the agent came back; it logs when.
func (s *scene) faultDuring(t *testing.T, v *vm.VM, what, trigger, fault string, update func()) {
	t.Helper()
	vmRun(t, v, "rm -f /run/aa-fault.*; cat >/run/aa-fault.sh <<'EOF'\n"+faultWatcher+"EOF\n"+
		"old=$(systemctl show -p MainPID --value amphora-agent.service)\n"+
		"setsid sh /run/aa-fault.sh '"+trigger+"' '"+fault+"' \"$old\" >/run/aa-fault.log 2>&1 </dev/null &\n"+
		"i=0; while [ $i -lt 600 ] && [ ! -e /run/aa-fault.armed ]; do sleep 0.1; i=$((i+1)); done; test -e /run/aa-fault.armed")
	s.change(t, what, update)
	cloud.WaitFor(t, 2*time.Minute, "the agent back after "+fault, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		code, _, err := v.Exec(ctx, "test -e /run/aa-fault.back")
		return err == nil && code == 0
	})
	out := vmRun(t, v, "kill $(cat /run/aa-fault.jpid); cat /run/aa-fault.at /run/aa-fault.back /run/aa-fault.request; "+
		"echo; cat /run/aa-fault.journal")
	f := strings.SplitN(out, "\n", 4)
	if len(f) < 4 {
		t.Fatalf("%s: the fault watcher's notes are incomplete:\n%s", what, out)
	}
	at, _ := strconv.ParseFloat(f[0], 64)
	back, _ := strconv.ParseFloat(f[1], 64)
	request, journal := strings.TrimSpace(f[2]), f[3]
	_, after, _ := strings.Cut(journal, request)
	later := regexp.MustCompile(`request.*"(PUT|POST|DELETE)"`).FindAllString(after, -1)
	t.Logf("%s: %s at the agent's record %q; the agent active again under a new pid %.1fs later; "+
		"%d requests of the flow answered after the fault", what, fault, request, back-at, len(later))
	if request == "" || len(later) == 0 {
		t.Errorf("%s: the fault did not land inside the update's flow (trigger %q, the agent's journal meanwhile:\n%s)",
			what, trigger, journal)
	}
}

// listenerConfig is a listener as the API holds it and as the amphora's
// HAProxy config renders it.
type listenerConfig struct {
	limit, timeout int // connection_limit and timeout_member_data
}

// checkListenerConfig asserts that the HAProxy config on the amphora
// holds what the API holds for the listener: its frontend's maxconn is
// the connection limit, its backend's timeout server the member data
// timeout. Returns the API's values.
func (s *scene) checkListenerConfig(t *testing.T, v *vm.VM, id string) listenerConfig {
	t.Helper()
	var got struct {
		Listener struct {
			ConnectionLimit    int    `json:"connection_limit"`
			TimeoutMemberData  int    `json:"timeout_member_data"`
			ProvisioningStatus string `json:"provisioning_status"`
		} `json:"listener"`
	}
	s.rest(t, "GET", "/v2/lbaas/listeners/"+id, nil, &got)
	api := listenerConfig{got.Listener.ConnectionLimit, got.Listener.TimeoutMemberData}
	cfg := vmRun(t, v, "cat /var/lib/octavia/"+s.lb.ID+"/haproxy.cfg")
	onAmphora := listenerConfig{
		limit:   cfgValue(cfg, func(h string) bool { return h == "frontend "+id }, "maxconn"),
		timeout: cfgValue(cfg, func(h string) bool { return strings.HasPrefix(h, "backend ") && strings.HasSuffix(h, ":"+id) }, "timeout server"),
	}
	t.Logf("listener %s: the API holds %+v (%s), the amphora's HAProxy config %+v", id, api, got.Listener.ProvisioningStatus, onAmphora)
	if onAmphora != api || got.Listener.ProvisioningStatus != "ACTIVE" {
		t.Errorf("listener %s: the amphora's HAProxy config has maxconn %d and timeout server %d, the API holds "+
			"connection_limit %d and timeout_member_data %d (%s)", id, onAmphora.limit, onAmphora.timeout, api.limit,
			api.timeout, got.Listener.ProvisioningStatus)
	}
	return api
}

// cfgValue is the number after key in the first section of the HAProxy
// config whose header matches, -1 if there is none.
func cfgValue(cfg string, header func(string) bool, key string) int {
	in := false
	for _, line := range strings.Split(cfg, "\n") {
		trimmed := strings.TrimSpace(line)
		if line != "" && line[0] != ' ' && line[0] != '\t' {
			in = header(trimmed)
			continue
		}
		if rest, ok := strings.CutPrefix(trimmed, key+" "); in && ok {
			if n, err := strconv.Atoi(strings.TrimSpace(rest)); err == nil {
				return n
			}
		}
	}
	return -1
}

// agentFaults: the agent restarted (systemctl restart) during one update
// of the HTTP listener's connection limit and member data timeout, and
// killed (kill -9, systemd restarts it) right after it stored the HAProxy
// config of a second: each flow completes, the load balancer is ACTIVE,
// the HAProxy config on the amphora holds what the API holds and the
// VIP behaves by it. Then HAProxy's master killed: the agent starts a
// new one and the VIP serves again. Throughout, the heartbeats never
// went stale: no failover (same amphora and server, no failover in the
// logs, the heartbeat row fresh).
func (s *scene) agentFaults(t *testing.T) {
	defer s.logVMState(t)
	amp, v := s.theAmphora(t)
	offsets := s.logOffsets()
	stop := s.watchHeartbeat(amp.ID)
	listener := s.cli(t, "loadbalancer", "listener", "show", "l-http", "-f", "value", "-c", "id")
	slow := s.httpAsk(80, "/slow")

	s.faultDuring(t, v, "listener connection limit 4321, member data timeout 1000 ms; agent restarted",
		`request.*"PUT"`, "systemctl restart amphora-agent.service", func() {
			s.cli(t, "loadbalancer", "listener", "set", "--connection-limit", "4321", "--timeout-member-data", "1000", "l-http")
		})
	if got := s.checkListenerConfig(t, v, listener); got != (listenerConfig{4321, 1000}) {
		t.Errorf("the API holds %+v after the update, want the new values {4321 1000}", got)
	}
	onlyFrom(t, "HTTP /slow with a 1 s member timeout", slow, "status 504 ")

	s.faultDuring(t, v, "listener connection limit 4322, member data timeout 50000 ms; agent killed",
		`request.*"PUT".*/haproxy"`, "kill -9 $(systemctl show -p MainPID --value amphora-agent.service)", func() {
			s.cli(t, "loadbalancer", "listener", "set", "--connection-limit", "4322", "--timeout-member-data", "50000", "l-http")
		})
	if got := s.checkListenerConfig(t, v, listener); got != (listenerConfig{4322, 50000}) {
		t.Errorf("the API holds %+v after the update, want the new values {4322 50000}", got)
	}
	onlyFrom(t, "HTTP /slow with the default timeout", slow, "member-1", "member-2")

	s.haproxyKilled(t, v)

	worst := stop()
	t.Logf("the amphora's heartbeat row was at most %v old (heartbeat_timeout %v)", worst, scenesHeartbeatTimeout)
	if worst >= scenesHeartbeatTimeout {
		t.Errorf("the heartbeat row was %v old, not under heartbeat_timeout %v: the health manager may fail the amphora over",
			worst, scenesHeartbeatTimeout)
	}
	if lines := s.failoverLines(offsets); lines != "" {
		t.Errorf("a failover after the agent's and HAProxy's faults:\n%s", lines)
	}
	if lb := waitLBNoError(t, s.cp, s.lb.ID); lb.ProvisioningStatus != "ACTIVE" {
		t.Errorf("the load balancer is %s after the faults, want ACTIVE", lb.ProvisioningStatus)
	}
	if now, _ := s.theAmphora(t); now.ID != amp.ID || now.ComputeID != amp.ComputeID {
		t.Errorf("amphora %s on server %s now, was %s on %s: a failover", now.ID, now.ComputeID, amp.ID, amp.ComputeID)
	}
	checkHeartbeats(t, s, []apiAmphora{amp})
}

// haproxyKilled: kill -9 of the load balancer's HAProxy master (in the
// amphora-haproxy namespace) → the agent starts a new master (a new pid
// in its pid file) and HTTP through the VIP is served again; it logs
// how long each took.
func (s *scene) haproxyKilled(t *testing.T, v *vm.VM) {
	t.Helper()
	pidFile := "/var/lib/octavia/" + s.lb.ID + "/" + s.lb.ID + ".pid"
	old := strings.TrimSpace(vmRun(t, v, "p=$(cat "+pidFile+") && ip netns identify $p | grep -qx amphora-haproxy && echo $p"))
	killed := time.Now()
	vmRun(t, v, "kill -9 "+old)
	var master string
	cloud.WaitFor(t, 2*time.Minute, "a new HAProxy master in the amphora-haproxy namespace", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		code, out, err := v.Exec(ctx, "p=$(cat "+pidFile+") && [ \"$p\" != "+old+" ] && kill -0 $p && "+
			"ip netns identify $p | grep -qx amphora-haproxy && echo $p")
		master = strings.TrimSpace(out)
		return err == nil && code == 0
	})
	respawned := time.Since(killed)
	onlyFrom(t, "HTTP after HAProxy's respawn", s.httpAsk(80, "/"), "member-1", "member-2")
	t.Logf("HAProxy master %s killed: master %s started %.1fs later, HTTP through the VIP served %.1fs later",
		old, master, respawned.Seconds(), time.Since(killed).Seconds())
}

// amphoraFailover: the amphora's VM loses power → the health manager
// finds its heartbeats stale and fails it over: a new amphora (a new
// server with its own VRRP port), the old server and its ports gone, the
// same VIP, the load balancer ACTIVE and ONLINE, and every listener
// serving again through the VIP (HTTP, TERMINATED_HTTPS with each SNI
// certificate, UDP, SCTP, TCP with its PING monitor, PROMETHEUS). It logs
// the time from the power cut to the failover's start, to ACTIVE and to
// HTTP served.
func (s *scene) amphoraFailover(t *testing.T) {
	defer s.logVMState(t)
	old, v := s.theAmphora(t)
	oldPorts := s.cp.Fabric.Ports()
	offsets := s.logOffsets()
	hm := s.serviceLog("octavia-health-manager")
	off := time.Now()
	v.PowerOff()
	cloud.WaitFor(t, scenesHeartbeatTimeout+2*time.Minute, "the health manager finding the amphora stale", func() bool {
		return strings.Contains(logSince(hm, offsets["octavia-health-manager"]), "Stale amphora's id is: "+old.ID)
	})
	started := time.Since(off)
	var amps []apiAmphora
	var lb apiLB
	cloud.WaitFor(t, 15*time.Minute, "the load balancer ACTIVE on a new amphora", func() bool {
		if lb = waitLBNoError(t, s.cp, s.lb.ID); lb.ProvisioningStatus != "ACTIVE" {
			return false
		}
		amps = amphoraeOf(t, s, s.lb.ID)
		return len(amps) == 1 && amps[0].ID != old.ID
	})
	active := time.Since(off)
	onlyFrom(t, "HTTP after the failover", s.httpAsk(80, "/"), "member-1", "member-2")
	served := time.Since(off)
	t.Logf("power cut → the health manager's failover %.1fs (heartbeat_timeout %v), ACTIVE %.1fs, HTTP served %.1fs; "+
		"amphora %s on server %s replaced by %s on %s", started.Seconds(), scenesHeartbeatTimeout, active.Seconds(),
		served.Seconds(), old.ID, old.ComputeID, amps[0].ID, amps[0].ComputeID)

	checkAmphorae(t, s.cp, amps, lb, "STANDALONE")
	checkGone(t, s.cp, []apiAmphora{old}, oldPorts)
	if lb.VIPAddress != s.lb.VIPAddress || lb.VIPPortID != s.lb.VIPPortID {
		t.Errorf("VIP %s (port %s) after the failover, was %s (port %s)", lb.VIPAddress, lb.VIPPortID, s.lb.VIPAddress, s.lb.VIPPortID)
	}
	if n := len(s.cp.VMs()); n != 1 {
		t.Errorf("%d VMs after the failover, want the new one only", n)
	}
	if lines := s.failoverLines(offsets); lines == "" {
		t.Errorf("no failover in the health manager's log, yet amphora %s was replaced", old.ID)
	}
	if failed := flowFailures(hm, offsets["octavia-health-manager"]); failed != "" {
		t.Logf("failed tasks of the failover flow (the health manager runs it):\n%s", failed)
		if strings.Contains(failed, "unexpected result code") {
			t.Errorf("the new amphora's agent answered the failover flow unexpectedly")
		}
	}
	s.checkSNI(t)
	onlyFrom(t, "UDP after the failover", s.udpAsk, "udp-member-1", "udp-member-2")
	onlyFrom(t, "SCTP after the failover", s.sctpAsk, "sctp-member-1", "sctp-member-2")
	onlyFrom(t, "TCP:81 after the failover", s.httpAsk(81, "/"), "member-1", "member-2")
	s.checkScrape(t)
	s.waitOperating(t, "load balancer", "/v2/lbaas/loadbalancers/"+s.lb.ID, "loadbalancer", "ONLINE")
	checkHeartbeats(t, s, amps)
	t.Logf("every listener served %.1fs after the power cut", time.Since(off).Seconds())
}
