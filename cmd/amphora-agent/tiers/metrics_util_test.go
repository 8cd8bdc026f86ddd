//go:build system || interop

package tiers_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
)

// A load balancer with a PROMETHEUS listener, its config rendered by
// Octavia's own templater (agent/metrics/promex/testdata/render_prometheus_lb.py),
// served by the agent in the amphora namespace of an LB topology.
const (
	promLB           = "6034884d-ed47-49d5-ade7-8fa2c4501a74"
	promHTTPListener = "1a0c13c0-8e69-46c7-a68a-ca4937996d74"
	promListener     = "0b248d39-eb90-4180-91aa-5363be7df4db"
	promPool         = "e5ba6a9c-4c1b-4d53-9e53-3c1d4c8e2a10"
	promPort         = 9090 // the PROMETHEUS listener's port on the VIP
)

var promMembers = []string{"edf6ca81-b5d5-4d94-a656-f6028d8bbb77", "88ee5795-d594-478b-8591-455acf30164f"}

type promFixture struct {
	t   *testing.T
	ns  string
	env *testenv.Env
	lb  *topo.LB
}

// newPromFixture prepares the topology and the agent (extra is added to
// its config) without starting them.
func newPromFixture(t *testing.T, extra string) *promFixture {
	if err := exec.Command("/usr/bin/python3", "-c", "import octavia.common.jinja.haproxy.combined_listeners.jinja_cfg").Run(); err != nil {
		t.Skip("python3-octavia is not installed (make deps installs it): the config comes from its templater")
	}
	ns, lb, env := newLBEnv(t)
	env.Extra += extra
	f := &promFixture{t: t, ns: ns, env: env, lb: lb}
	watchHAProxy(t, filepath.Join(env.Path("lib"), promLB, promLB+".pid"))
	return f
}

// config renders the load balancer: an HTTP listener on port 80 whose
// pool has the topology's members, and the PROMETHEUS listener.
func (f *promFixture) config() string {
	f.t.Helper()
	args := []string{"../../../agent/metrics/promex/testdata/render_prometheus_lb.py",
		"--lb-id", promLB, "--vip", f.lb.VIP, "--base-path", f.env.Path("lib"),
		"--http-listener-id", promHTTPListener, "--prometheus-listener-id", promListener, "--pool-id", promPool,
		"--http-port", "80", "--prometheus-port", fmt.Sprint(promPort)}
	for i, m := range f.lb.Members {
		args = append(args, "--member", promMembers[i]+","+m.Addr+","+fmt.Sprint(m.Port))
	}
	out, err := exec.Command("/usr/bin/python3", args...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			f.t.Fatalf("render: %v\n%s", err, ee.Stderr)
		}
		f.t.Fatalf("render: %v", err)
	}
	return string(out)
}

// start runs the agent and the load balancer through the agent's API.
func (f *promFixture) start() {
	f.t.Helper()
	f.env.Start()
	status, _, body := f.env.Do("PUT", "/1.0/loadbalancer/"+f.env.AmphoraID+"/"+promLB+"/haproxy", []byte(f.config()))
	if status != 202 {
		f.t.Fatalf("upload: %d %s\n%s", status, body, f.env.Output())
	}
	status, _, body = f.env.Do("PUT", "/1.0/loadbalancer/"+promLB+"/start", nil)
	if status != 202 || !strings.Contains(string(body), "started") {
		f.t.Fatalf("start: %d %s\n%s", status, body, f.env.Output())
	}
}
