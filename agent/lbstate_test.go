package agent

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/amphora-agent/amphora-agent/agent/config/configtest"
)

// The heartbeat's question: the supervisor's answer first; a HAProxy it
// does not run counts only while the pid file names a live process
// running the LB's config (upstream's unit, before an in-place upgrade
// from the Python agent), never a stale or recycled pid.
func TestLoadBalancerStateCountsAnUnsupervisedHAProxy(t *testing.T) {
	dir := t.TempDir()
	cfg := configtest.Load(t, dir, baseConfig(dir))
	lbs := &fakeLBs{running: map[string]bool{}}
	a := New(Options{Config: cfg, Runner: fakeRunner{}, LoadBalancers: lbs})
	f := &fixture{dir: dir}
	conf := f.write("lib/lb1/haproxy.cfg", "frontend L1\n    bind 203.0.113.10:80\n")
	f.write("lib/lb2/haproxy.cfg", "frontend L2\n    bind 203.0.113.11:80\n")
	f.write("lib/lb3/haproxy.cfg", "frontend L3\n    bind 203.0.113.12:80\n")
	lbs.set("lb3", true)

	// lb1: a process whose command line runs lb1's config, not supervised
	// (two commands, so that bash does not exec sleep in its place).
	outside := exec.Command("bash", "-c", "sleep 60; :", "haproxy", "-Ws", "-f", conf, "-p", filepath.Join(dir, "lib/lb1/lb1.pid"))
	if err := outside.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { outside.Process.Kill(); outside.Wait() })
	f.write("lib/lb1/lb1.pid", strconv.Itoa(outside.Process.Pid))
	// lb2: its pid file names a live process running something else.
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Process.Kill(); other.Wait() })
	f.write("lib/lb2/lb2.pid", strconv.Itoa(other.Process.Pid))

	for lb, want := range map[string]bool{"lb1": true, "lb2": false, "lb3": true, "lb-none": false} {
		if running, busy := a.LoadBalancerState(lb); running != want || busy {
			t.Errorf("%s: running %v, busy %v; want running %v", lb, running, busy, want)
		}
	}
	if running, stored, err := a.RunningLoadBalancers(); running != 2 || stored != 3 || err != nil {
		t.Errorf("RunningLoadBalancers: %d of %d, %v; want 2 of 3", running, stored, err)
	}
}
