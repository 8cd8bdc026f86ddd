//go:build system

package system_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/journalfwd"
	"github.com/amphora-agent/amphora-agent/agent/pidfile"
	"github.com/amphora-agent/amphora-agent/agent/status"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/vrrputil"
)

// runStatusCmd runs the built binary's `status` against env's
// configuration, expecting the agent to answer (exit status 0), and
// returns its output.
func runStatusCmd(t *testing.T, env *testenv.Env, args ...string) string {
	t.Helper()
	return statusCmdExit(t, env, 0, args...)
}

// statusCmdExit runs `status` and fails the test unless it exits with
// want (the exit statuses: package agent/status).
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

// waitStatus polls `amphora-agent status --json` until cond holds; the
// agent must answer meanwhile (exit status 0, or 1 while a daemon is
// down).
func waitStatus(t *testing.T, env *testenv.Env, what string, cond func(status.Report) bool) status.Report {
	t.Helper()
	var last status.Report
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, r := statusExit(t, env)
		if code != 0 && code != 1 {
			t.Fatalf("status while waiting for %s: exit status %d\n%+v", what, code, r)
		}
		if last = r; cond(last) {
			return last
		}
		if time.Now().After(deadline) {
			js, _ := json.MarshalIndent(last, "", "  ")
			t.Fatalf("status never showed %s:\n%s\n%s", what, js, env.Output())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// startStatusAmp starts an ACTIVE_STANDBY amphora (after prepare, which
// may add to its configuration) with load balancer lb and keepalived
// running, linked to a peer namespace; it skips without root or
// keepalived.
func startStatusAmp(t *testing.T, name, lb string, prepare func(*vrrputil.Amp)) *vrrputil.Amp {
	t.Helper()
	topo.RequireRoot(t)
	if _, err := os.Stat("/usr/sbin/keepalived"); err != nil {
		t.Skip("keepalived is not installed (make test installs it)")
	}
	a := vrrputil.NewAmp(t, name, "203.0.113.4", 100)
	peer := topo.NewNamespace(t, name+"p")
	topo.Link(t, a.NS, "eth1", []string{a.Addr + "/24"}, peer, "eth1", []string{"203.0.113.5/24"})
	prepare(a)
	a.Env.Start()
	a.LoadBalancer(t, lb)
	if code, _, body := a.Env.Do("PUT", "/1.0/vrrp/upload", []byte(a.WithCheckPath(t, "203.0.113.5"))); code != 200 {
		t.Fatalf("VRRP upload: %d %s", code, body)
	}
	a.VRRP(t, "start", 202, `{"message":"OK","details":"keepalived started"}`)
	return a
}

// `amphora-agent status` against a real agent on an ACTIVE_STANDBY
// amphora: a running load balancer (pid, worker, listener OPEN), the VRRP
// keepalived MASTER holding the VIP, heartbeats sent; then HAProxy killed
// and respawned (one respawn, its exit status), keepalived stopped
// (desired stopped, heartbeats suppressed and why); then the agent stopped
// (status still reads the files and says what it cannot know). The status
// socket is 0600.
func TestStatusSystem(t *testing.T) {
	const lb = "7d8e5f20-9b3c-4d4e-9f50-2b3c4d5e6f70"
	a := startStatusAmp(t, "s", lb, func(*vrrputil.Amp) {})

	sock := filepath.Join(a.Base(), status.SocketName)
	if st, err := os.Stat(sock); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("status socket %s: %v %v", sock, st, err)
	}

	r := waitStatus(t, a.Env, "the LB serving, keepalived MASTER with the VIP, a heartbeat sent", func(r status.Report) bool {
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
	if !r.Agent.Running || !r.Agent.Ready || r.Agent.Pid != a.Env.Pid() || r.Agent.Topology != "ACTIVE_STANDBY" ||
		got.ID != lb || !got.Running || got.Desired != "running" || first == 0 || len(got.Workers) == 0 ||
		got.Listeners[0].Status != "OPEN" || got.Respawns == nil || *got.Respawns != 0 ||
		got.Log != filepath.Join(a.Base(), lb, "haproxy.log") || len(got.Journal) != wantJournal ||
		!r.VRRP.Running || r.VRRP.Desired != "running" || r.VRRP.VIPs[0] != vrrputil.VIP ||
		r.Heartbeat.Seq == 0 || r.Heartbeat.Suppressed != "" {
		t.Fatalf("status of a running amphora: %+v", r)
	}
	text := runStatusCmd(t, a.Env)
	t.Logf("amphora-agent status:\n%s", text)
	for _, want := range []string{"amphora-agent ", ": running, pid ", "load balancer " + lb + ": running, pid ",
		"role MASTER", "VIPs held     " + vrrputil.VIP, filepath.Join(a.Base(), "vrrp", "octavia-keepalived.log"), "last sent "} {
		if !strings.Contains(text, want) {
			t.Errorf("status text lacks %q", want)
		}
	}

	// HAProxy killed: the agent restarts it; status counts the respawn.
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r = waitStatus(t, a.Env, "HAProxy respawned", func(r status.Report) bool {
		lb := r.LoadBalancers[0]
		return lb.Running && lb.Pid != first && lb.Respawns != nil && *lb.Respawns == 1
	})
	if lb := r.LoadBalancers[0]; lb.LastExit != "killed by signal killed" || lb.LastExitAt.IsZero() {
		t.Errorf("last exit of the killed master: %q at %v", lb.LastExit, lb.LastExitAt)
	}
	if text := runStatusCmd(t, a.Env); !strings.Contains(text, "respawns      1; last exit: killed by signal killed") {
		t.Errorf("status text after the kill:\n%s", text)
	}

	// keepalived stopped: desired stopped, no VIP, heartbeats withheld.
	a.VRRP(t, "stop", 202, `{"message":"OK","details":"keepalived stoped"}`)
	r = waitStatus(t, a.Env, "keepalived stopped and heartbeats suppressed", func(r status.Report) bool {
		return !r.VRRP.Running && r.Heartbeat.Suppressed != ""
	})
	if r.VRRP.Desired != "stopped" || len(r.VRRP.VIPs) != 0 || !strings.Contains(r.Heartbeat.Suppressed, "keepalived") {
		t.Errorf("status with keepalived stopped: vrrp %+v heartbeat %+v", r.VRRP, r.Heartbeat)
	}
	if text := runStatusCmd(t, a.Env); !strings.Contains(text, "keepalived (VRRP): stopped (desired stopped), role none") ||
		!strings.Contains(text, "SUPPRESSED") {
		t.Errorf("status text with keepalived stopped:\n%s", text)
	}

	// The agent stopped: HAProxy still runs and status says so, from the
	// files, and what it cannot know; it exits with status 3.
	a.Env.Stop()
	r = statusJSONExit(t, a.Env, 3)
	if r.Agent.Running || r.Agent.State != status.AgentNotRunning || !r.LoadBalancers[0].Running ||
		r.LoadBalancers[0].Respawns != nil || len(r.Unknown) == 0 {
		t.Errorf("status without the agent: %+v", r)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("status socket left behind by the stopped agent: %v", err)
	}
	if text := statusCmdExit(t, a.Env, 3); !strings.Contains(text, "NOT RUNNING") || !strings.Contains(text, "not known (agent not running)") {
		t.Errorf("status text without the agent:\n%s", text)
	}
}

// statusExit runs `status --json` and returns its exit status and report.
func statusExit(t *testing.T, env *testenv.Env) (int, status.Report) {
	t.Helper()
	cmd := exec.Command(testenv.Binary(t), "status", "--config-file", env.ConfigPath, "--json")
	out, _ := cmd.Output()
	var r status.Report
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("status --json (exit status %d) is not a report: %v\n%s", cmd.ProcessState.ExitCode(), err, out)
	}
	return cmd.ProcessState.ExitCode(), r
}

// waitExit polls `status` until it exits with want and its report names
// a problem containing problem ("" for none), within timeout.
func waitExit(t *testing.T, env *testenv.Env, timeout time.Duration, want int, problem string) status.Report {
	t.Helper()
	var code int
	var r status.Report
	matches := func() bool {
		if problem == "" {
			return len(r.Health.Problems) == 0
		}
		return slices.ContainsFunc(r.Health.Problems, func(p string) bool { return strings.Contains(p, problem) })
	}
	deadline := time.Now().Add(timeout)
	for {
		if code, r = statusExit(t, env); code == want && matches() {
			return r
		}
		if time.Now().After(deadline) {
			js, _ := json.MarshalIndent(r, "", "  ")
			t.Fatalf("status never exited %d with the problem %q; last exit status %d:\n%s\n%s", want, problem, code, js, env.Output())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// failingWrapper writes an executable that runs real unless the file
// fail exists, in which case it exits 1: the agent's next start of the
// daemon fails, and keeps failing, until the test removes fail.
func failingWrapper(t *testing.T, env *testenv.Env, name, real string) (path, fail string) {
	t.Helper()
	path, fail = env.Path(name+"-wrapper"), env.Path(name+"-fails")
	text := "#!/bin/sh\n[ -e " + fail + " ] && exit 1\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, fail
}

// The exit status of `status` for an agent alone: 0
// while it runs with its namespace, 1 once the namespace is gone, 3 once
// the agent is stopped. The text says the same in its health section.
func TestStatusExitNamespaceAndAgent(t *testing.T) {
	topo.RequireRoot(t)
	env := testenv.New(t)
	env.Start()
	waitExit(t, env, 30*time.Second, 0, "")
	if text := statusCmdExit(t, env, 0); !strings.Contains(text, "\nhealth: OK\n") {
		t.Errorf("status text of a healthy agent:\n%s", text)
	}

	if out, err := exec.Command("ip", "netns", "delete", env.Namespace()).CombinedOutput(); err != nil {
		t.Fatalf("ip netns delete %s: %v %s", env.Namespace(), err, out)
	}
	r := waitExit(t, env, 30*time.Second, 1, "network namespace "+env.Namespace()+" is missing")
	if r.Health.State != status.HealthDegraded || !r.Agent.Running {
		t.Errorf("status without the namespace: %+v %+v", r.Health, r.Agent)
	}
	if text := statusCmdExit(t, env, 1); !strings.Contains(text, "\nhealth: DEGRADED\n  - network namespace "+env.Namespace()+" is missing\n") {
		t.Errorf("status text without the namespace:\n%s", text)
	}

	env.Stop()
	r = waitExit(t, env, 30*time.Second, 3, "the agent is not running")
	if r.Health.State != status.HealthNotRunning {
		t.Errorf("status without the agent: %+v", r.Health)
	}
}

// The exit status of `status` when a daemon the agent wants is down:
// HAProxy killed and failing to start again (the
// agent respawning it with backoff) makes it 1, and 0 again once HAProxy
// is back; the same for the VRRP keepalived.
func TestStatusExitDaemonDown(t *testing.T) {
	const lb = "0e1f2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b"
	var haproxyFails, keepalivedFails string
	a := startStatusAmp(t, "x", lb, func(a *vrrputil.Amp) {
		var haproxyCmd, keepalivedCmd string
		haproxyCmd, haproxyFails = failingWrapper(t, a.Env, "haproxy", "/usr/sbin/haproxy")
		keepalivedCmd, keepalivedFails = failingWrapper(t, a.Env, "keepalived", "/usr/sbin/keepalived")
		a.Env.Extra += fmt.Sprintf("[haproxy_amphora]\nhaproxy_cmd = %s\n[amphora_agent]\nkeepalived_cmd = %s\n", haproxyCmd, keepalivedCmd)
	})
	r := waitExit(t, a.Env, 30*time.Second, 0, "")
	if len(r.LoadBalancers) != 1 || !r.LoadBalancers[0].Running || r.VRRP == nil || !r.VRRP.Running {
		t.Fatalf("status of a running amphora: %+v", r)
	}

	// kill stops the daemon behind pidPath for good while fails exists,
	// then lets the agent start it again.
	for _, tc := range []struct {
		name, fails, pidPath, problem string
	}{
		{"HAProxy", haproxyFails, filepath.Join(a.Base(), lb, lb+".pid"), "load balancer " + lb + ": should be running, is not"},
		{"keepalived", keepalivedFails, a.PidPath(), "keepalived (VRRP): should be running, is not"},
	} {
		pid, err := pidfile.Read(tc.pidPath)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if err := os.WriteFile(tc.fails, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		r := waitExit(t, a.Env, 30*time.Second, 1, tc.problem)
		t.Logf("%s down: exit status 1, problems %q", tc.name, r.Health.Problems)
		if text := statusCmdExit(t, a.Env, 1); !strings.Contains(text, "\nhealth: DEGRADED\n") || !strings.Contains(text, tc.problem) {
			t.Errorf("status text with %s down:\n%s", tc.name, text)
		}
		if err := os.Remove(tc.fails); err != nil {
			t.Fatal(err)
		}
		// The backoff between failed starts grows to 30 s at most.
		waitExit(t, a.Env, 60*time.Second, 0, "")
	}
}
