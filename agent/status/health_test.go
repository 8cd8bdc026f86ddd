package status

import (
	"context"
	"net"
	"os"
	"slices"
	"syscall"
	"testing"
)

// Assess's verdict for each kind of amphora: the exit status of `status`
// follows from it (the package documentation's table).
func TestAssess(t *testing.T) {
	up := Process{Desired: "running", Running: true, Pid: 10}
	down := Process{Desired: "running", LastExit: "exit status 1"}
	stopped := Process{Desired: "stopped"}
	// healthy is an amphora with everything it wants running.
	healthy := func() Report {
		return Report{
			Agent:         Agent{Running: true, State: AgentRunning, Socket: "/s"},
			LoadBalancers: []LoadBalancer{{ID: "lb1", Process: up}, {ID: "lb2", Process: stopped}},
			VRRP:          &VRRP{Process: up},
			LVSListeners:  []LVSListener{{ID: "l1", Process: up}, {ID: "l2", Process: Process{Desired: "unknown"}}},
			Network:       Network{Namespace: "amphora-haproxy", Present: true},
		}
	}
	notLive := func(err error) func(*Report) {
		return func(r *Report) {
			r.Agent.Running = false
			NotLive(r, err)
		}
	}
	for _, tc := range []struct {
		name     string
		change   func(*Report)
		state    string
		problems []string
	}{
		{"all running", func(*Report) {}, HealthOK, []string{}},
		{"no load balancer, no keepalived", func(r *Report) { r.LoadBalancers, r.VRRP, r.LVSListeners = nil, nil, nil }, HealthOK, []string{}},
		{"HAProxy down or respawning", func(r *Report) { r.LoadBalancers[0].Process = down }, HealthDegraded,
			[]string{"load balancer lb1: should be running, is not (last exit: exit status 1)"}},
		{"VRRP keepalived down", func(r *Report) { r.VRRP.Process = down }, HealthDegraded,
			[]string{"keepalived (VRRP): should be running, is not (last exit: exit status 1)"}},
		{"VRRP keepalived stopped on purpose", func(r *Report) { r.VRRP.Process = stopped }, HealthOK, []string{}},
		{"LVS keepalived down", func(r *Report) { r.LVSListeners[0].Process = Process{Desired: "running"} }, HealthDegraded,
			[]string{"keepalived of LVS listener l1: should be running, is not"}},
		{"namespace missing", func(r *Report) { r.Network.Present = false }, HealthDegraded,
			[]string{"network namespace amphora-haproxy is missing"}},
		{"agent not running", notLive(&net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.ENOENT)}),
			HealthNotRunning, []string{"the agent is not running (no socket: the agent is not running)"}},
		{"agent not running, HAProxy down", func(r *Report) {
			notLive(&net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})(r)
			r.LoadBalancers[0].Process = down
		}, HealthNotRunning, []string{"the agent is not running (nothing listens on the socket: the agent is not running)",
			"load balancer lb1: should be running, is not (last exit: exit status 1)"}},
		{"agent stuck", notLive(context.DeadlineExceeded), HealthDegraded,
			[]string{"the agent does not answer on /s (no answer in time, the agent may be stuck)"}},
		{"agent not to be asked", notLive(ErrRefused), HealthUnknown,
			[]string{"the agent could not be asked (permission denied, only root may ask it)"}},
	} {
		r := healthy()
		tc.change(&r)
		Assess(&r)
		if r.Health.State != tc.state || !slices.Equal(r.Health.Problems, tc.problems) {
			t.Errorf("%s: health %q %q; want %q %q", tc.name, r.Health.State, r.Health.Problems, tc.state, tc.problems)
		}
	}
}
