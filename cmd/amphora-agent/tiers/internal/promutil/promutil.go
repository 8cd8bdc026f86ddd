// Package promutil runs a load balancer with a PROMETHEUS listener for
// the system and interop tiers.
package promutil

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/tiersutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
)

// A load balancer with a PROMETHEUS listener, its config rendered by
// Octavia's own templater (agent/metrics/promex/testdata/render_prometheus_lb.py),
// served by the agent in the amphora namespace of an LB topology.
const (
	LB           = "6034884d-ed47-49d5-ade7-8fa2c4501a74"
	HTTPListener = "1a0c13c0-8e69-46c7-a68a-ca4937996d74"
	Listener     = "0b248d39-eb90-4180-91aa-5363be7df4db"
	Pool         = "e5ba6a9c-4c1b-4d53-9e53-3c1d4c8e2a10"
	Port         = 9090 // the PROMETHEUS listener's port on the VIP
)

var Members = []string{"edf6ca81-b5d5-4d94-a656-f6028d8bbb77", "88ee5795-d594-478b-8591-455acf30164f"}

type Fixture struct {
	t   *testing.T
	ns  string
	Env *testenv.Env
	LB  *topo.LB
}

// NewFixture prepares the topology and the agent (extra is added to
// its config) without starting them.
func NewFixture(t *testing.T, extra string) *Fixture {
	if err := exec.Command("/usr/bin/python3", "-c", "import octavia.common.jinja.haproxy.combined_listeners.jinja_cfg").Run(); err != nil {
		t.Skip("python3-octavia is not installed (make deps installs it): the config comes from its templater")
	}
	ns, lb, env := tiersutil.NewLBEnv(t)
	env.Extra += extra
	f := &Fixture{t: t, ns: ns, Env: env, LB: lb}
	tiersutil.WatchHAProxy(t, filepath.Join(env.Path("lib"), LB, LB+".pid"))
	return f
}

// config renders the load balancer: an HTTP listener on port 80 whose
// pool has the topology's members, and the PROMETHEUS listener.
func (f *Fixture) config() string {
	f.t.Helper()
	args := []string{renderScript(),
		"--lb-id", LB, "--vip", f.LB.VIP, "--base-path", f.Env.Path("lib"),
		"--http-listener-id", HTTPListener, "--prometheus-listener-id", Listener, "--pool-id", Pool,
		"--http-port", "80", "--prometheus-port", fmt.Sprint(Port)}
	for i, m := range f.LB.Members {
		args = append(args, "--member", Members[i]+","+m.Addr+","+fmt.Sprint(m.Port))
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

// Start runs the agent and the load balancer through the agent's API.
func (f *Fixture) Start() {
	f.t.Helper()
	f.Env.Start()
	status, _, body := f.Env.Do("PUT", "/1.0/loadbalancer/"+f.Env.AmphoraID+"/"+LB+"/haproxy", []byte(f.config()))
	if status != 202 {
		f.t.Fatalf("upload: %d %s\n%s", status, body, f.Env.Output())
	}
	status, _, body = f.Env.Do("PUT", "/1.0/loadbalancer/"+LB+"/start", nil)
	if status != 202 || !strings.Contains(string(body), "started") {
		f.t.Fatalf("start: %d %s\n%s", status, body, f.Env.Output())
	}
}

// renderScript is agent/metrics/promex/testdata/render_prometheus_lb.py,
// found from this file, whatever the test's working folder.
func renderScript() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "..", "agent", "metrics", "promex", "testdata", "render_prometheus_lb.py")
}
