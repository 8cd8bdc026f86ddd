//go:build system

package system_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/tiersutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
	"github.com/amphora-agent/amphora-agent/haproxy/stats"
)

const (
	testLB       = "5b6c3d0e-7f1a-4b2c-9d3e-0f1a2b3c4d5e"
	testListener = "a1b2c3d4-0000-4000-8000-000000000001"
	testPool     = "b1b2c3d4-0000-4000-8000-000000000002"
)

// lbFixture is one agent, its amphora namespace and a client/members
// topology.
type lbFixture struct {
	t   *testing.T
	env *testenv.Env
	lb  *topo.LB
	hap *tiersutil.HAProxyMasters
}

func newLBFixture(t *testing.T) *lbFixture {
	_, lb, env := tiersutil.NewLBEnv(t)
	f := &lbFixture{t: t, env: env, lb: lb}
	// HAProxy outlives the agent by design; the test stops it.
	f.hap = tiersutil.WatchHAProxy(t, f.pidPath())
	return f
}

func (f *lbFixture) base() string { return f.env.Path("lib") }

func (f *lbFixture) pidPath() string { return filepath.Join(f.base(), testLB, testLB+".pid") }

// config renders an Octavia-shaped config: one listener on the VIP, one
// pool with the topology's members, a response header naming the
// generation, and extra lines for the frontend.
func (f *lbFixture) config(gen int, frontendExtra ...string) string {
	var servers strings.Builder
	for i, m := range f.lb.Members {
		fmt.Fprintf(&servers, "    server %08d-0000-4000-8000-%012d %s weight 1 check inter 2s fall 3 rise 2\n", i+1, i+1, m.HostPort())
	}
	return fmt.Sprintf(`# Configuration for loadbalancer %[1]s
global
    daemon
    user nobody
    stats socket %[2]s/%[1]s.sock mode 0666 level user
    maxconn 1000

defaults
    log global
    retries 3
    option redispatch
    option splice-request
    option splice-response
    option http-keep-alive
    timeout connect 5000
    timeout client 50000
    timeout server 50000

frontend %[3]s
    maxconn 1000
    bind %[5]s:80
    mode http
    http-response set-header X-Gen %[6]d
%[7]s    default_backend %[4]s:%[3]s
    timeout client 50000

backend %[4]s:%[3]s
    mode http
    http-reuse safe
    balance roundrobin
    load-server-state-from-file global
    timeout check 10s
    option httpchk
    http-check expect rstatus 200
    fullconn 1000
    option allbackups
    timeout connect 5000
    timeout server 50000
%[8]s`, testLB, f.base(), testListener, testPool, f.lb.VIP, gen, lines(frontendExtra), servers.String())
}

func lines(ls []string) string {
	var b strings.Builder
	for _, l := range ls {
		b.WriteString("    " + l + "\n")
	}
	return b.String()
}

func (f *lbFixture) upload(cfg string) (int, string) {
	status, _, body := f.env.Do("PUT", "/1.0/loadbalancer/"+f.env.AmphoraID+"/"+testLB+"/haproxy", []byte(cfg))
	return status, string(body)
}

func (f *lbFixture) action(action string) (int, string) {
	status, _, body := f.env.Do("PUT", "/1.0/loadbalancer/"+testLB+"/"+action, nil)
	return status, string(body)
}

// get sends one request to the VIP and returns the generation header.
func (f *lbFixture) get(c *http.Client) (string, error) {
	return tiersutil.GetMember(c, f.lb.URL(80, "/"), "X-Gen")
}

func (f *lbFixture) waitServing(what, gen string) time.Duration {
	f.t.Helper()
	start := time.Now()
	c := f.lb.HTTPClient(false)
	var last error
	served := false
	// WaitFor ends the test on a timeout; what the client saw last and
	// what the agent did go with it.
	defer func() {
		if !served {
			f.t.Logf("last answer: %v\nagent output:\n%s", last, f.env.Output())
		}
	}()
	testenv.WaitFor(f.t, 20*time.Second, what, func() bool {
		g, err := f.get(c)
		last = err
		if err == nil && gen != "" && g != gen {
			last = fmt.Errorf("generation %q served, want %q", g, gen)
		}
		return err == nil && (gen == "" || g == gen)
	})
	served = true
	return time.Since(start)
}

func (f *lbFixture) startServing() {
	f.t.Helper()
	f.env.Start()
	if status, body := f.upload(f.config(1)); status != 202 {
		f.t.Fatalf("upload: %d %s", status, body)
	}
	if status, body := f.action("start"); status != 202 || !strings.Contains(body, "started") {
		f.t.Fatalf("start: %d %s", status, body)
	}
	f.waitServing("traffic through the VIP", "1")
}

func TestHAProxyServesAndRejectsInvalidUpload(t *testing.T) {
	f := newLBFixture(t)
	f.startServing()

	// The upload's ETag is the md5 of the body as sent, group line and all.
	sent := strings.Replace(f.config(1), "    user nobody\n", "    user nobody\n    group nogroup\n", 1)
	req, _ := http.NewRequest("PUT", f.env.URL("/1.0/loadbalancer/"+f.env.AmphoraID+"/"+testLB+"/haproxy"), strings.NewReader(sent))
	resp, err := f.env.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 202 || resp.Header.Get("ETag") != tiersutil.MD5Hex([]byte(sent)) {
		t.Fatalf("upload: %d ETag %q, want md5 %s", resp.StatusCode, resp.Header.Get("ETag"), tiersutil.MD5Hex([]byte(sent)))
	}

	// Every config-loading invocation carries -L <peer> and both -f files.
	args, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", f.hap.Master()))
	if err != nil {
		t.Fatal(err)
	}
	cmdline := strings.ReplaceAll(string(args), "\x00", " ")
	for _, want := range []string{"-L gKgNP6rvBlLsqsp3uMm99B0Xycw", "-f " + filepath.Join(f.base(), testLB, "haproxy.cfg"),
		"-f " + f.env.Path("lib", "haproxy-default-user-group.conf"), "-Ws", "-p " + f.pidPath()} {
		if !strings.Contains(cmdline, want) {
			t.Errorf("master command line %q lacks %q", cmdline, want)
		}
	}

	cfgFile := filepath.Join(f.base(), testLB, "haproxy.cfg")
	before, _ := os.ReadFile(cfgFile)
	status, body := f.upload(f.config(2, "this-is-not-a-keyword"))
	if status != 400 || !strings.Contains(body, `"message":"Invalid request"`) || !strings.Contains(body, "this-is-not-a-keyword") {
		t.Fatalf("invalid upload: %d %s", status, body)
	}
	if now, _ := os.ReadFile(cfgFile); string(now) != string(before) {
		t.Fatal("invalid upload replaced haproxy.cfg")
	}
	if _, err := os.Stat(cfgFile + ".new-failed"); err != nil {
		t.Fatalf("rejected config not kept: %v", err)
	}
	if g, err := f.get(f.lb.HTTPClient(false)); err != nil || g != "1" {
		t.Fatalf("after an invalid upload: gen %q, %v", g, err)
	}
	// GET returns the stored config with its md5 as ETag.
	req, _ = http.NewRequest("GET", f.env.URL("/1.0/loadbalancer/"+testLB+"/haproxy"), nil)
	resp, err = f.env.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/plain; charset=UTF-8" ||
		string(cfg) != string(before) || resp.Header.Get("ETag") != tiersutil.MD5Hex(before) || strings.Contains(string(cfg), "group nogroup") {
		t.Fatalf("GET haproxy: %d %s ETag %s", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("ETag"))
	}
}

func TestHAProxyRespawnAfterKill(t *testing.T) {
	f := newLBFixture(t)
	f.startServing()
	old := f.hap.Master()
	killed := time.Now()
	if err := syscall.Kill(-old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "a new master", func() bool { p := f.hap.Master(); return p != 0 && p != old })
	f.waitServing("traffic after the respawn", "1")
	t.Logf("kill -9 of the master: serving again after %v", time.Since(killed).Round(time.Millisecond))
	if f.env.Count("HAProxy died; restarting it", "killed by signal") < 1 {
		t.Fatalf("respawn not logged with the exit status:\n%s", f.env.Output())
	}

	// A stopped LB stays stopped.
	if status, body := f.action("stop"); status != 202 || !strings.Contains(body, "stoped") {
		t.Fatalf("stop: %d %s", status, body)
	}
	if _, err := f.get(f.lb.HTTPClient(false)); err == nil {
		t.Fatal("still serving after stop")
	}
	if f.hap.Master() != 0 {
		t.Fatal("pid file left after stop")
	}
	// reload of a stopped LB starts it.
	if status, body := f.action("reload"); status != 202 || !strings.Contains(body, "started") {
		t.Fatalf("reload of a stopped LB: %d %s", status, body)
	}
	f.waitServing("traffic after reload-as-start", "1")
}

func TestHAProxyHitlessReloads(t *testing.T) {
	f := newLBFixture(t)
	f.startServing()

	const reloads, clients = 20, 4
	var ok, failed atomic.Int64
	seen := sync.Map{}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := f.lb.HTTPClient(true)
			deadline := time.Now().Add(3 * time.Minute)
			for ctx.Err() == nil && time.Now().Before(deadline) {
				g, err := f.get(c)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				ok.Add(1)
				seen.Store(g, true)
			}
		}()
	}
	for gen := 2; gen <= reloads+1; gen++ {
		if status, body := f.upload(f.config(gen)); status != 202 {
			t.Fatalf("upload %d: %d %s", gen, status, body)
		}
		if status, body := f.action("reload"); status != 202 || !strings.Contains(body, "reloaded") {
			t.Fatalf("reload %d: %d %s", gen, status, body)
		}
		want := strconv.Itoa(gen)
		testenv.WaitFor(t, 10*time.Second, "generation "+want+" seen by the clients", func() bool {
			_, ok := seen.Load(want)
			return ok
		})
	}
	stop()
	wg.Wait()
	t.Logf("%d reloads under %d keep-alive clients: %d requests ok, %d failed", reloads, clients, ok.Load(), failed.Load())
	if failed.Load() != 0 {
		t.Fatalf("%d requests failed during reloads (first: %v)", failed.Load(), firstErr.Load())
	}
	for gen := 1; gen <= reloads+1; gen++ {
		if _, ok := seen.Load(strconv.Itoa(gen)); !ok {
			t.Errorf("generation %d never served", gen)
		}
	}
	if _, err := os.Stat(filepath.Join(f.base(), testLB, "servers-state")); err != nil {
		t.Errorf("servers state not saved before reload: %v", err)
	}
}

func TestHAProxySurvivesAgentRestart(t *testing.T) {
	f := newLBFixture(t)
	f.startServing()
	master := f.hap.Master()

	// Traffic runs throughout the agent's death and restart.
	ctx, stop := context.WithCancel(context.Background())
	var failed, ok atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		c := f.lb.HTTPClient(true)
		for ctx.Err() == nil {
			if _, err := f.get(c); err != nil {
				failed.Add(1)
			} else {
				ok.Add(1)
			}
		}
	}()
	f.env.Signal(syscall.SIGKILL)
	<-f.env.Exited()
	f.env.Start()
	testenv.WaitFor(t, 10*time.Second, "the new agent adopting HAProxy", func() bool {
		return f.env.Count("adopted running HAProxy") >= 1
	})
	if got := f.hap.Master(); got != master {
		t.Fatalf("master changed from %d to %d: HAProxy was restarted, not adopted", master, got)
	}
	status, _, body := f.env.Do("GET", "/1.0/details", nil)
	if status != 200 || !strings.Contains(string(body), `"haproxy_count":1`) {
		t.Fatalf("details after restart: %d %s", status, body)
	}
	if status, body := f.upload(f.config(2)); status != 202 {
		t.Fatalf("upload: %d %s", status, body)
	}
	if status, body := f.action("reload"); status != 202 || !strings.Contains(body, "reloaded") {
		t.Fatalf("reload by the new agent: %d %s", status, body)
	}
	f.waitServing("generation 2 after the adopted reload", "2")
	stop()
	<-done
	t.Logf("agent kill -9 and restart: %d requests ok, %d failed", ok.Load(), failed.Load())
	if failed.Load() != 0 {
		t.Fatalf("%d requests failed while the agent restarted", failed.Load())
	}
}

// reboot stops the agent and kills HAProxy, as a reboot would.
func (f *lbFixture) reboot() {
	f.t.Helper()
	f.env.Stop()
	f.hap.Kill()
	testenv.WaitFor(f.t, 5*time.Second, "HAProxy gone", func() bool {
		_, err := f.get(f.lb.HTTPClient(false))
		return err != nil
	})
}

// TestHAProxyRestoredAfterReboot: the agent and every HAProxy are gone (a
// reboot); the new agent starts the load balancer without any call.
func TestHAProxyRestoredAfterReboot(t *testing.T) {
	f := newLBFixture(t)
	f.startServing()
	f.reboot()
	f.env.Start()
	took := f.waitServing("the load balancer restored at start-up", "1")
	t.Logf("serving again %v after the agent started", took.Round(time.Millisecond))
}

func TestHAProxyRuntimeFailureRestoresLastGood(t *testing.T) {
	f := newLBFixture(t)
	f.startServing()
	// Something else holds port 8081 inside the amphora namespace: the
	// config passes haproxy -c but cannot bind.
	var holder interface{ Close() error }
	err := f.lb.Amphora.Run(func() error {
		l, err := netListen("tcp", f.lb.VIP+":8081")
		holder = l
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()

	bad := f.config(2, "bind "+f.lb.VIP+":8081")
	if status, body := f.upload(bad); status != 202 {
		t.Fatalf("upload: %d %s", status, body)
	}
	start := time.Now()
	status, body := f.action("reload")
	took := time.Since(start)
	if status != 500 || !strings.Contains(body, "Error reloading haproxy") || !strings.Contains(body, "8081") {
		t.Fatalf("reload of an unbindable config: %d %s", status, body)
	}
	if took > 30*time.Second {
		t.Fatalf("failed reload answered after %v", took)
	}
	f.waitServing("the last good config", "1")
	_, _, cfg := f.env.Do("GET", "/1.0/loadbalancer/"+testLB+"/haproxy", nil)
	if strings.Contains(string(cfg), ":8081") {
		t.Fatal("the stored config is still the failed one")
	}
	t.Logf("failed reload answered in %v; last good config serving", took.Round(time.Millisecond))
}

func TestHAProxyDelete(t *testing.T) {
	f := newLBFixture(t)
	f.startServing()
	status, _, _ := f.env.Do("PUT", "/1.0/loadbalancer/"+testLB+"/certificates/"+testListener+".pem", []byte("pem"))
	if status != 200 {
		t.Fatalf("certificate upload: %d", status)
	}
	master := f.hap.Master()
	for i := 0; i < 2; i++ {
		status, _, body := f.env.Do("DELETE", "/1.0/listeners/"+testLB, nil)
		if status != 200 || string(body) != `{"message":"OK"}` {
			t.Fatalf("delete %d: %d %s", i, status, body)
		}
	}
	testenv.WaitFor(t, 5*time.Second, "the master gone", func() bool { return syscall.Kill(master, 0) != nil })
	for _, p := range []string{filepath.Join(f.base(), testLB), filepath.Join(f.base(), testLB+".sock"), f.env.Path("lib", "certs", testLB)} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s left after delete", p)
		}
	}
	status, _, body := f.env.Do("PUT", "/1.0/loadbalancer/"+testLB+"/start", nil)
	if status != 404 || !strings.Contains(string(body), "No loadbalancer with UUID: "+testLB) {
		t.Fatalf("start after delete: %d %s", status, body)
	}
}

func netListen(network, addr string) (interface{ Close() error }, error) {
	return net.Listen(network, addr)
}

// masterReloads reads the master's reload counter from its CLI.
func (f *lbFixture) masterReloads() int {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := stats.Command(ctx, filepath.Join(f.base(), testLB, "master.sock"), "show proc; quit")
	if err != nil {
		f.t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\d+\s+master\s+(\d+)`).FindStringSubmatch(string(out))
	if m == nil {
		f.t.Fatalf("no master line in %q", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func TestHAProxyConcurrentReloadsCoalesce(t *testing.T) {
	f := newLBFixture(t)
	f.startServing()
	if status, body := f.upload(f.config(2)); status != 202 {
		t.Fatalf("upload: %d %s", status, body)
	}
	before := f.masterReloads()
	const callers = 6
	var wg sync.WaitGroup
	statuses := make(chan string, callers)
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, body := f.action("reload")
			statuses <- fmt.Sprintf("%d %s", status, body)
		}()
	}
	wg.Wait()
	close(statuses)
	for s := range statuses {
		if !strings.HasPrefix(s, "202 ") || !strings.Contains(s, "reloaded") {
			t.Fatalf("concurrent reload answered %s", s)
		}
	}
	reloads := f.masterReloads() - before
	t.Logf("%d concurrent PUT reload requests: %d master reloads", callers, reloads)
	if reloads < 1 || reloads > 2 {
		t.Fatalf("%d concurrent reloads made the master reload %d times, want 1 or 2", callers, reloads)
	}
	f.waitServing("generation 2", "2")
}

// TestHAProxyKeepsServingWhenTheAgentStops: a graceful agent stop (SIGTERM,
// as systemd sends) leaves HAProxy serving.
func TestHAProxyKeepsServingWhenTheAgentStops(t *testing.T) {
	f := newLBFixture(t)
	f.startServing()
	master := f.hap.Master()
	if err := f.env.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.env.Exited():
	case <-time.After(15 * time.Second):
		t.Fatal("agent did not stop on SIGTERM")
	}
	if g, err := f.get(f.lb.HTTPClient(false)); err != nil || g != "1" {
		t.Fatalf("after the agent stopped: gen %q, %v", g, err)
	}
	if syscall.Kill(master, 0) != nil || f.hap.Master() != master {
		t.Fatal("the HAProxy master did not survive the agent's stop")
	}
}

// Servers' states are dumped before a reload only for a config that loads
// them: the dump of every server would otherwise only delay the reload.
func TestHAProxySavesServersStateOnlyForAConfigThatLoadsIt(t *testing.T) {
	f := newLBFixture(t)
	f.startServing()
	statePath := filepath.Join(f.base(), testLB, "servers-state")
	reload := func(gen int, cfg string) {
		t.Helper()
		if status, body := f.upload(cfg); status != 202 {
			t.Fatalf("upload %d: %d %s", gen, status, body)
		}
		if status, body := f.action("reload"); status != 202 {
			t.Fatalf("reload %d: %d %s", gen, status, body)
		}
		f.waitServing("generation "+strconv.Itoa(gen), strconv.Itoa(gen))
	}
	const loads = "load-server-state-from-file global"
	cfg := f.config(2)
	if !strings.Contains(cfg, loads) {
		t.Fatalf("the fixture's config has no %q", loads)
	}
	os.Remove(statePath)
	reload(2, strings.Replace(cfg, loads, "load-server-state-from-file none", 1))
	if _, err := os.Stat(statePath); !os.IsNotExist(err) {
		t.Errorf("servers state saved for a config that never loads it (stat: %v)", err)
	}
	reload(3, f.config(3))
	if _, err := os.Stat(statePath); err != nil {
		t.Errorf("servers state not saved before loading a config that reads it: %v", err)
	}
}
