package status

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/config/configtest"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const (
	lbID     = "5b6c3d0e-7f1a-4b2c-9d3e-0f1a2b3c4d5e"
	listener = "a1b2c3d4-0000-4000-8000-000000000001"
	lvsID    = "c1c2c3c4-0000-4000-8000-000000000003"
)

var boot = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

// fakeState lays out an amphora's files under dir: one running load
// balancer with a refused config kept, a running VRRP keepalived whose
// log says MASTER, a stopped LVS listener, two plugged interfaces of
// which one is missing. Processes live in a fake /proc.
func fakeState(t *testing.T, dir string) (cfgText string, sys System) {
	base, proc := filepath.Join(dir, "lib"), filepath.Join(dir, "proc")
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	process := func(pid int, startTicks int, args ...string) {
		write(filepath.Join(proc, fmt.Sprint(pid), "cmdline"), strings.Join(args, "\x00")+"\x00")
		write(filepath.Join(proc, fmt.Sprint(pid), "stat"), fmt.Sprintf("%d (some name) S 1 %d %d 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 %d 0 0", pid, pid, pid, startTicks))
	}
	lbDir := filepath.Join(base, lbID)
	write(filepath.Join(lbDir, "haproxy.cfg"), "global\n    stats socket "+filepath.Join(base, lbID+".sock")+" mode 0666 level user\n")
	write(filepath.Join(lbDir, "agent-state.json"), `{"running":true,"peer":"x"}`+"\n")
	write(filepath.Join(lbDir, lbID+".pid"), "4100\n")
	write(filepath.Join(lbDir, "haproxy.cfg.new-failed"), "garbage\n")
	refused := time.Date(2026, 11, 30, 11, 58, 0, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(lbDir, "haproxy.cfg.new-failed"), refused, refused); err != nil {
		t.Fatal(err)
	}
	process(4100, 1080000, "/usr/sbin/haproxy", "-Ws", "-S", filepath.Join(lbDir, "master.sock")+",mode,600",
		"-p", filepath.Join(lbDir, lbID+".pid"), "-f", filepath.Join(lbDir, "haproxy.cfg"))

	vrrp := filepath.Join(base, "vrrp")
	write(filepath.Join(vrrp, "octavia-keepalived.conf"), "vrrp_instance x {\n    virtual_ipaddress {\n        203.0.113.10\n    }\n    virtual_ipaddress_excluded {\n        2001:db8:1::10\n    }\n}\n")
	write(filepath.Join(vrrp, "agent-state.json"), `{"running":true}`+"\n")
	write(filepath.Join(vrrp, "octavia-keepalived.pid"), "4200\n")
	write(filepath.Join(vrrp, "octavia-keepalived.log.1"), "Starting Keepalived v2\n(x) Entering BACKUP STATE (init)\n")
	write(filepath.Join(vrrp, "octavia-keepalived.log"), "Starting Keepalived v2\n(x) Entering BACKUP STATE (init)\n(x) Entering MASTER STATE\n")
	process(4200, 1260000, "/usr/sbin/keepalived", "--dont-fork", "--log-console", "-f", filepath.Join(vrrp, "octavia-keepalived.conf"),
		"-p", filepath.Join(vrrp, "octavia-keepalived.pid"))

	lvs := filepath.Join(base, "lvs")
	write(filepath.Join(lvs, "octavia-keepalivedlvs-"+lvsID+".conf"), "virtual_server_group x {\n}\n")
	write(filepath.Join(lvs, "octavia-keepalivedlvs-"+lvsID+".state.json"), `{"running":false}`+"\n")

	write(filepath.Join(base, "plugged_interfaces"), "fa:16:3e:00:00:01 eth1\nfa:16:3e:00:00:02 eth2\n")

	sys = System{
		ProcDir:  proc,
		BootTime: func() (time.Time, error) { return boot, nil },
		HAProxy: func(_ context.Context, socket, cmd string) ([]byte, error) {
			switch {
			case strings.HasSuffix(socket, "master.sock") && strings.HasPrefix(cmd, "show proc"):
				return []byte("#<PID>          <type>          <reloads>       <uptime>        <version>\n4100            master          1 [failed: 0]   0d00h10m00s     2.6.12\n# workers\n4101            worker          0               0d00h09m00s     2.6.12\n# old workers\n"), nil
			case socket == filepath.Join(base, lbID+".sock") && strings.HasPrefix(cmd, "show stat"):
				return []byte("# pxname,svname,status,\n" + listener + ",FRONTEND,OPEN,\n"), nil
			}
			return nil, fmt.Errorf("unexpected %q on %s", cmd, socket)
		},
		Links: func(ns string) ([]Link, error) {
			if ns != "amp-test" {
				return nil, fmt.Errorf("namespace %s: %w", ns, fs.ErrNotExist)
			}
			return []Link{
				{Name: "lo", MAC: "", Addrs: []string{"127.0.0.1"}},
				{Name: "eth1", MAC: "fa:16:3e:00:00:01", Addrs: []string{"203.0.113.4", "203.0.113.10"}},
			}, nil
		},
	}
	cfgText = fmt.Sprintf(`[amphora_agent]
agent_server_ca = %[1]s/ca.pem
agent_server_cert = %[1]s/server.pem
agent_server_network_dir = %[1]s/interfaces
network_namespace = amp-test
plugged_interfaces_file = %[2]s/plugged_interfaces
nftables_rules_file = %[2]s/nft.rules
haproxy_user_group_file = %[2]s/ug.conf
pci_rescan_file = %[1]s/rescan
[haproxy_amphora]
base_path = %[2]s
base_cert_dir = %[2]s/certs
bind_port = 9443
[health_manager]
controller_ip_port_list = 192.0.2.1:5555, 192.0.2.2:5555
heartbeat_interval = 10
[controller_worker]
loadbalancer_topology = ACTIVE_STANDBY
`, dir, base)
	return cfgText, sys
}

func fakeLive() *Live {
	start := time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)
	return &Live{
		Pid: 4000, Version: "1.2.3", StartedAt: start, ConfigFiles: []string{"/etc/octavia/amphora-agent.conf"},
		Ready: true, Log: "the journal (journalctl -u amphora-agent)", Goroutines: 42,
		Daemons: map[string]History{
			DaemonKey("haproxy", lbID): {Respawns: 1, LastExit: "killed by signal killed", LastExitAt: start.Add(30 * time.Minute)},
			DaemonKey("vrrp", ""):      {},
		},
		Reloads:  map[string]Reload{lbID: {At: start.Add(58 * time.Minute), OK: false, Result: "failed: Error reloading haproxy: [ALERT] bind failed"}},
		Refusals: map[string]string{lbID: "Invalid request: [NOTICE] something\n[ALERT] parsing [haproxy.cfg:1]: unknown keyword 'garbage'"},
		Heartbeat: Heartbeat{LastSendAt: start.Add(59*time.Minute + 55*time.Second), Destination: "192.0.2.2:5555",
			LastResult: "sent", Seq: 361},
	}
}

func render(t *testing.T, r Report) (text, js string) {
	var b bytes.Buffer
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	j, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return b.String(), string(j) + "\n"
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// The status of a fake amphora, with and without the running agent's
// answer (and with and without a journal), as text and as JSON, against
// golden files.
func TestStatusGolden(t *testing.T) {
	for _, tc := range []struct {
		name    string
		live    *Live
		journal bool // a journal listens (systemd)
	}{
		{"running", fakeLive(), true},
		{"stopped", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			text, sys := fakeState(t, dir)
			sys.Journal = func() bool { return tc.journal }
			cfg := configtest.Load(t, dir, text)
			r := Collect(context.Background(), cfg, []string{"/etc/octavia/amphora-agent.conf"}, "1.2.3-status", sys)
			r.GeneratedAt = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
			if tc.live != nil {
				Merge(&r, tc.live)
			} else {
				NotLive(&r, "no socket: the agent is not running")
			}
			txt, js := render(t, r)
			golden(t, "status-"+tc.name+".txt", strings.ReplaceAll(txt, dir, "/T"))
			golden(t, "status-"+tc.name+".json", strings.ReplaceAll(js, dir, "/T"))
		})
	}
}

// A pid file naming some other process (a recycled pid) is not taken for
// the daemon.
func TestStatusRecycledPid(t *testing.T) {
	dir := t.TempDir()
	text, sys := fakeState(t, dir)
	sys.Journal = func() bool { return false }
	os.WriteFile(filepath.Join(sys.ProcDir, "4100", "cmdline"), []byte("/bin/sleep\x00100\x00"), 0o600)
	cfg := configtest.Load(t, dir, text)
	r := Collect(context.Background(), cfg, nil, "x", sys)
	if lb := r.LoadBalancers[0]; lb.Running || lb.Pid != 0 || len(lb.Workers) != 0 {
		t.Fatalf("a recycled pid is reported as HAProxy: %+v", lb)
	}
}

// The socket is 0600 as soon as it has its name, answers with the live
// state, and is gone when the server stops.
func TestServeFetch(t *testing.T) {
	path := filepath.Join(t.TempDir(), SocketName)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, path, func() Live { return *fakeLive() }) }()
	var live *Live
	deadline := time.Now().Add(5 * time.Second)
	for {
		var err error
		if live, err = Fetch(ctx, path); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if live.Pid != 4000 || live.Heartbeat.Seq != 361 || live.Daemons[DaemonKey("haproxy", lbID)].Respawns != 1 {
		t.Fatalf("live %+v", live)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 || st.Mode()&fs.ModeSocket == 0 {
		t.Fatalf("socket %v %v", st.Mode(), err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("socket left behind: %v", err)
	}
}
