//go:build system

package tiers_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/pidfile"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
)

const vrrpVIP = "203.0.113.10"

// vrrpAmp is one ACTIVE_STANDBY amphora: an agent, its namespace, its
// VRRP address and a UDP socket receiving its heartbeats.
type vrrpAmp struct {
	name     string
	env      *testenv.Env
	ns       *topo.Namespace
	addr     string
	priority int
	hb       *net.UDPConn
}

func (a *vrrpAmp) base() string    { return a.env.Path("lib") }
func (a *vrrpAmp) pidPath() string { return filepath.Join(a.base(), "vrrp", "octavia-keepalived.pid") }

// keepalivedPid is the live keepalived behind the pid file, 0 if none.
func (a *vrrpAmp) keepalivedPid() int {
	pid, err := pidfile.Read(a.pidPath())
	if err != nil || !isKeepalived(pid) {
		return 0
	}
	return pid
}

// startKeepalived starts the agent, uploads a's config with peer as its
// peer and starts keepalived; it returns the config's path and the
// keepalived the pid file names. Whatever runs that config is killed when
// the test ends.
func (a *vrrpAmp) startKeepalived(t *testing.T, peer string) (cfgPath string, pid int) {
	t.Helper()
	cfgPath = filepath.Join(a.base(), "vrrp", "octavia-keepalived.conf")
	killDaemonsOf(t, "keepalived", cfgPath)
	e := a.env
	e.Start()
	if status, _, body := e.Do("PUT", "/1.0/vrrp/upload", []byte(a.config(peer))); status != 200 {
		t.Fatalf("upload: %d %s", status, body)
	}
	if status, _, body := e.Do("PUT", "/1.0/vrrp/start", nil); status != 202 {
		t.Fatalf("start: %d %s\n%s", status, body, e.Output())
	}
	if pid = a.keepalivedPid(); pid == 0 {
		t.Fatal("no keepalived behind the pid file after start")
	}
	return cfgPath, pid
}

func isKeepalived(pid int) bool {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return err == nil && strings.TrimSpace(string(comm)) == "keepalived"
}

// liveKeepalived reports whether pid is a keepalived that has not ended
// (a zombie has).
func liveKeepalived(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil || !isKeepalived(pid) {
		return false
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(rest, "Z")
}

// config is shaped like the controller's keepalived_base.template.
func (a *vrrpAmp) config(peer string) string {
	return fmt.Sprintf(`vrrp_script check_script {
    script %s
    interval 1
    fall 2
    rise 2
}

vrrp_instance 5b6c3d0e7f1a4b2c9d3e0f1a2b3c4d5e {
    interface eth1
    virtual_router_id 1
    priority %d
    nopreempt
    accept
    garp_master_refresh 5
    garp_master_refresh_repeat 2
    advert_int 1
    authentication {
        auth_type PASS
        auth_pass 0123456
    }

    unicast_src_ip %s
    unicast_peer {
        %s
    }

    virtual_ipaddress {
        %s
    }

    virtual_ipaddress_excluded {
    }

    virtual_routes {
        203.0.113.0/24 dev eth1 src %s scope link table 1
    }

    virtual_rules {
        from %s/32 table 1 priority 100
    }

    track_script {
        check_script
    }
}
`, filepath.Join(a.base(), "vrrp", "check_script.sh"), a.priority, a.addr, peer, vrrpVIP, vrrpVIP, vrrpVIP)
}

// holdsVIP asks the agent which interface holds the VIP: true on 200 eth1,
// false on 404.
func (a *vrrpAmp) holdsVIP(t *testing.T) bool {
	status, _, body := a.env.Do("GET", "/1.0/interface/"+vrrpVIP, nil)
	switch {
	case status == 200 && string(body) == `{"message":"OK","interface":"eth1"}`:
		return true
	case status == 404:
		return false
	}
	t.Fatalf("%s: GET /1.0/interface/%s = %d %s", a.name, vrrpVIP, status, body)
	return false
}

func (a *vrrpAmp) vrrp(t *testing.T, action string, want int, wantBody string) {
	t.Helper()
	status, _, body := a.env.Do("PUT", "/1.0/vrrp/"+action, nil)
	if status != want || string(body) != wantBody {
		t.Fatalf("%s: PUT /1.0/vrrp/%s = %d %s, want %d %s\n%s", a.name, action, status, body, want, wantBody, a.env.Output())
	}
}

// heartbeat waits up to d for one datagram.
func (a *vrrpAmp) heartbeat(d time.Duration) bool {
	buf := make([]byte, 65536)
	a.hb.SetReadDeadline(time.Now().Add(d))
	_, err := a.hb.Read(buf)
	return err == nil
}

// drain discards the datagrams already queued.
func (a *vrrpAmp) drain() {
	for a.heartbeat(10 * time.Millisecond) {
	}
}

func newVRRPAmp(t *testing.T, name, addr string, priority int) *vrrpAmp {
	a := &vrrpAmp{name: name, addr: addr, priority: priority, env: testenv.New(t)}
	a.ns = topo.NewNamespaceNamed(t, topo.UniqueName("vr"+name))
	hb, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hb.Close() })
	a.hb = hb
	a.env.Extra = fmt.Sprintf("[amphora_agent]\nnetwork_namespace = %s\n[controller_worker]\nloadbalancer_topology = ACTIVE_STANDBY\n"+
		"[health_manager]\nheartbeat_interval = 1\ncontroller_ip_port_list = 127.0.0.1:%d\n",
		a.ns.Name, hb.LocalAddr().(*net.UDPAddr).Port)
	// keepalived outlives the agent by design: kill whatever ran behind
	// the pid file (before the namespace goes).
	seen := map[int]bool{}
	t.Cleanup(func() {
		if pid := a.keepalivedPid(); pid != 0 {
			seen[pid] = true
		}
		for pid := range seen {
			if isKeepalived(pid) {
				syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
		deadline := time.Now().Add(5 * time.Second)
		for pid := range seen {
			for liveKeepalived(pid) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
	return a
}

// exactlyOneMaster waits until one amphora holds the VIP and the other
// does not, and returns the holder.
func exactlyOneMaster(t *testing.T, amps ...*vrrpAmp) (master, backup *vrrpAmp) {
	t.Helper()
	testenv.WaitFor(t, 30*time.Second, "exactly one amphora holding the VIP", func() bool {
		a, b := amps[0].holdsVIP(t), amps[1].holdsVIP(t)
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
	a := newVRRPAmp(t, "a", "203.0.113.4", 100)
	b := newVRRPAmp(t, "b", "203.0.113.5", 90)
	topo.Link(t, a.ns, "eth1", []string{a.addr + "/24"}, b.ns, "eth1", []string{b.addr + "/24"})
	a.env.Start()
	b.env.Start()

	// Without a VRRP config heartbeats flow.
	if !a.heartbeat(10 * time.Second) {
		t.Fatalf("no heartbeat before the VRRP upload\n%s", a.env.Output())
	}

	// A config cut short is refused with keepalived's words.
	cut := a.config(b.addr)
	status, _, body := a.env.Do("PUT", "/1.0/vrrp/upload", []byte(cut[:strings.LastIndex(cut, "}")]))
	if status != 400 || !strings.HasPrefix(string(body), `{"message":"Invalid request","details":"`) || !strings.Contains(string(body), "missing '}'") {
		t.Fatalf("invalid upload: %d %s", status, body)
	}
	for _, amp := range []*vrrpAmp{a, b} {
		peer := b.addr
		if amp == b {
			peer = a.addr
		}
		cfg := []byte(amp.config(peer))
		req, _ := http.NewRequest("PUT", amp.env.URL("/1.0/vrrp/upload"), bytes.NewReader(cfg))
		resp, err := amp.env.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		status, hdr := resp.StatusCode, resp.Header.Get("ETag")
		if status != 200 || string(body) != `{"message":"OK"}` || hdr != md5Hex(cfg) {
			t.Fatalf("%s: upload = %d %s etag %q", amp.name, status, body, hdr)
		}
		if amp.keepalivedPid() != 0 {
			t.Fatalf("%s: the upload started keepalived", amp.name)
		}
		// No load balancer here: the agent's HAProxy check says "exit 1"
		// (stay BACKUP). Stand in for a healthy HAProxy.
		check := filepath.Join(amp.base(), "vrrp", "check_scripts", "haproxy_check_script.sh")
		if got, err := os.ReadFile(check); err != nil || string(got) != "exit 1" {
			t.Fatalf("%s: HAProxy check %q %v", amp.name, got, err)
		}
		if err := os.WriteFile(check, []byte("exit 0"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A config and no keepalived: heartbeats stop (the controller would
	// fail the amphora over).
	testenv.WaitFor(t, 10*time.Second, "the keepalived gate in the log", func() bool {
		return a.env.Count("no heartbeat sent: keepalived is configured") > 0
	})
	a.drain()
	if a.heartbeat(3 * time.Second) {
		t.Fatal("heartbeat sent while a VRRP config exists and keepalived is stopped")
	}

	a.vrrp(t, "start", 202, `{"message":"OK","details":"keepalived started"}`)
	b.vrrp(t, "START", 202, `{"message":"OK","details":"keepalived started"}`)
	a.vrrp(t, "start", 202, `{"message":"OK","details":"keepalived reloaded"}`)
	a.vrrp(t, "restart", 400, `{"message":"Invalid Request","details":"Unknown action: restart"}`)
	if !a.heartbeat(10 * time.Second) {
		t.Fatalf("no heartbeat with keepalived running\n%s", a.env.Output())
	}

	master, _ := exactlyOneMaster(t, a, b)
	t.Logf("MASTER: %s", master.name)

	// kill -9 keepalived on the MASTER: the agent starts it again.
	old := master.keepalivedPid()
	if old == 0 {
		t.Fatal("no keepalived behind the pid file")
	}
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "keepalived respawned", func() bool {
		pid := master.keepalivedPid()
		return pid != 0 && pid != old && master.env.Count("keepalived restarted", `"old_pid": `+strconv.Itoa(old)) > 0
	})
	if master.env.Count("keepalived died; restarting it", "killed by signal killed") == 0 {
		t.Fatalf("the death was not logged\n%s", master.env.Output())
	}
	master, _ = exactlyOneMaster(t, a, b)

	// An agent restart adopts the running keepalived.
	pid := master.keepalivedPid()
	master.env.Stop()
	if master.keepalivedPid() != pid {
		t.Fatal("keepalived did not survive the agent")
	}
	master.env.Start()
	testenv.WaitFor(t, 10*time.Second, "adoption", func() bool {
		return master.env.Count("adopted running keepalived", `"pid": `+strconv.Itoa(pid)) > 0
	})
	master.vrrp(t, "start", 202, `{"message":"OK","details":"keepalived reloaded"}`)
	if master.keepalivedPid() != pid {
		t.Fatal("start of an adopted keepalived did not reload it")
	}

	// Stop on the MASTER: the VIP moves, and the stop is remembered.
	master.vrrp(t, "stop", 202, `{"message":"OK","details":"keepalived stoped"}`)
	if master.keepalivedPid() != 0 {
		t.Fatal("keepalived still runs after stop")
	}
	newMaster, _ := exactlyOneMaster(t, a, b)
	if newMaster == master {
		t.Fatalf("the VIP stayed on %s after its keepalived stopped", master.name)
	}
	testenv.WaitFor(t, 10*time.Second, "the keepalived gate after stop", func() bool {
		return master.env.Count("no heartbeat sent: keepalived is configured") > 0
	})
	master.drain()
	if master.heartbeat(3 * time.Second) {
		t.Fatal("heartbeat sent after keepalived was stopped")
	}
	if !newMaster.heartbeat(5 * time.Second) {
		t.Fatal("the new MASTER sends no heartbeats")
	}
	// A restarted agent keeps it stopped: once the restore has released
	// the mutation lock (an upload waits for it), keepalived still does
	// not run.
	master.env.Stop()
	master.env.Start()
	peer := a.addr
	if master == a {
		peer = b.addr
	}
	if status, _, body := master.env.Do("PUT", "/1.0/vrrp/upload", []byte(master.config(peer))); status != 200 {
		t.Fatalf("upload after restart: %d %s", status, body)
	}
	if master.keepalivedPid() != 0 {
		t.Fatal("a stopped keepalived was started by the agent restart")
	}
	master.vrrp(t, "reload", 202, `{"message":"OK","details":"keepalived started"}`)
	if master.keepalivedPid() == 0 {
		t.Fatal("reload of a stopped keepalived did not start it")
	}
}

// withCheckPath makes keepalived's tracked script find the image's
// haproxy-vrrp-check, which the test machine lacks: a wrapper puts a link
// to the agent binary on PATH, then runs the agent's check_script.sh. It
// returns amp's keepalived config tracking the wrapper.
func (a *vrrpAmp) withCheckPath(t *testing.T, peer string) string {
	bin := a.env.Path("bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(testenv.Binary(t), filepath.Join(bin, "haproxy-vrrp-check")); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(a.base(), "vrrp", "check_script.sh")
	wrapper := a.env.Path("check.sh")
	text := "#!/bin/bash\nPATH=" + bin + ":$PATH exec " + script + "\n"
	if err := os.WriteFile(wrapper, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
	return strings.Replace(a.config(peer), "script "+script, "script "+wrapper, 1)
}

// loadBalancer uploads and starts a load balancer listening on the
// amphora's own address; its stats socket is the one the VRRP check asks.
func (a *vrrpAmp) loadBalancer(t *testing.T, lb string) {
	t.Helper()
	watchHAProxy(t, filepath.Join(a.base(), lb, lb+".pid"))
	cfg := plainLBConfig(a.base(), lb, "203.0.113.200:80", a.addr+":80")
	if status, _, body := a.env.Do("PUT", "/1.0/loadbalancer/"+a.env.AmphoraID+"/"+lb+"/haproxy", []byte(cfg)); status != 202 {
		t.Fatalf("%s: upload: %d %s", a.name, status, body)
	}
	if status, _, body := a.env.Do("PUT", "/1.0/loadbalancer/"+lb+"/start", nil); status != 202 {
		t.Fatalf("%s: start: %d %s\n%s", a.name, status, body, a.env.Output())
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
	a := newVRRPAmp(t, "a", "203.0.113.4", 100)
	b := newVRRPAmp(t, "b", "203.0.113.5", 90)
	topo.Link(t, a.ns, "eth1", []string{a.addr + "/24"}, b.ns, "eth1", []string{b.addr + "/24"})
	for _, amp := range []*vrrpAmp{a, b} {
		amp.env.Start()
		amp.loadBalancer(t, lb)
	}
	for _, amp := range []*vrrpAmp{a, b} {
		peer := b.addr
		if amp == b {
			peer = a.addr
		}
		if status, _, body := amp.env.Do("PUT", "/1.0/vrrp/upload", []byte(amp.withCheckPath(t, peer))); status != 200 {
			t.Fatalf("%s: VRRP upload: %d %s", amp.name, status, body)
		}
		amp.vrrp(t, "start", 202, `{"message":"OK","details":"keepalived started"}`)
	}
	exactlyOneMaster(t, a, b)

	for _, amp := range []*vrrpAmp{a, b} {
		if status, _, body := amp.env.Do("DELETE", "/1.0/listeners/"+lb, nil); status != 200 {
			t.Fatalf("%s: delete: %d %s", amp.name, status, body)
		}
		check := filepath.Join(amp.base(), "vrrp", "check_scripts", "haproxy_check_script.sh")
		if got, err := os.ReadFile(check); err != nil || string(got) != "haproxy-vrrp-check ; exit $?" {
			t.Fatalf("%s: HAProxy check after the delete: %q %v", amp.name, got, err)
		}
	}
	// keepalived runs the check every second and gives up after two
	// failures: well inside this window.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ha, hb := a.holdsVIP(t), b.holdsVIP(t); ha == hb {
			t.Fatalf("after the delete: a holds the VIP %v, b %v\n%s\n%s", ha, hb, a.env.Output(), b.env.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
