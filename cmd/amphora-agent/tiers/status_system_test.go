//go:build system

package tiers_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/journalfwd"
	"github.com/amphora-agent/amphora-agent/agent/status"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
)

// runStatusCmd runs the built binary's `status` against env's
// configuration, expecting the agent to answer (exit status 0), and
// returns its output.
func runStatusCmd(t *testing.T, env *testenv.Env, args ...string) string {
	t.Helper()
	return statusCmdExit(t, env, 0, args...)
}

// statusCmdExit runs `status` and fails the test unless it exits with
// want (README: Status and logs).
func statusCmdExit(t *testing.T, env *testenv.Env, want int, args ...string) string {
	t.Helper()
	cmd := exec.Command(testenv.Binary(t), append([]string{"status", "--config-file", env.ConfigPath}, args...)...)
	out, err := cmd.Output()
	if code := cmd.ProcessState.ExitCode(); code != want {
		t.Fatalf("amphora-agent status %v: exit status %d (%v), want %d\n%s", args, code, err, want, out)
	}
	return string(out)
}

func statusJSON(t *testing.T, env *testenv.Env) status.Report {
	t.Helper()
	return statusJSONExit(t, env, 0)
}

func statusJSONExit(t *testing.T, env *testenv.Env, want int) status.Report {
	t.Helper()
	var r status.Report
	if out := statusCmdExit(t, env, want, "--json"); json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("status --json is not a report:\n%s", out)
	}
	return r
}

// waitStatus polls `amphora-agent status --json` until cond holds.
func waitStatus(t *testing.T, env *testenv.Env, what string, cond func(status.Report) bool) status.Report {
	t.Helper()
	var last status.Report
	deadline := time.Now().Add(30 * time.Second)
	for {
		if last = statusJSON(t, env); cond(last) {
			return last
		}
		if time.Now().After(deadline) {
			js, _ := json.MarshalIndent(last, "", "  ")
			t.Fatalf("status never showed %s:\n%s\n%s", what, js, env.Output())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// `amphora-agent status` against a real agent on an ACTIVE_STANDBY
// amphora: a running load balancer (pid, worker, listener OPEN), the VRRP
// keepalived MASTER holding the VIP, heartbeats sent; then HAProxy killed
// and respawned (one respawn, its exit status), keepalived stopped
// (desired stopped, heartbeats suppressed and why); then the agent stopped
// (status still reads the files and says what it cannot know). The status
// socket is 0600.
func TestStatusSystem(t *testing.T) {
	topo.RequireRoot(t)
	if _, err := os.Stat("/usr/sbin/keepalived"); err != nil {
		t.Skip("keepalived is not installed (make test installs it)")
	}
	const lb = "7d8e5f20-9b3c-4d4e-9f50-2b3c4d5e6f70"
	a := newVRRPAmp(t, "s", "203.0.113.4", 100)
	peer := topo.NewNamespace(t, "sp")
	topo.Link(t, a.ns, "eth1", []string{a.addr + "/24"}, peer, "eth1", []string{"203.0.113.5/24"})
	a.env.Start()
	a.loadBalancer(t, lb)
	if code, _, body := a.env.Do("PUT", "/1.0/vrrp/upload", []byte(a.withCheckPath(t, "203.0.113.5"))); code != 200 {
		t.Fatalf("VRRP upload: %d %s", code, body)
	}
	a.vrrp(t, "start", 202, `{"message":"OK","details":"keepalived started"}`)

	sock := filepath.Join(a.base(), status.SocketName)
	if st, err := os.Stat(sock); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("status socket %s: %v %v", sock, st, err)
	}

	r := waitStatus(t, a.env, "the LB serving, keepalived MASTER with the VIP, a heartbeat sent", func(r status.Report) bool {
		return len(r.LoadBalancers) == 1 && len(r.LoadBalancers[0].Listeners) == 1 && r.VRRP != nil &&
			r.VRRP.Role == "MASTER" && len(r.VRRP.VIPs) == 1 && !r.Heartbeat.LastSendAt.IsZero()
	})
	got := r.LoadBalancers[0]
	first := got.Pid
	// Under systemd the output is in the journal too, and status says so.
	wantJournal := 0
	if journalfwd.Available() {
		wantJournal = 1
	}
	if !r.Agent.Running || !r.Agent.Ready || r.Agent.Pid != a.env.Pid() || r.Agent.Topology != "ACTIVE_STANDBY" ||
		got.ID != lb || !got.Running || got.Desired != "running" || first == 0 || len(got.Workers) == 0 ||
		got.Listeners[0].Status != "OPEN" || got.Respawns == nil || *got.Respawns != 0 ||
		got.Log != filepath.Join(a.base(), lb, "haproxy.log") || len(got.Journal) != wantJournal ||
		!r.VRRP.Running || r.VRRP.Desired != "running" || r.VRRP.VIPs[0] != vrrpVIP ||
		r.Heartbeat.Seq == 0 || r.Heartbeat.Suppressed != "" {
		t.Fatalf("status of a running amphora: %+v", r)
	}
	text := runStatusCmd(t, a.env)
	t.Logf("amphora-agent status:\n%s", text)
	for _, want := range []string{"amphora-agent ", ": running, pid ", "load balancer " + lb + ": running, pid ",
		"role MASTER", "VIPs held     " + vrrpVIP, filepath.Join(a.base(), "vrrp", "octavia-keepalived.log"), "last sent "} {
		if !strings.Contains(text, want) {
			t.Errorf("status text lacks %q", want)
		}
	}

	// HAProxy killed: the agent restarts it; status counts the respawn.
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r = waitStatus(t, a.env, "HAProxy respawned", func(r status.Report) bool {
		lb := r.LoadBalancers[0]
		return lb.Running && lb.Pid != first && lb.Respawns != nil && *lb.Respawns == 1
	})
	if lb := r.LoadBalancers[0]; lb.LastExit != "killed by signal killed" || lb.LastExitAt.IsZero() {
		t.Errorf("last exit of the killed master: %q at %v", lb.LastExit, lb.LastExitAt)
	}
	if text := runStatusCmd(t, a.env); !strings.Contains(text, "respawns      1; last exit: killed by signal killed") {
		t.Errorf("status text after the kill:\n%s", text)
	}

	// keepalived stopped: desired stopped, no VIP, heartbeats withheld.
	a.vrrp(t, "stop", 202, `{"message":"OK","details":"keepalived stoped"}`)
	r = waitStatus(t, a.env, "keepalived stopped and heartbeats suppressed", func(r status.Report) bool {
		return !r.VRRP.Running && r.Heartbeat.Suppressed != ""
	})
	if r.VRRP.Desired != "stopped" || len(r.VRRP.VIPs) != 0 || !strings.Contains(r.Heartbeat.Suppressed, "keepalived") {
		t.Errorf("status with keepalived stopped: vrrp %+v heartbeat %+v", r.VRRP, r.Heartbeat)
	}
	if text := runStatusCmd(t, a.env); !strings.Contains(text, "keepalived (VRRP): stopped (desired stopped), role none") ||
		!strings.Contains(text, "SUPPRESSED") {
		t.Errorf("status text with keepalived stopped:\n%s", text)
	}

	// The agent stopped: HAProxy still runs and status says so, from the
	// files, and what it cannot know; it exits with status 3.
	a.env.Stop()
	r = statusJSONExit(t, a.env, 3)
	if r.Agent.Running || r.Agent.State != status.AgentNotRunning || !r.LoadBalancers[0].Running ||
		r.LoadBalancers[0].Respawns != nil || len(r.Unknown) == 0 {
		t.Errorf("status without the agent: %+v", r)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("status socket left behind by the stopped agent: %v", err)
	}
	if text := statusCmdExit(t, a.env, 3); !strings.Contains(text, "NOT RUNNING") || !strings.Contains(text, "not known (agent not running)") {
		t.Errorf("status text without the agent:\n%s", text)
	}
}
