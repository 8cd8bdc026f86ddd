package agent

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/amphora-agent/amphora-agent/agent/config/configtest"
	"github.com/amphora-agent/amphora-agent/agent/fault"
)

// fakeLBs records lifecycle calls; a reload of a stopped LB starts it.
type fakeLBs struct {
	mu      sync.Mutex
	calls   []string
	running map[string]bool
}

func (f *fakeLBs) rec(s string) { f.mu.Lock(); f.calls = append(f.calls, s); f.mu.Unlock() }

func (f *fakeLBs) Start(_ context.Context, lb string) error {
	f.rec("start " + lb)
	f.set(lb, true)
	return nil
}

func (f *fakeLBs) Stop(_ context.Context, lb string) error {
	f.rec("stop " + lb)
	f.set(lb, false)
	return nil
}

func (f *fakeLBs) Reload(_ context.Context, lb string) (bool, error) {
	f.rec("reload " + lb)
	started, _ := f.State(lb)
	f.set(lb, true)
	return !started, nil
}

func (f *fakeLBs) Delete(_ context.Context, lb string) error { f.rec("delete " + lb); return nil }
func (f *fakeLBs) Restore(context.Context) error             { f.rec("restore"); return nil }
func (f *fakeLBs) Close()                                    {}
func (f *fakeLBs) set(lb string, running bool) {
	f.mu.Lock()
	f.running[lb] = running
	f.mu.Unlock()
}

func (f *fakeLBs) State(lb string) (bool, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running[lb], false
}

func TestActionsAnswerAndAdvertiseInSingleTopologyOnly(t *testing.T) {
	for _, topology := range []string{"SINGLE", "ACTIVE_STANDBY"} {
		t.Run(topology, func(t *testing.T) {
			dir := t.TempDir()
			conf := strings.Replace(baseConfig(dir), "loadbalancer_topology = SINGLE", "loadbalancer_topology = "+topology, 1)
			cfg := configtest.Load(t, dir, conf)
			lbs := &fakeLBs{running: map[string]bool{}}
			var advertised []netip.Addr
			a := New(Options{
				Config: cfg, Runner: fakeRunner{}, LoadBalancers: lbs,
				Advertise: func(_ context.Context, ns string, addrs []netip.Addr) error {
					if ns != "amphora-agent-unit-test-absent" {
						t.Errorf("advertised in namespace %q", ns)
					}
					advertised = append(advertised, addrs...)
					return nil
				},
			})
			var gone []string
			a.OnLoadBalancerGone(func(lb string) { gone = append(gone, lb) })
			f := &fixture{dir: dir}
			f.write("lib/lb1/haproxy.cfg", "frontend L1\n    mode http\n    bind 203.0.113.10:80\n    bind [2001:db8::10]:443\n")

			ctx := context.Background()
			steps := []struct{ action, details string }{
				{"RELOAD", "Configuration file is valid\nhaproxy daemon for lb1 started"},
				{"reload", "Listener lb1 reloaded"},
				{"Stop", "Listener lb1 stoped"},
				{"start", "Configuration file is valid\nhaproxy daemon for lb1 started"},
			}
			for _, s := range steps {
				got, err := a.LoadBalancerAction(ctx, "lb1", s.action)
				if err != nil || got != s.details {
					t.Fatalf("%s: %q, %v; want %q", s.action, got, err, s.details)
				}
				if topology == "ACTIVE_STANDBY" && s.action == "Stop" {
					// A stopped LB is left out of keepalived's check.
					script, _ := os.ReadFile(filepath.Join(dir, "lib", "vrrp", "check_scripts", "haproxy_check_script.sh"))
					if string(script) != "haproxy-vrrp-check ; exit $?" {
						t.Fatalf("check script after stop: %q", script)
					}
				}
			}
			if want := []string{"reload lb1", "reload lb1", "stop lb1", "start lb1"}; !reflect.DeepEqual(lbs.calls, want) {
				t.Fatalf("calls %v, want %v", lbs.calls, want)
			}
			if err := a.DeleteListener(ctx, "lb1"); err != nil {
				t.Fatal(err)
			}
			// Stop and delete tell the heartbeat sender to drop its cache.
			if want := []string{"lb1", "lb1"}; !reflect.DeepEqual(gone, want) {
				t.Fatalf("gone notifications %v, want %v", gone, want)
			}
			vips := []netip.Addr{netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("2001:db8::10")}
			var want []netip.Addr
			if topology == "SINGLE" {
				// Advertised after reload-as-start, reload and start; not after stop.
				want = append(append(append(want, vips...), vips...), vips...)
			}
			if !reflect.DeepEqual(advertised, want) {
				t.Fatalf("advertised %v, want %v", advertised, want)
			}
			// ACTIVE_STANDBY keeps keepalived's HAProxy check current; the
			// last action was a start, so the LB's socket is listed.
			script, err := os.ReadFile(filepath.Join(dir, "lib", "vrrp", "check_scripts", "haproxy_check_script.sh"))
			if topology == "SINGLE" {
				if err == nil {
					t.Fatal("check script written in SINGLE topology")
				}
			} else if want := "haproxy-vrrp-check " + filepath.Join(dir, "lib", "lb1.sock") + "; exit $?"; string(script) != want {
				t.Fatalf("check script %q (%v), want %q", script, err, want)
			}
		})
	}
}

type okChecker struct{}

func (okChecker) CombinedOutput(context.Context, string, ...string) ([]byte, error) {
	return []byte("Configuration file is valid\n"), nil
}

func (c okChecker) Output(ctx context.Context, name string, args ...string) ([]byte, error) {
	return c.CombinedOutput(ctx, name, args...)
}

func TestUploadNeitherStartsNorReloads(t *testing.T) {
	dir := t.TempDir()
	cfg := configtest.Load(t, dir, baseConfig(dir))
	lbs := &fakeLBs{running: map[string]bool{}}
	a := New(Options{Config: cfg, Runner: fakeRunner{}, LoadBalancers: lbs, HAProxyRunner: okChecker{}})
	body := []byte("global\n    group nogroup\n")
	etag, err := a.UploadHAProxy(context.Background(), "AMP1", "lb1", body)
	if err != nil {
		t.Fatal(err)
	}
	if etag != "b7ad24fa6e38a5acb37317441f1ee579" || len(lbs.calls) != 0 {
		t.Fatalf("etag %s, lifecycle calls %v: an upload must not start or reload", etag, lbs.calls)
	}
}

// heldLBs is a fakeLBs whose first reload waits until the test lets it
// go, so concurrent requests pile up behind the mutation lock.
type heldLBs struct {
	fakeLBs
	reloads atomic.Int32
	release chan struct{}
}

func (s *heldLBs) Reload(ctx context.Context, lb string) (bool, error) {
	if s.reloads.Add(1) == 1 {
		<-s.release
	}
	return false, nil
}

// The callers run in a synctest bubble, so synctest.Wait tells when every
// one of them has queued (behind the lock or on a pending reload) while the
// first reload is held.
func TestConcurrentReloadsCoalesce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		cfg := configtest.Load(t, dir, baseConfig(dir))
		lbs := &heldLBs{fakeLBs: fakeLBs{running: map[string]bool{}}, release: make(chan struct{})}
		a := New(Options{Config: cfg, Runner: fakeRunner{}, LoadBalancers: lbs,
			Advertise: func(context.Context, string, []netip.Addr) error { return nil }})
		// The bubble ends only once the supervisors' goroutines have.
		defer a.Close()
		f := &fixture{dir: dir}
		f.write("lib/lb1/haproxy.cfg", "frontend L1\n    mode http\n")

		const callers = 8
		var wg sync.WaitGroup
		errs := make(chan error, callers)
		for range callers {
			wg.Go(func() {
				details, err := a.LoadBalancerAction(context.Background(), "lb1", "reload")
				if err == nil && details != "Listener lb1 reloaded" {
					err = fmt.Errorf("details %q", details)
				}
				errs <- err
			})
		}
		synctest.Wait()
		if n := lbs.reloads.Load(); n != 1 {
			t.Fatalf("%d reloads started while the first was held, want 1", n)
		}
		close(lbs.release)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		// One reload runs; every request queued behind it shares the next.
		if n := lbs.reloads.Load(); n < 1 || n > 2 {
			t.Fatalf("%d concurrent reload requests ran %d reloads, want 1 or 2", callers, n)
		}
	})
}

// sandboxAgent is an agent over the real HAProxy supervisor (nothing
// runs) with every path option under dir; with the default layout the
// certificate folder sits inside base_path.
func sandboxAgent(t *testing.T, dir, topology string) *Agent {
	t.Helper()
	conf := strings.Replace(baseConfig(dir), "loadbalancer_topology = SINGLE", "loadbalancer_topology = "+topology, 1) +
		"[amphora_agent]\n" +
		"plugged_interfaces_file = " + filepath.Join(dir, "lib", "plugged_interfaces") + "\n" +
		"nftables_rules_file = " + filepath.Join(dir, "lib", "nftables-vip.rules") + "\n" +
		"haproxy_user_group_file = " + filepath.Join(dir, "lib", "haproxy-default-user-group.conf") + "\n" +
		"agent_server_network_dir = " + filepath.Join(dir, "lib", "interfaces") + "\n"
	cfg := configtest.Load(t, dir, conf)
	return New(Options{Config: cfg, Runner: fakeRunner{}, HAProxyRunner: okChecker{}, ProcDir: filepath.Join(dir, "proc"),
		Advertise: func(context.Context, string, []netip.Addr) error { return nil }})
}

// tree describes every file and folder under root with its content, so
// two calls compare equal only if nothing was written or removed.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			files[rel] = "dir"
			return nil
		}
		data, err := os.ReadFile(p)
		files[rel] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func TestReservedAndUnknownIDsTouchNothing(t *testing.T) {
	dir := t.TempDir()
	a := sandboxAgent(t, dir, "ACTIVE_STANDBY")
	f := &fixture{dir: dir}
	// What the agent keeps under base_path besides load balancers, and a
	// folder that is not one of its load balancers.
	for _, p := range []string{
		"lib/vrrp/octavia-keepalived.conf", "lib/vrrp/agent-state.json", "lib/vrrp/check_script.sh",
		"lib/vrrp/check_scripts/haproxy_check_script.sh", "lib/lvs/octavia-keepalivedlvs-l1.conf",
		"lib/certs/lb1/cert.pem", "lib/plugged_interfaces", "lib/nftables-vip.rules",
		"lib/haproxy-default-user-group.conf", "lib/stats_counters.json", "lib/interfaces/eth1.json",
		"lib/stray/notes",
	} {
		f.write(p, "kept: "+p)
	}
	f.write("lib/lb1/haproxy.cfg", lbConfig("L1"))
	f.write("lib/lb1/agent-state.json", `{"amphora_id":"AMP1","peer":"p","running":true}`)
	before := tree(t, dir)
	ctx := context.Background()

	for _, id := range []string{"vrrp", "lvs", "certs", "plugged_interfaces", "interfaces"} {
		_, err := a.UploadHAProxy(ctx, "AMP1", id, []byte(lbConfig("L1")))
		if fe, ok := fault.As(err); !ok || fe.Kind != fault.KindInvalid || !strings.Contains(fe.Details, "reserved") {
			t.Errorf("upload %s: %v, want a 400 saying the id is reserved", id, err)
		}
		if _, err := a.PutCertificate(ctx, id, "x.pem", []byte("pem")); err == nil {
			t.Errorf("certificate upload for %s accepted", id)
		}
		for _, action := range []string{"start", "stop", "reload"} {
			_, err := a.LoadBalancerAction(ctx, id, action)
			if fe, ok := fault.As(err); !ok || fe.Kind != fault.KindNotFound || fe.Details != "No loadbalancer with UUID: "+id {
				t.Errorf("%s %s: %v, want the unknown load balancer answer", action, id, err)
			}
		}
		if _, _, err := a.HAProxyConfig(ctx, id); err == nil {
			t.Errorf("config of %s: found", id)
		}
	}
	for _, id := range []string{"vrrp", "lvs", "certs", "plugged_interfaces", "interfaces", "stray", "unknown", "..", "lb1.sock", "stats_counters.json"} {
		if err := a.DeleteListener(ctx, id); err != nil {
			t.Errorf("delete %s: %v", id, err)
		}
	}
	if after := tree(t, dir); !reflect.DeepEqual(after, before) {
		t.Fatalf("files changed:\nbefore %v\nafter  %v", before, after)
	}
	if lbs, err := a.haproxyLayout().LoadBalancers(); err != nil || !reflect.DeepEqual(lbs, []string{"lb1"}) {
		t.Fatalf("load balancers %v, %v", lbs, err)
	}

	// A real delete removes the load balancer and its certificates only.
	if err := a.DeleteListener(ctx, "lb1"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"lib/lb1", "lib/certs/lb1"} {
		if _, err := os.Stat(filepath.Join(dir, p)); !os.IsNotExist(err) {
			t.Errorf("%s left after delete: %v", p, err)
		}
		for k := range before {
			if k == p || strings.HasPrefix(k, p+"/") {
				delete(before, k)
			}
		}
	}
	// The check script changes with the load balancers; see the next test.
	delete(before, "lib/vrrp/check_scripts/haproxy_check_script.sh")
	after := tree(t, dir)
	delete(after, "lib/vrrp/check_scripts/haproxy_check_script.sh")
	if !reflect.DeepEqual(after, before) {
		t.Fatalf("deleting lb1 touched other files:\nwant %v\ngot  %v", before, after)
	}
}

// Deleting the last load balancer of an ACTIVE_STANDBY amphora leaves
// keepalived's HAProxy check passing, as upstream: "exit 1" would make
// both amphorae FAULT and drop the VIP.
func TestDeletingLastLoadBalancerKeepsVRRPCheckPassing(t *testing.T) {
	dir := t.TempDir()
	a := sandboxAgent(t, dir, "ACTIVE_STANDBY")
	f := &fixture{dir: dir}
	f.write("lib/vrrp/check_script.sh", "#!/bin/bash\n")
	f.write("lib/lb1/haproxy.cfg", lbConfig("L1"))
	f.write("lib/lb2/haproxy.cfg", lbConfig("L2"))
	check := filepath.Join(dir, "lib", "vrrp", "check_scripts", "haproxy_check_script.sh")
	ctx := context.Background()
	steps := []struct{ lb, want string }{
		{"lb2", "haproxy-vrrp-check " + filepath.Join(dir, "lib", "lb1.sock") + "; exit $?"},
		{"lb1", "haproxy-vrrp-check ; exit $?"},
	}
	for _, s := range steps {
		if err := a.DeleteListener(ctx, s.lb); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(check); err != nil || string(got) != s.want {
			t.Fatalf("after deleting %s: check %q (%v), want %q", s.lb, got, err, s.want)
		}
	}
	// Deleting an id that names nothing leaves the check alone.
	if err := os.WriteFile(check, []byte("sentinel"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteListener(ctx, "lb1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(check); string(got) != "sentinel" {
		t.Fatalf("deleting an unknown id rewrote the check: %q", got)
	}
}

// In ACTIVE_STANDBY a stop goes ahead when keepalived's check script
// cannot be rewritten (a full disk, here a file where its folder belongs),
// and the answer says what could not be recorded; a start still refuses.
func TestStopGoesAheadWhenTheCheckCannotBeWritten(t *testing.T) {
	dir := t.TempDir()
	conf := strings.Replace(baseConfig(dir), "loadbalancer_topology = SINGLE", "loadbalancer_topology = ACTIVE_STANDBY", 1)
	lbs := &fakeLBs{running: map[string]bool{"lb1": true}}
	a := New(Options{Config: configtest.Load(t, dir, conf), Runner: fakeRunner{}, LoadBalancers: lbs,
		Advertise: func(context.Context, string, []netip.Addr) error { return nil }})
	f := &fixture{dir: dir}
	f.write("lib/lb1/haproxy.cfg", lbConfig("L1"))
	f.write("lib/vrrp/check_scripts", "not a folder")
	ctx := context.Background()

	_, err := a.LoadBalancerAction(ctx, "lb1", "stop")
	if fe, ok := fault.As(err); !ok || fe.Kind != fault.KindInternal || fe.Message != "HAProxy stopped, but the VRRP check script could not be updated" || fe.Details == "" {
		t.Fatalf("stop: %v", err)
	}
	if _, err := a.LoadBalancerAction(ctx, "lb1", "start"); err == nil {
		t.Fatal("start went ahead without its check script")
	}
	if want := []string{"stop lb1"}; !reflect.DeepEqual(lbs.calls, want) {
		t.Fatalf("calls %v, want %v", lbs.calls, want)
	}
}
