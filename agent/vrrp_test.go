package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amphora-agent/amphora-agent/agent/config/configtest"
	"github.com/amphora-agent/amphora-agent/agent/fault"
)

// fakeVRRP records lifecycle calls; running decides whether start is a
// reload; fail makes the next call fail.
type fakeVRRP struct {
	calls   []string
	running bool
	fail    error
}

func (f *fakeVRRP) Upload(_ context.Context, body []byte) error {
	f.calls = append(f.calls, "upload")
	return f.fail
}
func (f *fakeVRRP) Start(context.Context) (bool, error) {
	f.calls = append(f.calls, "start")
	reloaded := f.running
	f.running = f.fail == nil
	return reloaded, f.fail
}
func (f *fakeVRRP) Reload(context.Context) (bool, error) {
	f.calls = append(f.calls, "reload")
	started := !f.running
	f.running = f.fail == nil
	return started, f.fail
}
func (f *fakeVRRP) Stop(context.Context) error {
	f.calls = append(f.calls, "stop")
	f.running = false
	return f.fail
}
func (f *fakeVRRP) Restore(context.Context) error { f.calls = append(f.calls, "restore"); return nil }
func (f *fakeVRRP) Close()                        {}

func vrrpAgent(t *testing.T, v *fakeVRRP) (*Agent, string) {
	dir := t.TempDir()
	conf := strings.Replace(baseConfig(dir), "loadbalancer_topology = SINGLE", "loadbalancer_topology = ACTIVE_STANDBY", 1)
	cfg := configtest.Load(t, dir, conf)
	return New(Options{Config: cfg, Runner: fakeRunner{}, LoadBalancers: &fakeLBs{running: map[string]bool{}}, VRRP: v}), cfg.BasePath
}

func TestVRRPActions(t *testing.T) {
	cases := []struct {
		action  string
		running bool
		fail    error
		details string
		err     string // "kind|message|details"
		calls   string
	}{
		{action: "start", details: "keepalived started", calls: "start"},
		{action: "START", running: true, details: "keepalived reloaded", calls: "start"},
		{action: "Reload", running: true, details: "keepalived reloaded", calls: "reload"},
		{action: "reload", details: "keepalived started", calls: "reload"},
		{action: "stop", running: true, details: "keepalived stoped", calls: "stop"},
		{action: "restart", err: "400|Invalid Request|Unknown action: restart"},
		{action: "UPLOAD", err: "400|Invalid Request|Unknown action: upload"},
		{action: "start", fail: errors.New("keepalived exit status 1\nno vrrp_instance"),
			err: "500|Failed to start octavia-keepalived service|keepalived exit status 1\nno vrrp_instance", calls: "start"},
		{action: "start", running: true, fail: errors.New("gone"),
			err: "500|Failed to reload octavia-keepalived service|gone", calls: "start"},
		{action: "stop", fail: errors.New("did not exit"),
			err: "500|Failed to stop octavia-keepalived service|did not exit", calls: "stop"},
		{action: "stop", fail: fault.Internal("keepalived stopped, but its stopped state could not be recorded", "no space left on device", nil),
			err: "500|keepalived stopped, but its stopped state could not be recorded|no space left on device", calls: "stop"},
	}
	status := map[fault.Kind]string{fault.KindInvalid: "400", fault.KindInternal: "500"}
	for _, c := range cases {
		v := &fakeVRRP{running: c.running, fail: c.fail}
		a, _ := vrrpAgent(t, v)
		details, err := a.VRRPAction(context.Background(), c.action)
		got := ""
		if err != nil {
			fe, ok := fault.As(err)
			if !ok || fe.Framework || !fe.HasDetails {
				t.Errorf("%s: untyped error %v", c.action, err)
				continue
			}
			got = status[fe.Kind] + "|" + fe.Message + "|" + fe.Details
		}
		if details != c.details || got != c.err || strings.Join(v.calls, ",") != c.calls {
			t.Errorf("%s (running %v): details %q err %q calls %q\nwant %q %q %q", c.action, c.running,
				details, got, v.calls, c.details, c.err, c.calls)
		}
	}
}

func TestVRRPUploadRefreshesTheHAProxyCheck(t *testing.T) {
	v := &fakeVRRP{}
	a, base := vrrpAgent(t, v)
	etag, err := a.UploadVRRP(context.Background(), []byte("vrrp_instance x {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if etag != "d4c61c58b671a8a2f76e3c5a58d525b8" {
		t.Fatalf("etag %q", etag)
	}
	// No load balancer and no LVS listener: the check forces BACKUP.
	got, err := os.ReadFile(filepath.Join(base, "vrrp", "check_scripts", "haproxy_check_script.sh"))
	if err != nil || string(got) != "exit 1" {
		t.Fatalf("haproxy check: %q %v", got, err)
	}
	if strings.Join(v.calls, ",") != "upload" {
		t.Fatalf("calls %v: an upload must not start keepalived", v.calls)
	}
	// A refused upload leaves the check alone and reports the refusal.
	os.Remove(filepath.Join(base, "vrrp", "check_scripts", "haproxy_check_script.sh"))
	v.fail = fault.Invalid("Invalid request", "bad")
	if _, err := a.UploadVRRP(context.Background(), []byte("x")); err != v.fail {
		t.Fatalf("refused upload: %v", err)
	}
	if _, err := os.Stat(filepath.Join(base, "vrrp", "check_scripts", "haproxy_check_script.sh")); !os.IsNotExist(err) {
		t.Fatalf("check refreshed after a refused upload: %v", err)
	}
}
