//go:build system

package system_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/health"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/hbutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/lvsutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/tiersutil"
)

// lvsConfig is shaped like Octavia's LVS template renders a UDP listener
// with a UDP-CONNECT health monitor.
func lvsConfig(e *testenv.Env, listener string) string {
	return fmt.Sprintf(`# Configuration for Loadbalancer 3f1c0c1e-5d6a-4b8e-9a57-3c1f0b7e2d11
# Configuration for Listener %s

net_namespace %s

virtual_server_group ipv4-group {
    203.0.113.10 53
}

virtual_server group ipv4-group {
    lb_algo rr
    lb_kind NAT
    protocol UDP
    delay_loop 30
    delay_before_retry 30
    retry 3


    # Configuration for Pool 6c7d8e9f-0a1b-4c2d-8e3f-4a5b6c7d8e9f
    # Configuration for HealthMonitor 7d8e9f0a-1b2c-4d3e-9f4a-5b6c7d8e9f0a
    # Configuration for Member 8e9f0a1b-2c3d-4e4f-a05b-6c7d8e9f0a1b
    real_server 198.51.100.31 53 {
        weight 1
        MISC_CHECK {
            misc_path "%s 198.51.100.31 53"
            misc_timeout 5
        }
    }

}
`, listener, e.Namespace(), e.Path("lib", "lvs", "check", "udp_check.sh"))
}

// Upload, GET, a refused upload and delete of a UDP listener with the
// real `keepalived -t` (which needs no IPVS); nothing is started, since
// this kernel has no IPVS.
func TestLVSListenerUploadAndDelete(t *testing.T) {
	e := testenv.New(t)
	e.Start()
	const id = "5b6c7d8e-9f0a-4b1c-8d2e-3f4a5b6c7d8e"
	cfg := lvsConfig(e, id)
	status, _, body := e.Do("PUT", "/1.0/listeners/"+e.AmphoraID+"/"+id+"/udp_listener", []byte(cfg))
	if status != 200 || string(body) != `{"message":"OK"}` {
		t.Fatalf("upload: %d %s\n%s", status, body, e.Output())
	}
	conf := e.Path("lib", "lvs", "octavia-keepalivedlvs-"+id+".conf")
	if data, err := os.ReadFile(conf); err != nil || string(data) != cfg {
		t.Fatalf("stored config: %v", err)
	}
	if fi, err := os.Stat(e.Path("lib", "lvs", "check", "udp_check.sh")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Fatalf("udp_check.sh: %v %v", fi, err)
	}
	// The ETag is the body's md5.
	req, _ := http.NewRequest("PUT", e.URL("/1.0/listeners/"+e.AmphoraID+"/"+id+"/udp_listener"), strings.NewReader(cfg))
	resp, err := e.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, want := resp.Header.Get("ETag"), tiersutil.MD5Hex([]byte(cfg)); got != want {
		t.Fatalf("ETag %q, want %q", got, want)
	}

	status, _, body = e.Do("GET", "/1.0/listeners/"+id+"/udp_listener", nil)
	if status != 200 || string(body) != cfg {
		t.Fatalf("GET: %d %s", status, body)
	}
	// Cut short, keepalived finds its braces unpaired and it is refused:
	// 400 with keepalived's output, the stored one kept.
	bad := cfg[:strings.LastIndex(cfg, "}")]
	status, _, body = e.Do("PUT", "/1.0/listeners/"+e.AmphoraID+"/"+id+"/udp_listener", []byte(bad))
	if status != 400 || !strings.Contains(string(body), `"message":"Invalid request"`) || !strings.Contains(string(body), "missing '}'") {
		t.Fatalf("invalid upload: %d %s", status, body)
	}
	if data, _ := os.ReadFile(conf); string(data) != cfg {
		t.Fatal("a refused upload replaced the config")
	}
	// Not started: listed OFFLINE, counted in details, no process.
	status, _, body = e.Do("GET", "/1.0/listeners", nil)
	if want := `[{"status":"OFFLINE","uuid":"` + id + `","type":"UDP"}]`; status != 200 || string(body) != want {
		t.Fatalf("listeners: %d %s, want %s", status, body, want)
	}
	var details struct {
		Listeners []string `json:"listeners"`
		Count     *int     `json:"lvs_listener_process_count"`
	}
	status, _, body = e.Do("GET", "/1.0/details", nil)
	if err := json.Unmarshal(body, &details); status != 200 || err != nil || details.Count == nil || *details.Count != 0 ||
		len(details.Listeners) != 1 || details.Listeners[0] != id {
		t.Fatalf("details: %d %s", status, body)
	}

	status, _, body = e.Do("DELETE", "/1.0/listeners/"+id, nil)
	if status != 200 || string(body) != `{"message":"OK"}` {
		t.Fatalf("delete: %d %s", status, body)
	}
	left, _ := filepath.Glob(e.Path("lib", "lvs", "octavia-keepalivedlvs-"+id+"*"))
	if len(left) != 0 {
		t.Fatalf("left after delete: %v", left)
	}
	status, _, body = e.Do("GET", "/1.0/listeners/"+id+"/udp_listener", nil)
	if want := `{"message":"UDP Listener Not Found","details":"No UDP listener with UUID: ` + id + `"}`; status != 404 || string(body) != want {
		t.Fatalf("GET after delete: %d %s", status, body)
	}
	status, _, body = e.Do("PUT", "/1.0/loadbalancer/"+id+"/start", nil)
	if status != 404 || !strings.Contains(string(body), "Loadbalancer Not Found") {
		t.Fatalf("start after delete: %d %s", status, body)
	}
	if status, _, _ = e.Do("DELETE", "/1.0/listeners/"+id, nil); status != 200 {
		t.Fatalf("second delete: %d", status)
	}
}

// A controller's reload restarts a UDP listener's keepalived where its
// version (here the keepalived_cmd wrapper says 2.0.10) reloads members
// wrongly; the heartbeats taken while it is down (here 4 s: the wrapper
// sleeps before it starts keepalived --vrrp, which needs no IPVS) still
// carry the listener, so the health manager does not write it OFFLINE.
// A restart that fails leaves it out of the heartbeats at once.
func TestLVSHeartbeatDuringRestart(t *testing.T) {
	const id, key = "5b6c7d8e-9f0a-4b1c-8d2e-3f4a5b6c7d90", "lvs-restart"
	hm := hbutil.NewReceiver(t)
	e := testenv.New(t)
	slow, refuse := e.Path("slow"), e.Path("refuse")
	wrapper := e.Path("keepalived")
	// Each wrapper notes its pid, which keepalived keeps (exec): one still
	// asleep when the test ends must not start a keepalived behind it.
	pids := e.Path("wrapper.pids")
	script := fmt.Sprintf("#!/bin/sh\n[ \"$1\" = --version ] && { echo 'Keepalived v2.0.10 (11/12,2018)' >&2; exit 0; }\n"+
		"echo $$ >> %s\n[ -e %s ] && exit 1\n[ -e %s ] && sleep 4\nexec /usr/sbin/keepalived --vrrp \"$@\"\n",
		pids, refuse, slow)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		data, _ := os.ReadFile(pids)
		for _, f := range strings.Fields(string(data)) {
			pid, _ := strconv.Atoi(f)
			if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); pid > 0 && err == nil && strings.Contains(string(cmd), e.Dir) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	e.Extra = fmt.Sprintf("[amphora_agent]\nkeepalived_cmd = %s\n[health_manager]\ncontroller_ip_port_list = %s\nheartbeat_interval = 1\nheartbeat_key = %s\n",
		wrapper, hm.Addr(), key)
	e.Start()
	t.Cleanup(func() { lvsutil.KillKeepalived(t, e.Path("lib", "lvs")) })
	if status, _, body := e.Do("PUT", "/1.0/listeners/"+e.AmphoraID+"/"+id+"/udp_listener", []byte(lvsConfig(e, id))); status != 200 {
		t.Fatalf("upload: %d %s", status, body)
	}
	if status, _, body := e.Do("PUT", "/1.0/loadbalancer/"+id+"/start", nil); status != 202 {
		t.Fatalf("start: %d %s\n%s", status, body, e.Output())
	}
	carries := func(m health.Message) bool { _, ok := m.Listeners[id]; return ok }
	hm.WaitFor(hbutil.Wait, key, "the UDP listener", carries)

	reload := func() <-chan int {
		done := make(chan int, 1)
		go func() {
			req, _ := http.NewRequest("PUT", e.URL("/1.0/loadbalancer/"+id+"/reload"), nil)
			resp, err := e.Client().Do(req)
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		return done
	}
	os.WriteFile(slow, nil, 0o644)
	done := reload()
	deadline := time.Now().Add(hbutil.Wait)
	var during, down int
	for status := 0; status == 0; {
		select {
		case status = <-done:
			if status != 202 {
				t.Fatalf("slow reload: %d\n%s", status, e.Output())
			}
			continue
		default:
		}
		m, ok := hm.NextMessage(time.Now().Add(2*time.Second), key)
		if time.Now().After(deadline) {
			t.Fatal("the slow reload did not end")
		}
		if !ok {
			continue
		}
		during++
		if lvsutil.Pid(e.Path("lib", "lvs"), id) == 0 {
			down++
		}
		if !carries(m) {
			t.Fatalf("heartbeat %d during the restart left the listener out: %+v", during, m.Listeners)
		}
	}
	if down < 2 {
		t.Fatalf("only %d of %d heartbeats came while keepalived was down", down, during)
	}
	os.Remove(slow)
	hm.WaitFor(hbutil.Wait, key, "the UDP listener after the restart", carries)

	// A keepalived that does not come back is left out once the reload
	// failed.
	os.WriteFile(refuse, nil, 0o644)
	if status := <-reload(); status != 500 {
		t.Fatalf("failing reload: %d", status)
	}
	hm.WaitFor(hbutil.Wait, key, "no UDP listener after a failed restart", func(m health.Message) bool { return !carries(m) })
}
