//go:build system

package system_test

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/tiersutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/vrrputil"
)

// exactlyOneMaster waits until one amphora holds the VIP and the other
// does not, and returns the holder.
func exactlyOneMaster(t *testing.T, amps ...*vrrputil.Amp) (master, backup *vrrputil.Amp) {
	t.Helper()
	testenv.WaitFor(t, 30*time.Second, "exactly one amphora holding the VIP", func() bool {
		a, b := amps[0].HoldsVIP(t), amps[1].HoldsVIP(t)
		switch {
		case a && !b:
			master, backup = amps[0], amps[1]
		case b && !a:
			master, backup = amps[1], amps[0]
		default:
			return false
		}
		return true
	})
	return master, backup
}

func TestVRRPActiveStandby(t *testing.T) {
	topo.RequireRoot(t)
	if _, err := os.Stat("/usr/sbin/keepalived"); err != nil {
		t.Skip("keepalived is not installed (make test installs it)")
	}
	a := vrrputil.NewAmp(t, "a", "203.0.113.4", 100)
	b := vrrputil.NewAmp(t, "b", "203.0.113.5", 90)
	topo.Link(t, a.NS, "eth1", []string{a.Addr + "/24"}, b.NS, "eth1", []string{b.Addr + "/24"})
	a.Env.Start()
	b.Env.Start()

	// Without a VRRP config heartbeats flow.
	if !a.Heartbeat(10 * time.Second) {
		t.Fatalf("no heartbeat before the VRRP upload\n%s", a.Env.Output())
	}

	// A config cut short is refused with keepalived's words.
	cut := a.Config(b.Addr)
	status, _, body := a.Env.Do("PUT", "/1.0/vrrp/upload", []byte(cut[:strings.LastIndex(cut, "}")]))
	if status != 400 || !strings.HasPrefix(string(body), `{"message":"Invalid request","details":"`) || !strings.Contains(string(body), "missing '}'") {
		t.Fatalf("invalid upload: %d %s", status, body)
	}
	for _, amp := range []*vrrputil.Amp{a, b} {
		peer := b.Addr
		if amp == b {
			peer = a.Addr
		}
		cfg := []byte(amp.Config(peer))
		req, _ := http.NewRequest("PUT", amp.Env.URL("/1.0/vrrp/upload"), bytes.NewReader(cfg))
		resp, err := amp.Env.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		status, hdr := resp.StatusCode, resp.Header.Get("ETag")
		if status != 200 || string(body) != `{"message":"OK"}` || hdr != tiersutil.MD5Hex(cfg) {
			t.Fatalf("%s: upload = %d %s etag %q", amp.Name, status, body, hdr)
		}
		if amp.KeepalivedPid() != 0 {
			t.Fatalf("%s: the upload started keepalived", amp.Name)
		}
		// No load balancer here: the agent's HAProxy check says "exit 1"
		// (stay BACKUP). Stand in for a healthy HAProxy.
		check := filepath.Join(amp.Base(), "vrrp", "check_scripts", "haproxy_check_script.sh")
		if got, err := os.ReadFile(check); err != nil || string(got) != "exit 1" {
			t.Fatalf("%s: HAProxy check %q %v", amp.Name, got, err)
		}
		if err := os.WriteFile(check, []byte("exit 0"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A config and no keepalived: heartbeats stop (the controller would
	// fail the amphora over).
	testenv.WaitFor(t, 10*time.Second, "the keepalived gate in the log", func() bool {
		return a.Env.Count("no heartbeat sent: keepalived is configured") > 0
	})
	a.Drain()
	if a.Heartbeat(3 * time.Second) {
		t.Fatal("heartbeat sent while a VRRP config exists and keepalived is stopped")
	}

	a.VRRP(t, "start", 202, `{"message":"OK","details":"keepalived started"}`)
	b.VRRP(t, "START", 202, `{"message":"OK","details":"keepalived started"}`)
	a.VRRP(t, "start", 202, `{"message":"OK","details":"keepalived reloaded"}`)
	a.VRRP(t, "restart", 400, `{"message":"Invalid Request","details":"Unknown action: restart"}`)
	if !a.Heartbeat(10 * time.Second) {
		t.Fatalf("no heartbeat with keepalived running\n%s", a.Env.Output())
	}

	master, _ := exactlyOneMaster(t, a, b)
	t.Logf("MASTER: %s", master.Name)

	// kill -9 keepalived on the MASTER: the agent starts it again.
	old := master.KeepalivedPid()
	if old == 0 {
		t.Fatal("no keepalived behind the pid file")
	}
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "keepalived respawned", func() bool {
		pid := master.KeepalivedPid()
		return pid != 0 && pid != old && master.Env.Count("keepalived restarted", `"old_pid": `+strconv.Itoa(old)) > 0
	})
	if master.Env.Count("keepalived died; restarting it", "killed by signal killed") == 0 {
		t.Fatalf("the death was not logged\n%s", master.Env.Output())
	}
	master, _ = exactlyOneMaster(t, a, b)

	// An agent restart adopts the running keepalived.
	pid := master.KeepalivedPid()
	master.Env.Stop()
	if master.KeepalivedPid() != pid {
		t.Fatal("keepalived did not survive the agent")
	}
	master.Env.Start()
	testenv.WaitFor(t, 10*time.Second, "adoption", func() bool {
		return master.Env.Count("adopted running keepalived", `"pid": `+strconv.Itoa(pid)) > 0
	})
	master.VRRP(t, "start", 202, `{"message":"OK","details":"keepalived reloaded"}`)
	if master.KeepalivedPid() != pid {
		t.Fatal("start of an adopted keepalived did not reload it")
	}

	// Stop on the MASTER: the VIP moves, and the stop is remembered.
	master.VRRP(t, "stop", 202, `{"message":"OK","details":"keepalived stoped"}`)
	if master.KeepalivedPid() != 0 {
		t.Fatal("keepalived still runs after stop")
	}
	newMaster, _ := exactlyOneMaster(t, a, b)
	if newMaster == master {
		t.Fatalf("the VIP stayed on %s after its keepalived stopped", master.Name)
	}
	testenv.WaitFor(t, 10*time.Second, "the keepalived gate after stop", func() bool {
		return master.Env.Count("no heartbeat sent: keepalived is configured") > 0
	})
	master.Drain()
	if master.Heartbeat(3 * time.Second) {
		t.Fatal("heartbeat sent after keepalived was stopped")
	}
	if !newMaster.Heartbeat(5 * time.Second) {
		t.Fatal("the new MASTER sends no heartbeats")
	}
	// A restarted agent keeps it stopped: once the restore has released
	// the mutation lock (an upload waits for it), keepalived still does
	// not run.
	master.Env.Stop()
	master.Env.Start()
	peer := a.Addr
	if master == a {
		peer = b.Addr
	}
	if status, _, body := master.Env.Do("PUT", "/1.0/vrrp/upload", []byte(master.Config(peer))); status != 200 {
		t.Fatalf("upload after restart: %d %s", status, body)
	}
	if master.KeepalivedPid() != 0 {
		t.Fatal("a stopped keepalived was started by the agent restart")
	}
	master.VRRP(t, "reload", 202, `{"message":"OK","details":"keepalived started"}`)
	if master.KeepalivedPid() == 0 {
		t.Fatal("reload of a stopped keepalived did not start it")
	}
}

// Deleting the last load balancer on both amphorae must not withdraw the
// VIP: the HAProxy check keepalived tracks stays passing (upstream leaves
// a check with no sockets), so one amphora keeps holding it.
func TestVRRPDeletingLastLoadBalancerKeepsVIP(t *testing.T) {
	topo.RequireRoot(t)
	if _, err := os.Stat("/usr/sbin/keepalived"); err != nil {
		t.Skip("keepalived is not installed (make test installs it)")
	}
	const lb = "6c7d4e1f-8a2b-4c3d-8e4f-1a2b3c4d5e6f"
	a := vrrputil.NewAmp(t, "a", "203.0.113.4", 100)
	b := vrrputil.NewAmp(t, "b", "203.0.113.5", 90)
	topo.Link(t, a.NS, "eth1", []string{a.Addr + "/24"}, b.NS, "eth1", []string{b.Addr + "/24"})
	for _, amp := range []*vrrputil.Amp{a, b} {
		amp.Env.Start()
		amp.LoadBalancer(t, lb)
	}
	for _, amp := range []*vrrputil.Amp{a, b} {
		peer := b.Addr
		if amp == b {
			peer = a.Addr
		}
		if status, _, body := amp.Env.Do("PUT", "/1.0/vrrp/upload", []byte(amp.WithCheckPath(t, peer))); status != 200 {
			t.Fatalf("%s: VRRP upload: %d %s", amp.Name, status, body)
		}
		amp.VRRP(t, "start", 202, `{"message":"OK","details":"keepalived started"}`)
	}
	exactlyOneMaster(t, a, b)

	for _, amp := range []*vrrputil.Amp{a, b} {
		if status, _, body := amp.Env.Do("DELETE", "/1.0/listeners/"+lb, nil); status != 200 {
			t.Fatalf("%s: delete: %d %s", amp.Name, status, body)
		}
		check := filepath.Join(amp.Base(), "vrrp", "check_scripts", "haproxy_check_script.sh")
		if got, err := os.ReadFile(check); err != nil || string(got) != "haproxy-vrrp-check ; exit $?" {
			t.Fatalf("%s: HAProxy check after the delete: %q %v", amp.Name, got, err)
		}
	}
	// keepalived runs the check every second and gives up after two
	// failures: well inside this window.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ha, hb := a.HoldsVIP(t), b.HoldsVIP(t); ha == hb {
			t.Fatalf("after the delete: a holds the VIP %v, b %v\n%s\n%s", ha, hb, a.Env.Output(), b.Env.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
