package agent

import (
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/amphora-agent/amphora-agent/agent/config/configtest"
	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/keepalived"
)

// fakeLVS stores configs where the real one does (listing and status read
// them) and records lifecycle calls; fail makes them fail.
type fakeLVS struct {
	layout keepalived.LVSLayout
	calls  []string
	fail   error
	// inPlace: Reload sends SIGHUP (a keepalived whose reload keeps the
	// members' states) rather than restarting.
	inPlace bool
}

func (f *fakeLVS) rec(s string) error { f.calls = append(f.calls, s); return f.fail }

func (f *fakeLVS) Upload(_ context.Context, id string, body []byte) error {
	os.MkdirAll(f.layout.Dir(), 0o755)
	return errors.Join(f.rec("upload "+id), os.WriteFile(f.layout.ConfigPath(id), body, 0o644))
}
func (f *fakeLVS) Config(id string) ([]byte, error) {
	if !f.Exists(id) {
		return nil, fault.NotFound("UDP Listener Not Found", "No UDP listener with UUID: "+id)
	}
	return os.ReadFile(f.layout.ConfigPath(id))
}
func (f *fakeLVS) Exists(id string) bool {
	_, err := os.Stat(f.layout.ConfigPath(id))
	return err == nil
}
func (f *fakeLVS) Start(_ context.Context, id string) error   { return f.rec("start " + id) }
func (f *fakeLVS) Restart(_ context.Context, id string) error { return f.rec("restart " + id) }
func (f *fakeLVS) Stop(_ context.Context, id string) error    { return f.rec("stop " + id) }
func (f *fakeLVS) Reload(_ context.Context, id string) (bool, error) {
	if !f.inPlace {
		return false, f.rec("restart " + id)
	}
	return true, f.rec("reload " + id)
}
func (f *fakeLVS) Delete(_ context.Context, id string) error {
	if err := f.rec("delete " + id); err != nil {
		return err
	}
	return os.Remove(f.layout.ConfigPath(id))
}
func (f *fakeLVS) Restore(context.Context) error { return f.rec("restore") }
func (f *fakeLVS) Busy(string) bool              { return false }
func (f *fakeLVS) Close()                        {}

const lvsConfig = "net_namespace amphora-haproxy\n\nvirtual_server_group ipv4-group {\n    203.0.113.10 53\n}\n\nvirtual_server group ipv4-group {\n}\n"

func lvsAgent(t *testing.T, topology string) (*Agent, *fakeLVS, *[]netip.Addr, string) {
	dir := t.TempDir()
	conf := strings.Replace(baseConfig(dir), "loadbalancer_topology = SINGLE", "loadbalancer_topology = "+topology, 1)
	cfg := configtest.Load(t, dir, conf)
	lvs := &fakeLVS{layout: keepalived.LVSLayout{Base: cfg.BasePath}}
	var advertised []netip.Addr
	a := New(Options{Config: cfg, Runner: fakeRunner{}, LoadBalancers: &fakeLBs{running: map[string]bool{}}, LVS: lvs,
		Advertise: func(_ context.Context, _ string, addrs []netip.Addr) error {
			advertised = append(advertised, addrs...)
			return nil
		}})
	return a, lvs, &advertised, cfg.BasePath
}

func TestLVSListenerThroughTheSharedRoutes(t *testing.T) {
	a, lvs, advertised, _ := lvsAgent(t, "SINGLE")
	ctx := context.Background()
	etag, err := a.UploadLVS(ctx, "amp", "l1", []byte(lvsConfig))
	if err != nil || etag != fmt.Sprintf("%x", md5.Sum([]byte(lvsConfig))) {
		t.Fatalf("upload: %q, %v", etag, err)
	}
	for _, action := range []string{"START", "reload", "stop"} {
		got, err := a.LoadBalancerAction(ctx, "l1", action)
		// Sic: upstream's spellings; this keepalived's reload is a
		// restart.
		want := map[string]string{"START": "started", "reload": "restarted", "stop": "stoped"}[action]
		if err != nil || got != "keepalivedlvs listener l1 "+want {
			t.Fatalf("%s: %q, %v; want %q", action, got, err, want)
		}
	}
	if _, err := a.LoadBalancerAction(ctx, "l1", "restart"); err == nil {
		t.Fatal("restart accepted")
	}
	if err := a.DeleteListener(ctx, "l1"); err != nil {
		t.Fatal(err)
	}
	want := []string{"upload l1", "start l1", "restart l1", "stop l1", "delete l1"}
	if !reflect.DeepEqual(lvs.calls, want) {
		t.Fatalf("calls %v, want %v", lvs.calls, want)
	}
	// Advertised after start and restart, in SINGLE topology.
	if len(*advertised) != 2 || (*advertised)[0].String() != "203.0.113.10" {
		t.Fatalf("advertised %v", *advertised)
	}
	// Gone: the shared routes answer as for an unknown load balancer.
	if _, err := a.LoadBalancerAction(ctx, "l1", "start"); !isFault(err, "Loadbalancer Not Found") {
		t.Fatalf("start after delete: %v", err)
	}
	if err := a.DeleteListener(ctx, "l1"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.LVSConfig(ctx, "l1"); !isFault(err, "UDP Listener Not Found") {
		t.Fatalf("GET after delete: %v", err)
	}
}

// Where keepalived's reload keeps the members' states, a controller's
// reload is one (SIGHUP), answered as such and followed, as a restart is,
// by the VIPs' announcement.
func TestLVSReloadInPlace(t *testing.T) {
	a, lvs, advertised, _ := lvsAgent(t, "SINGLE")
	lvs.inPlace = true
	ctx := context.Background()
	if _, err := a.UploadLVS(ctx, "amp", "l1", []byte(lvsConfig)); err != nil {
		t.Fatal(err)
	}
	got, err := a.LoadBalancerAction(ctx, "l1", "reload")
	if err != nil || got != "keepalivedlvs listener l1 reloaded" {
		t.Fatalf("reload: %q, %v", got, err)
	}
	if want := []string{"upload l1", "reload l1"}; !reflect.DeepEqual(lvs.calls, want) {
		t.Fatalf("calls %v, want %v", lvs.calls, want)
	}
	if len(*advertised) != 1 || (*advertised)[0].String() != "203.0.113.10" {
		t.Fatalf("advertised %v", *advertised)
	}
	lvs.fail = errors.New("keepalived exited on reload")
	if _, err := a.LoadBalancerAction(ctx, "l1", "reload"); !isFault(err, "Failed to reload keepalivedlvs listener l1") {
		t.Fatalf("failed reload: %v", err)
	}
}

func isFault(err error, message string) bool {
	f, ok := fault.As(err)
	return ok && f.Message == message
}

func TestLVSFailuresAnswerAsUpstream(t *testing.T) {
	a, lvs, _, _ := lvsAgent(t, "SINGLE")
	ctx := context.Background()
	if _, err := a.UploadLVS(ctx, "amp", "l1", []byte(lvsConfig)); err != nil {
		t.Fatal(err)
	}
	lvs.fail = errors.New("keepalived exited with status 1")
	for action, msg := range map[string]string{
		"start":  "Failed to start keepalivedlvs listener l1",
		"reload": "Failed to restart keepalivedlvs listener l1",
		"stop":   "Failed to stop keepalivedlvs listener l1",
	} {
		_, err := a.LoadBalancerAction(ctx, "l1", action)
		if f, ok := fault.As(err); !ok || f.Message != msg || f.Details != lvs.fail.Error() {
			t.Errorf("%s: %v", action, err)
		}
	}
	if err := a.DeleteListener(ctx, "l1"); !isFault(err, "Error stopping keepalivedlvs") {
		t.Errorf("delete: %v", err)
	}
	// Ids are checked like load balancer ids.
	for _, id := range []string{"..", "vrrp", "lvs", "a b"} {
		if _, err := a.UploadLVS(ctx, "amp", id, []byte(lvsConfig)); !isFault(err, "Invalid request") {
			t.Errorf("upload %q: %v", id, err)
		}
	}
}

// A load balancer of the same id wins, as upstream.
func TestLoadBalancerWinsOverLVSListener(t *testing.T) {
	a, lvs, _, base := lvsAgent(t, "SINGLE")
	ctx := context.Background()
	if _, err := a.UploadLVS(ctx, "amp", "x1", []byte(lvsConfig)); err != nil {
		t.Fatal(err)
	}
	f := &fixture{dir: filepath.Dir(base)}
	f.write("lib/x1/haproxy.cfg", "frontend L1\n    mode http\n")
	if got, err := a.LoadBalancerAction(ctx, "x1", "stop"); err != nil || got != "Listener x1 stoped" {
		t.Fatalf("stop: %q, %v", got, err)
	}
	if len(lvs.calls) != 1 {
		t.Fatalf("LVS calls %v", lvs.calls)
	}
}

// In ACTIVE_STANDBY an upload installs the listeners' VRRP check and
// drops the HAProxy one that would fail with no load balancer.
func TestLVSUploadKeepsTheVRRPChecksCurrent(t *testing.T) {
	a, _, advertised, base := lvsAgent(t, "ACTIVE_STANDBY")
	ctx := context.Background()
	if _, err := a.UploadLVS(ctx, "amp", "l1", []byte(lvsConfig)); err != nil {
		t.Fatal(err)
	}
	checks := filepath.Join(base, "vrrp", "check_scripts")
	script, err := os.ReadFile(filepath.Join(checks, "lvs_udp_check.sh"))
	if err != nil || !strings.Contains(string(script), filepath.Join(base, "lvs")+"/octavia-keepalivedlvs-*.pid") {
		t.Fatalf("lvs_udp_check.sh: %q, %v", script, err)
	}
	if _, err := os.Stat(filepath.Join(checks, "haproxy_check_script.sh")); !os.IsNotExist(err) {
		t.Fatalf("haproxy check with only LVS listeners: %v", err)
	}
	if _, err := a.LoadBalancerAction(ctx, "l1", "reload"); err != nil || len(*advertised) != 0 {
		t.Fatalf("reload: %v, advertised %v", err, *advertised)
	}
	l, err := a.Listeners(ctx)
	if err != nil || len(l) != 1 || l[0] != (ListenerStatus{Status: "OFFLINE", UUID: "l1", Type: "UDP"}) {
		t.Fatalf("listeners %+v, %v", l, err)
	}
}
