package agent

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/config"
	"github.com/amphora-agent/amphora-agent/agent/config/configtest"
	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/sysinfo"
	"github.com/amphora-agent/amphora-agent/certs/devpki"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// fakeRunner answers package queries like a Debian amphora.
type fakeRunner struct{}

func (fakeRunner) Output(_ context.Context, name string, args ...string) ([]byte, error) {
	if name != "dpkg-query" {
		return nil, errors.New("unexpected command " + name)
	}
	switch args[len(args)-1] {
	case "haproxy":
		return []byte("1:2.6.12-1+deb12u1"), nil
	case "keepalived":
		return []byte("1:2.2.7-1+b2"), nil
	case "ipvsadm":
		return []byte("1:1.31-1+b1"), nil
	}
	return nil, errors.New("not installed")
}

func (f fakeRunner) CombinedOutput(ctx context.Context, name string, args ...string) ([]byte, error) {
	return f.Output(ctx, name, args...)
}

type fixture struct {
	dir  string
	conf string
	a    *Agent
}

// baseConfig keeps every path the agent writes inside dir
// (configtest.Load checks it).
func baseConfig(dir string) string {
	return `
[haproxy_amphora]
base_path = ` + filepath.Join(dir, "lib") + `
base_cert_dir = ` + filepath.Join(dir, "lib", "certs") + `
[health_manager]
controller_ip_port_list = 192.0.2.10:5555
heartbeat_interval = 10
heartbeat_key = insecure
[amphora_agent]
amphora_id = amp-1
agent_server_cert = ` + filepath.Join(dir, "server.pem") + `
agent_server_ca = ` + filepath.Join(dir, "ca.pem") + `
agent_server_network_dir = ` + filepath.Join(dir, "interfaces") + `
plugged_interfaces_file = ` + filepath.Join(dir, "lib", "plugged_interfaces") + `
nftables_rules_file = ` + filepath.Join(dir, "lib", "nftables-vip.rules") + `
haproxy_user_group_file = ` + filepath.Join(dir, "lib", "haproxy-default-user-group.conf") + `
pci_rescan_file = ` + filepath.Join(dir, "pci-rescan") + `
network_namespace = amphora-agent-unit-test-absent
[controller_worker]
loadbalancer_topology = SINGLE
`
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{dir: dir, conf: filepath.Join(dir, "amphora-agent.conf")}
	if err := os.WriteFile(f.conf, []byte(baseConfig(dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := configtest.Load(t, dir, baseConfig(dir))
	f.a = New(Options{
		ConfigFiles: []string{f.conf},
		Config:      cfg,
		Runner:      fakeRunner{},
		OSRelease:   f.write("os-release", "ID=debian\n"),
		Host:        sysinfo.Reader{TunedProfileFile: filepath.Join(dir, "no-tuned")},
	})
	return f
}

func (f *fixture) write(rel, content string) string {
	p := filepath.Join(f.dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		panic(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		panic(err)
	}
	return p
}

func lbConfig(frontends ...string) string {
	var b strings.Builder
	b.WriteString("global\n    stats socket /tmp/x.sock mode 0666 level user\n")
	for _, f := range frontends {
		b.WriteString("frontend " + f + "\n    mode http\n    bind 203.0.113.1:80\n")
	}
	return b.String()
}

func TestInfoStripsHAProxyEpochOnly(t *testing.T) {
	f := newFixture(t)
	info, err := f.a.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.HAProxyVersion != "2.6.12-1+deb12u1" || info.KeepalivedVersion != "1:2.2.7-1+b2" ||
		info.IPVSAdmVersion != "1:1.31-1+b1" || info.APIVersion != "1.0" || info.Hostname == "" {
		t.Fatalf("info = %+v", info)
	}
}

// slowStartRunner times out every query until ready is set, as dpkg-query
// and haproxy -v did on an amphora booting on a busy host.
type slowStartRunner struct {
	fakeRunner
	ready *atomic.Bool
}

func (r slowStartRunner) Output(ctx context.Context, name string, args ...string) ([]byte, error) {
	if !r.ready.Load() {
		return nil, context.DeadlineExceeded
	}
	return r.fakeRunner.Output(ctx, name, args...)
}

func (r slowStartRunner) CombinedOutput(ctx context.Context, name string, args ...string) ([]byte, error) {
	return r.Output(ctx, name, args...)
}

// TestInfoLooksUpMissedVersionsAgain: versions the start-up lookup missed
// are looked up again by a later /info, which then reports them (Octavia
// cannot parse an empty haproxy_version and skips such an amphora's
// listeners).
func TestInfoLooksUpMissedVersionsAgain(t *testing.T) {
	f := newFixture(t)
	var ready atomic.Bool
	f.a.runner = slowStartRunner{ready: &ready}
	info, err := f.a.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.HAProxyVersion != "" {
		t.Fatalf("every query timed out, yet haproxy_version %q", info.HAProxyVersion)
	}
	ready.Store(true)
	info, err = f.a.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.HAProxyVersion != "2.6.12-1+deb12u1" || info.KeepalivedVersion != "1:2.2.7-1+b2" || info.IPVSAdmVersion != "1:1.31-1+b1" {
		t.Fatalf("after the queries answer again: %+v, want the versions found", info)
	}
}

func TestDetailsFromStoredState(t *testing.T) {
	f := newFixture(t)
	self := strconv.Itoa(os.Getpid())
	f.write("lib/lb-b/haproxy.cfg", lbConfig("L3", "L1"))
	f.write("lib/lb-b/lb-b.pid", self) // running
	f.write("lib/lb-a/haproxy.cfg", lbConfig("L2"))
	f.write("lib/lb-a/lb-a.pid", "2147483646") // stale
	f.write("lib/not-an-lb/readme", "x")
	f.write("lib/lvs/octavia-keepalivedlvs-U1.conf", "virtual_server group g {\n}\n")
	f.write("lib/lvs/octavia-keepalivedlvs-U1.pid", self)
	f.write("lib/lvs/octavia-keepalivedlvs-L1.conf", "virtual_server group g {\n}\n")

	d, err := f.a.Details(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d.HAProxyCount != 1 {
		t.Errorf("haproxy_count = %d, want 1", d.HAProxyCount)
	}
	if want := []string{"L1", "L2", "L3", "U1"}; !reflect.DeepEqual(d.Listeners, want) {
		t.Errorf("listeners = %v, want %v (sorted union, no duplicates)", d.Listeners, want)
	}
	if d.LVSListenerProcessCount != 1 {
		t.Errorf("lvs_listener_process_count = %d, want 1", d.LVSListenerProcessCount)
	}

	// Every key of the spec, with the JSON type the controller expects.
	raw, _ := json.Marshal(d)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	wantTypes := map[string]string{
		"hostname": "string", "haproxy_version": "string", "api_version": "string", "networks": "object",
		"active": "bool", "haproxy_count": "number", "cpu_count": "number", "cpu": "object", "memory": "object",
		"disk": "object", "load": "array", "active_tuned_profiles": "string", "topology": "string",
		"topology_status": "string", "listeners": "array", "packages": "object",
		"lvs_listener_process_count": "number", "keepalived_version": "string", "ipvsadm_version": "string",
	}
	var keys []string
	for k, v := range m {
		keys = append(keys, k)
		if got := jsonType(v); got != wantTypes[k] {
			t.Errorf("%s: JSON type %s, want %s", k, got, wantTypes[k])
		}
	}
	sort.Strings(keys)
	if len(keys) != len(wantTypes) {
		t.Errorf("keys = %v", keys)
	}
	for _, k := range []string{"total", "free", "buffers", "cached", "swap_used", "shared", "slab"} {
		if _, ok := m["memory"].(map[string]any)[k].(float64); !ok {
			t.Errorf("memory.%s missing or not a number", k)
		}
	}
	cpu := m["cpu"].(map[string]any)
	if _, ok := cpu["total"].(float64); !ok {
		t.Error("cpu.total is not a number")
	}
	for _, k := range []string{"user", "system", "soft_irq"} {
		if _, ok := cpu[k].(string); !ok {
			t.Errorf("cpu.%s is not a string (upstream quirk)", k)
		}
	}
	if m["topology"] != "SINGLE" || m["topology_status"] != "OK" || m["active"] != true {
		t.Errorf("fixed fields: %v %v %v", m["topology"], m["topology_status"], m["active"])
	}
}

func jsonType(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case bool:
		return "bool"
	case float64:
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "null"
}

func TestListeners(t *testing.T) {
	f := newFixture(t)
	got, err := f.a.Listeners(context.Background())
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("no state: %v, %v; want an empty list", got, err)
	}
	f.write("lib/lb-a/haproxy.cfg", lbConfig("L1")+
		"frontend L2\n    mode http\n    bind 203.0.113.1:443 ssl crt-list /x/L2.pem\n")
	f.write("lib/lvs/octavia-keepalivedlvs-U1.conf", "virtual_server group g {\n}\n")
	got, err = f.a.Listeners(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []ListenerStatus{
		{"ACTIVE", "L1", "HTTP"}, {"ACTIVE", "L2", "TERMINATED_HTTPS"}, {"OFFLINE", "U1", "UDP"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Listeners = %v, want %v", got, want)
	}
}

func TestUpdateConfig(t *testing.T) {
	f := newFixture(t)
	var mu sync.Mutex
	var seen []*config.Config
	f.a.OnConfig(func(c *config.Config) { mu.Lock(); seen = append(seen, c); mu.Unlock() })
	original, _ := os.ReadFile(f.conf)

	bad := strings.Replace(string(original), "loadbalancer_topology = SINGLE", "loadbalancer_topology = ACTIVE_PASSIVE", 1)
	err := f.a.UpdateConfig(context.Background(), []byte(bad))
	if fe, ok := fault.As(err); !ok || fe.Kind != fault.KindInvalid || !strings.Contains(fe.Details, "loadbalancer_topology") {
		t.Fatalf("invalid upload: %v", err)
	}
	// A bad heartbeat value is refused on upload even though start-up only
	// warns about it.
	badHB := strings.Replace(string(original), "heartbeat_interval = 10", "heartbeat_interval = ten", 1)
	if err := f.a.UpdateConfig(context.Background(), []byte(badHB)); err == nil {
		t.Fatal("upload with heartbeat_interval = ten accepted")
	}
	if now, _ := os.ReadFile(f.conf); string(now) != string(original) || len(seen) != 0 {
		t.Fatal("a refused upload changed the file or the running configuration")
	}

	good := strings.NewReplacer(
		"loadbalancer_topology = SINGLE", "loadbalancer_topology = ACTIVE_STANDBY",
		"heartbeat_interval = 10", "heartbeat_interval = 3",
		"heartbeat_key = insecure", "heartbeat_key = rotated",
		"controller_ip_port_list = 192.0.2.10:5555", "controller_ip_port_list = 192.0.2.20:5555, [2001:db8::1]:5556",
	).Replace(string(original))
	if err := f.a.UpdateConfig(context.Background(), []byte(good)); err != nil {
		t.Fatal(err)
	}
	if now, _ := os.ReadFile(f.conf); string(now) != good {
		t.Fatal("file not replaced")
	}
	if st, _ := os.Stat(f.conf); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode().Perm())
	}
	cfg := f.a.Config()
	if !cfg.ActiveStandby() || cfg.HeartbeatInterval.Seconds() != 3 || cfg.HeartbeatKey != "rotated" ||
		!reflect.DeepEqual(cfg.ControllerIPPortList, []string{"192.0.2.20:5555", "[2001:db8::1]:5556"}) {
		t.Fatalf("live config not updated: %+v", cfg)
	}
	if len(seen) != 1 || seen[0] != cfg {
		t.Fatalf("watchers saw %d configs", len(seen))
	}

	// SIGHUP path: the file is the source of truth again.
	if err := os.WriteFile(f.conf, original, 0o600); err != nil {
		t.Fatal(err)
	}
	// While another mutation runs, SIGHUP waits its turn (here: gives up
	// waiting) instead of slipping a configuration in under it.
	free := holdTheLock(f.a)
	busy, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err = f.a.Reload(busy)
	cancel()
	if fe, ok := fault.As(err); !ok || fe.Message != "Request abandoned" || !f.a.Config().ActiveStandby() || len(seen) != 1 {
		t.Fatalf("SIGHUP during a mutation: %v; applied %d", err, len(seen))
	}
	free()
	if err := f.a.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.a.Config().ActiveStandby() || len(seen) != 2 {
		t.Fatal("Reload did not apply the file")
	}
}

// SIGHUP refuses what PUT /1.0/config refuses, and keeps the configuration
// in force when it does.
func TestReloadRefusesWhatUploadRefuses(t *testing.T) {
	f := newFixture(t)
	var seen int
	f.a.OnConfig(func(*config.Config) { seen++ })
	original, _ := os.ReadFile(f.conf)
	before := f.a.Config()
	cases := []struct{ name, file, want string }{
		{"substitution in the key", strings.Replace(string(original), "heartbeat_key = insecure", "heartbeat_key = $foo", 1), `substitution of "$foo"`},
		{"empty file", "", "controller_ip_port_list and [health_manager] heartbeat_key are not set"},
		{"no health managers written", strings.Replace(string(original), "controller_ip_port_list = 192.0.2.10:5555\n", "", 1), "controller_ip_port_list is not set"},
		{"bad heartbeat interval", strings.Replace(string(original), "heartbeat_interval = 10", "heartbeat_interval = ten", 1), "heartbeat_interval"},
		{"bad topology", strings.Replace(string(original), "loadbalancer_topology = SINGLE", "loadbalancer_topology = ACTIVE_PASSIVE", 1), "loadbalancer_topology"},
	}
	for _, c := range cases {
		upErr := f.a.UpdateConfig(context.Background(), []byte(c.file))
		if fe, ok := fault.As(upErr); !ok || fe.Kind != fault.KindInvalid || !strings.Contains(fe.Details, c.want) {
			t.Errorf("%s: PUT /1.0/config: %v; want it refused naming %q", c.name, upErr, c.want)
		}
		if err := os.WriteFile(f.conf, []byte(c.file), 0o600); err != nil {
			t.Fatal(err)
		}
		err := f.a.Reload(context.Background())
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), f.conf) {
			t.Errorf("%s: SIGHUP: %v; want an error naming %s and %q", c.name, err, f.conf, c.want)
		}
		if f.a.Config() != before || seen != 0 {
			t.Fatalf("%s: SIGHUP put a refused configuration in force: key %q, controllers %v",
				c.name, f.a.Config().HeartbeatKey, f.a.Config().ControllerIPPortList)
		}
	}
	if err := os.WriteFile(f.conf, original, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.a.Reload(context.Background()); err != nil || seen != 1 {
		t.Fatalf("SIGHUP with the good file again: %v, applied %d", err, seen)
	}
}

func TestRotateCertificate(t *testing.T) {
	f := newFixture(t)
	ca, err := devpki.NewAuthority("ca")
	if err != nil {
		t.Fatal(err)
	}
	old, _ := ca.Server("amp-1")
	next, _ := ca.Server("amp-1")
	certPath := f.write("server.pem", string(old.Combined()))

	expired, _ := ca.ServerValid("amp-1", []string{"amp-1"}, time.Now().Add(-30*24*time.Hour), time.Now().Add(-48*time.Hour))
	other, _ := ca.Server("amp-2")
	for name, body := range map[string][]byte{
		"certificate without key": next.CertPEM,
		"expired two days ago":    expired.Combined(),
		"another amphora's":       other.Combined(),
	} {
		err = f.a.RotateCertificate(context.Background(), body)
		if fe, ok := fault.As(err); !ok || fe.Kind != fault.KindInvalid || fe.Message != "Invalid certificate" {
			t.Fatalf("%s: %v", name, err)
		}
		if now, _ := os.ReadFile(certPath); string(now) != string(old.Combined()) {
			t.Fatalf("refused upload (%s) replaced the file", name)
		}
	}
	if err := f.a.RotateCertificate(context.Background(), next.Combined()); err != nil {
		t.Fatal(err)
	}
	if now, _ := os.ReadFile(certPath); string(now) != string(next.Combined()) {
		t.Fatal("file not replaced")
	}
	if st, _ := os.Stat(certPath); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode().Perm())
	}
}

// A rotation outside its validity period by the amphora's clock only (the
// controller's clock differs by minutes) is taken, with one warning saying
// by how much, and written in place of the old certificate.
func TestRotateCertificateToleratesClockSkew(t *testing.T) {
	f := newFixture(t)
	core, logs := observer.New(zap.InfoLevel)
	f.a.log = zap.New(core)
	ca, err := devpki.NewAuthority("ca")
	if err != nil {
		t.Fatal(err)
	}
	old, _ := ca.Server("amp-1")
	certPath := f.write("server.pem", string(old.Combined()))
	now := time.Now()
	early, _ := ca.ServerValid("amp-1", []string{"amp-1"}, now.Add(10*time.Minute), now.Add(30*24*time.Hour))
	late, _ := ca.ServerValid("amp-1", []string{"amp-1"}, now.Add(-30*24*time.Hour), now.Add(-10*time.Minute))
	for _, c := range []struct {
		name, field string
		body        []byte
	}{
		{"amphora's clock 10 minutes behind", "valid_in", early.Combined()},
		{"amphora's clock 10 minutes ahead", "expired_for", late.Combined()},
	} {
		logs.TakeAll()
		if err := f.a.RotateCertificate(context.Background(), c.body); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if now, _ := os.ReadFile(certPath); string(now) != string(c.body) {
			t.Fatalf("%s: file not replaced", c.name)
		}
		warned := logs.FilterLevelExact(zap.WarnLevel).All()
		if len(warned) != 1 {
			t.Fatalf("%s: %d warnings, want 1: %v", c.name, len(warned), warned)
		}
		skew, ok := warned[0].ContextMap()[c.field].(time.Duration)
		if !ok || skew < 9*time.Minute || skew > 11*time.Minute {
			t.Errorf("%s: warning %q has %s = %v, want about 10m", c.name, warned[0].Message, c.field, warned[0].ContextMap()[c.field])
		}
	}
}

func TestLoadBalancerActionValidation(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	cases := []struct {
		id, action      string
		kind            fault.Kind
		message, detail string
	}{
		// The action is checked before the load balancer's existence.
		{"unknown", "bogus", fault.KindInvalid, "Invalid Request", "Unknown action: bogus"},
		{"unknown", "RESTART", fault.KindInvalid, "Invalid Request", "Unknown action: restart"},
		{"unknown", "haproxy", fault.KindInvalid, "Invalid Request", "Unknown action: haproxy"},
		{"unknown", "START", fault.KindNotFound, "Loadbalancer Not Found", "No loadbalancer with UUID: unknown"},
		{"..", "reload", fault.KindNotFound, "Loadbalancer Not Found", "No loadbalancer with UUID: .."},
	}
	for _, c := range cases {
		_, err := f.a.LoadBalancerAction(ctx, c.id, c.action)
		fe, ok := fault.As(err)
		if !ok || fe.Kind != c.kind || fe.Message != c.message || fe.Details != c.detail {
			t.Errorf("%s %s: %v", c.id, c.action, err)
		}
	}
	// Deleting an unknown or unsafe id succeeds without side effects.
	for _, id := range []string{"unknown", ".."} {
		if err := f.a.DeleteListener(ctx, id); err != nil {
			t.Errorf("delete %s: %v", id, err)
		}
	}
}

// Options read once at start-up are named when a new configuration
// changes them.
func TestRestartOnlyOptions(t *testing.T) {
	old := &config.Config{PrometheusProxy: "127.0.0.1:9102", PrometheusExporter: "127.0.0.1:9101"}
	cur := *old
	cur.PrometheusProxy, cur.PrometheusExporter = "127.0.0.1:19102", "127.0.0.1:19101"
	got := restartOnly(old, &cur)
	want := []string{"[amphora_agent] prometheus_proxy_address", "[amphora_agent] prometheus_exporter_address"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if got := restartOnly(old, old); len(got) != 0 {
		t.Fatalf("unchanged: %v", got)
	}
}

// The status socket carries the agent's goroutine count, which make soak
// watches for leaks: it follows goroutines started and ended.
func TestLiveCountsGoroutines(t *testing.T) {
	f := newFixture(t)
	before := f.a.Live().Goroutines
	if before < 1 {
		t.Fatalf("goroutines = %d", before)
	}
	// The fixture's own goroutines come and go between two samples (a
	// background one ending made this fail once in 20 loaded runs with 5
	// extra), so the extra ones outnumber any such drift by far.
	const extra = 1000
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range extra {
		wg.Add(1)
		go func() { defer wg.Done(); <-stop }()
	}
	during := f.a.Live().Goroutines
	close(stop)
	wg.Wait()
	after := f.a.Live().Goroutines
	if during < extra || after > during-extra/2 {
		t.Fatalf("goroutines %d before, %d with %d more running, %d after they ended", before, during, extra, after)
	}
}
