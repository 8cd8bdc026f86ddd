// Package vrrputil runs ACTIVE_STANDBY amphorae (an agent, its namespace
// and real keepalived) for the system and soak tiers.
package vrrputil

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/pidfile"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/tiersutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
)

const VIP = "203.0.113.10"

// Amp is one ACTIVE_STANDBY amphora: an agent, its namespace, its
// VRRP address and a UDP socket receiving its heartbeats.
type Amp struct {
	Name     string
	Env      *testenv.Env
	NS       *topo.Namespace
	Addr     string
	Priority int
	HB       *net.UDPConn
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

func NewAmp(t *testing.T, name, addr string, priority int) *Amp {
	a := &Amp{Name: name, Addr: addr, Priority: priority, Env: testenv.New(t)}
	a.NS = topo.NewNamespaceNamed(t, topo.UniqueName("vr"+name))
	hb, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hb.Close() })
	a.HB = hb
	a.Env.Extra = fmt.Sprintf("[amphora_agent]\nnetwork_namespace = %s\n[controller_worker]\nloadbalancer_topology = ACTIVE_STANDBY\n"+
		"[health_manager]\nheartbeat_interval = 1\ncontroller_ip_port_list = 127.0.0.1:%d\n",
		a.NS.Name, hb.LocalAddr().(*net.UDPAddr).Port)
	// keepalived outlives the agent by design: kill whatever ran behind
	// the pid file (before the namespace goes).
	seen := map[int]bool{}
	t.Cleanup(func() {
		if pid := a.KeepalivedPid(); pid != 0 {
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

func (a *Amp) Base() string { return a.Env.Path("lib") }

func (a *Amp) PidPath() string { return filepath.Join(a.Base(), "vrrp", "octavia-keepalived.pid") }

// KeepalivedPid is the live keepalived behind the pid file, 0 if none.
func (a *Amp) KeepalivedPid() int {
	pid, err := pidfile.Read(a.PidPath())
	if err != nil || !isKeepalived(pid) {
		return 0
	}
	return pid
}

// StartKeepalived starts the agent, uploads a's config with peer as its
// peer and starts keepalived; it returns the config's path and the
// keepalived the pid file names. Whatever runs that config is killed when
// the test ends.
func (a *Amp) StartKeepalived(t *testing.T, peer string) (cfgPath string, pid int) {
	t.Helper()
	cfgPath = filepath.Join(a.Base(), "vrrp", "octavia-keepalived.conf")
	tiersutil.KillDaemonsOf(t, "keepalived", cfgPath)
	e := a.Env
	e.Start()
	if status, _, body := e.Do("PUT", "/1.0/vrrp/upload", []byte(a.Config(peer))); status != 200 {
		t.Fatalf("upload: %d %s", status, body)
	}
	if status, _, body := e.Do("PUT", "/1.0/vrrp/start", nil); status != 202 {
		t.Fatalf("start: %d %s\n%s", status, body, e.Output())
	}
	if pid = a.KeepalivedPid(); pid == 0 {
		t.Fatal("no keepalived behind the pid file after start")
	}
	return cfgPath, pid
}

// Config is shaped like the controller's keepalived_base.template.
func (a *Amp) Config(peer string) string {
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
`, filepath.Join(a.Base(), "vrrp", "check_script.sh"), a.Priority, a.Addr, peer, VIP, VIP, VIP)
}

// HoldsVIP asks the agent which interface holds the VIP: true on 200 eth1,
// false on 404.
func (a *Amp) HoldsVIP(t *testing.T) bool {
	status, _, body := a.Env.Do("GET", "/1.0/interface/"+VIP, nil)
	switch {
	case status == 200 && string(body) == `{"message":"OK","interface":"eth1"}`:
		return true
	case status == 404:
		return false
	}
	t.Fatalf("%s: GET /1.0/interface/%s = %d %s", a.Name, VIP, status, body)
	return false
}

func (a *Amp) VRRP(t *testing.T, action string, want int, wantBody string) {
	t.Helper()
	status, _, body := a.Env.Do("PUT", "/1.0/vrrp/"+action, nil)
	if status != want || string(body) != wantBody {
		t.Fatalf("%s: PUT /1.0/vrrp/%s = %d %s, want %d %s\n%s", a.Name, action, status, body, want, wantBody, a.Env.Output())
	}
}

// Heartbeat waits up to d for one datagram.
func (a *Amp) Heartbeat(d time.Duration) bool {
	buf := make([]byte, 65536)
	a.HB.SetReadDeadline(time.Now().Add(d))
	_, err := a.HB.Read(buf)
	return err == nil
}

// Drain discards the datagrams already queued.
func (a *Amp) Drain() {
	for a.Heartbeat(10 * time.Millisecond) {
	}
}

// WithCheckPath makes keepalived's tracked script find the image's
// haproxy-vrrp-check, which the test machine lacks: a wrapper puts a link
// to the agent binary on PATH, then runs the agent's check_script.sh. It
// returns amp's keepalived config tracking the wrapper.
func (a *Amp) WithCheckPath(t *testing.T, peer string) string {
	bin := a.Env.Path("bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(testenv.Binary(t), filepath.Join(bin, "haproxy-vrrp-check")); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(a.Base(), "vrrp", "check_script.sh")
	wrapper := a.Env.Path("check.sh")
	text := "#!/bin/bash\nPATH=" + bin + ":$PATH exec " + script + "\n"
	if err := os.WriteFile(wrapper, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
	return strings.Replace(a.Config(peer), "script "+script, "script "+wrapper, 1)
}

// LoadBalancer uploads and starts a load balancer listening on the
// amphora's own address; its stats socket is the one the VRRP check asks.
func (a *Amp) LoadBalancer(t *testing.T, lb string) {
	t.Helper()
	tiersutil.WatchHAProxy(t, filepath.Join(a.Base(), lb, lb+".pid"))
	cfg := tiersutil.PlainLBConfig(a.Base(), lb, "203.0.113.200:80", a.Addr+":80")
	if status, _, body := a.Env.Do("PUT", "/1.0/loadbalancer/"+a.Env.AmphoraID+"/"+lb+"/haproxy", []byte(cfg)); status != 202 {
		t.Fatalf("%s: upload: %d %s", a.Name, status, body)
	}
	if status, _, body := a.Env.Do("PUT", "/1.0/loadbalancer/"+lb+"/start", nil); status != 202 {
		t.Fatalf("%s: start: %d %s\n%s", a.Name, status, body, a.Env.Output())
	}
}
