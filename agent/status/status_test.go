package status

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/acceptretry/acceptretrytest"
	"github.com/amphora-agent/amphora-agent/agent/config/configtest"
	"github.com/amphora-agent/amphora-agent/agent/testkit"
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
	write := func(path, content string) { testkit.WriteFile(t, path, content) }
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
		name     string
		live     *Live
		fetchErr error // without live: why asking the agent failed
		journal  bool  // a journal listens (systemd)
	}{
		{"running", fakeLive(), nil, true},
		{"stopped", nil, dialErr(syscall.ENOENT), false},
		// A user who may not open the socket.
		{"unknown", nil, dialErr(syscall.EACCES), false},
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
				NotLive(&r, tc.fetchErr)
			}
			Assess(&r)
			txt, js := render(t, r)
			golden(t, "status-"+tc.name+".txt", strings.ReplaceAll(txt, dir, "/T"))
			golden(t, "status-"+tc.name+".json", strings.ReplaceAll(js, dir, "/T"))
		})
	}
}

// dialErr is the error of dialing the status socket that failed with errno.
func dialErr(errno syscall.Errno) error {
	return &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", errno)}
}

// The agent counts as not running only when its socket is missing or
// nothing listens on it; when it cannot be asked (no permission, no
// answer in time), its state is unknown, and the report says why.
func TestNotLiveTellsNotRunningFromUnknown(t *testing.T) {
	dir := t.TempDir()
	// A socket nothing listens on, as a killed agent leaves it.
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	fetch := func(path string) error {
		_, err := Fetch(context.Background(), path)
		return err
	}
	for _, tc := range []struct {
		name, state, reason string
		err                 error
	}{
		{"no socket", AgentNotRunning, "no socket: the agent is not running", fetch(filepath.Join(dir, "none.sock"))},
		{"stale socket", AgentNotRunning, "nothing listens on the socket: the agent is not running", fetch(stale)},
		{"not allowed to open", AgentUnknown, "permission denied, only root may ask it", dialErr(syscall.EACCES)},
		{"refused by credentials", AgentUnknown, "permission denied, only root may ask it", ErrRefused},
		{"no answer", AgentUnknown, "no answer in time, the agent may be stuck",
			&net.OpError{Op: "read", Net: "unix", Err: os.ErrDeadlineExceeded}},
		{"other", AgentUnknown, "unreadable answer: x", errors.New("unreadable answer: x")},
	} {
		r := Report{Agent: Agent{Socket: "/s"}}
		NotLive(&r, tc.err)
		if r.Agent.State != tc.state || r.Agent.StateReason != tc.reason || r.Agent.Running ||
			len(r.Unknown) != 1 || !strings.Contains(r.Unknown[0], tc.reason) {
			t.Errorf("%s (%v): state %q, reason %q, unknown %q; want %q, %q", tc.name, tc.err,
				r.Agent.State, r.Agent.StateReason, r.Unknown, tc.state, tc.reason)
		}
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
	sock, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- sock.Serve(ctx, func() Live { return *fakeLive() }, nil) }()
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

// Accepts that fail because the agent is out of file descriptors (EMFILE)
// do not end the server: it answers once they succeed again, and the
// socket stays in place all along, so `status` never takes the running
// agent for a stopped one.
func TestServeSurvivesFailedAccepts(t *testing.T) {
	path := filepath.Join(t.TempDir(), SocketName)
	ln, err := listen(path)
	if err != nil {
		t.Fatal(err)
	}
	failing := acceptretrytest.FailFirst(ln, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- serve(ctx, failing, path, func() Live { return *fakeLive() }, nil) }()
	// The first connection meets the failures: it waits in the socket's
	// backlog until an accept succeeds.
	fctx, fcancel := context.WithTimeout(ctx, 4*time.Second)
	live, err := Fetch(fctx, path)
	fcancel()
	if err != nil {
		t.Fatalf("no answer after %d failed accepts: %v", failing.Failed(), err)
	}
	if live.Pid != 4000 || failing.Failed() != 4 {
		t.Fatalf("live %+v after %d failed accepts", live, failing.Failed())
	}
	if st, err := os.Stat(path); err != nil || st.Mode()&fs.ModeSocket == 0 {
		t.Fatalf("socket after failed accepts: %v %v", st, err)
	}
	select {
	case err := <-done:
		t.Fatalf("the server ended: %v", err)
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
