//go:build system

package system_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// onTmpfs moves an Env's folder onto a tmpfs of size bytes, so a test can
// fill the agent's disk without touching the machine's.
func onTmpfs(t *testing.T, e *testenv.Env, size int) {
	t.Helper()
	dir, err := os.MkdirTemp("", "aa-full-")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0700", size), "tmpfs", dir).CombinedOutput(); err != nil {
		os.Remove(dir)
		t.Skipf("cannot mount a tmpfs (needs root): %v %s", err, out)
	}
	// Registered before the agent starts, so it runs after the agent
	// (and HAProxy) stopped.
	t.Cleanup(func() {
		exec.Command("umount", "-l", dir).Run()
		os.Remove(dir)
	})
	if out, err := exec.Command("cp", "-a", e.Dir+"/.", dir).CombinedOutput(); err != nil {
		t.Fatalf("copying the env: %v %s", err, out)
	}
	moved := func(p string) string { return filepath.Join(dir, strings.TrimPrefix(p, e.Dir)) }
	e.CAFile, e.ServerCert, e.ClientCert, e.ConfigPath = moved(e.CAFile), moved(e.ServerCert), moved(e.ClientCert), moved(e.ConfigPath)
	e.Dir = dir
}

// fill writes into dir until the file system has no room left.
func fill(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for i := 0; ; i++ {
		if i > 1<<14 {
			t.Fatal("the file system never filled up")
		}
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	// The last partial blocks too, so even a tiny write fails.
	small := make([]byte, 512)
	for i := 0; i < 1<<10; i++ {
		if _, err := f.Write(small); err != nil {
			return
		}
	}
}

// unfill gives back the room fill took.
func unfill(t *testing.T, dir string) {
	t.Helper()
	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
}

// namesFullDisk tells whether an answer names the full disk.
func namesFullDisk(body []byte) bool {
	return strings.Contains(strings.ToLower(string(body)), "no space left on device")
}

// startFailsOnFullDisk asks for a start at path and expects a 500 that
// names the full disk.
func startFailsOnFullDisk(t *testing.T, e *testenv.Env, path string) {
	t.Helper()
	status, _, body := e.Do("PUT", path, nil)
	if status != 500 || !namesFullDisk(body) {
		t.Errorf("start on a full disk: %d %s", status, body)
	}
	t.Logf("start on a full disk: %d %s", status, body)
}

// restartAdopts restarts the agent and expects it to adopt the running
// daemon (its log says "adopted running <name>"), whose main process must
// still be main.
func restartAdopts(t *testing.T, e *testenv.Env, comm, name, cfgPath string, main int) {
	t.Helper()
	e.Stop()
	e.Start()
	testenv.WaitFor(t, 10*time.Second, "the restarted agent to adopt "+name, func() bool {
		return strings.Contains(e.Output(), "adopted running "+name)
	})
	if now := mainsOf(comm, cfgPath); len(now) != 1 || now[0] != main {
		t.Errorf("%s main processes after an agent restart: %v, want [%d]\n%s", comm, now, main, e.Output())
	}
}

// startedOnTmpfs runs an agent with its state on a small tmpfs, uploads
// lb's config (binding bind) and starts it; it returns the agent and the
// config.
func startedOnTmpfs(t *testing.T, lb, bind string) (*testenv.Env, string) {
	t.Helper()
	e := testenv.New(t)
	onTmpfs(t, e, 8<<20)
	base := e.Path("lib")
	tiersutil.KillDaemonsOf(t, "haproxy", filepath.Join(base, lb, "haproxy.cfg"))
	e.Start()
	cfg := tiersutil.PlainLBConfig(base, lb, "127.0.0.1:8081", bind)
	if status, _, body := e.Do("PUT", "/1.0/loadbalancer/"+e.AmphoraID+"/"+lb+"/haproxy", []byte(cfg)); status != 202 {
		t.Fatalf("upload: %d %s", status, body)
	}
	if status, _, body := e.Do("PUT", "/1.0/loadbalancer/"+lb+"/start", nil); status != 202 {
		t.Fatalf("start: %d %s", status, body)
	}
	return e, cfg
}

// TestFullDiskIsNamedInEveryAnswer runs the real binary with its state on
// a small tmpfs, fills it up, and calls every route that writes: each one
// fails with an answer that says the disk is full (none with a bare 500),
// and stop still stops HAProxy, saying that recording it failed.
func TestFullDiskIsNamedInEveryAnswer(t *testing.T) {
	const lb = "d1d2d3d4-0000-4000-8000-00000000f011"
	e, cfg := startedOnTmpfs(t, lb, "127.0.0.1:8443")
	base := e.Path("lib")
	hap := tiersutil.WatchHAProxy(t, filepath.Join(base, lb, lb+".pid"))
	master := hap.Master()
	if master == 0 || !tiersutil.IsHAProxy(master) {
		t.Fatalf("no HAProxy running after start (pid %d)", master)
	}

	fill(t, e.Dir)
	newCert, err := e.CA.Server(e.AmphoraID)
	if err != nil {
		t.Fatal(err)
	}
	const lb2 = "d1d2d3d4-0000-4000-8000-00000000f012"
	writes := []struct {
		method, path string
		body         string
	}{
		{"PUT", "/1.0/config", e.Config()},
		{"PUT", "/1.0/certificate", string(newCert.Combined())},
		{"PUT", "/1.0/loadbalancer/" + e.AmphoraID + "/" + lb2 + "/haproxy", tiersutil.PlainLBConfig(base, lb2, "127.0.0.1:8081", "127.0.0.1:8444")},
		{"PUT", "/1.0/loadbalancer/" + e.AmphoraID + "/" + lb + "/haproxy", cfg + "# changed\n"},
		{"PUT", "/1.0/loadbalancer/" + lb + "/certificates/x.pem", "pem"},
		{"PUT", "/1.0/vrrp/upload", "vrrp_instance x {\n}\n"},
		{"PUT", "/1.0/listeners/" + e.AmphoraID + "/e1e2e3e4-0000-4000-8000-00000000f013/udp_listener", lvsConfig(e, "e1e2e3e4-0000-4000-8000-00000000f013")},
	}
	for _, w := range writes {
		status, ctype, body := e.Do(w.method, w.path, []byte(w.body))
		if status != 500 || ctype != "application/json" || !namesFullDisk(body) {
			t.Errorf("%s %s on a full disk: %d %s %s", w.method, w.path, status, ctype, body)
		}
	}

	// Stop stops HAProxy, and says its state could not be recorded.
	status, _, body := e.Do("PUT", "/1.0/loadbalancer/"+lb+"/stop", nil)
	if status != 500 || !strings.Contains(string(body), "HAProxy stopped") || !namesFullDisk(body) {
		t.Errorf("stop on a full disk: %d %s", status, body)
	}
	testenv.WaitFor(t, 10*time.Second, "HAProxy to stop", func() bool { return !tiersutil.IsHAProxy(master) })

	// Reads still answer.
	if status, _, body := e.Do("GET", "/1.0/listeners", nil); status != 200 {
		t.Errorf("listeners on a full disk: %d %s", status, body)
	}
}

// TestFullDiskPlugAnswers: the network routes on a full disk (a member
// port to plug, VIP firewall rules to store) answer that the disk is full,
// and the port stays where it was.
func TestFullDiskPlugAnswers(t *testing.T) {
	n := newNetTopology(t)
	n.Env.Extra = fmt.Sprintf("\n[amphora_agent]\nnetwork_namespace = %s\n", n.Amp.Name)
	onTmpfs(t, n.Env, 8<<20)
	n.Env.Start()
	e := n.Env
	vipBody := fmt.Sprintf(`{"subnet_cidr": "203.0.113.0/24", "gateway": "203.0.113.1", "mac_address": %q, "vrrp_ip": %q}`, n.VIPNIC.A.MAC, tiersutil.NetVRRP)
	if status, _, body := e.Do("POST", "/1.0/plug/vip/"+tiersutil.NetVIP, []byte(vipBody)); status != 202 {
		t.Fatalf("plug vip: %d %s\n%s", status, body, e.Output())
	}

	fill(t, e.Dir)
	memberBody := fmt.Sprintf(`{"mac_address": %q, "fixed_ips": [{"ip_address": %q, "subnet_cidr": "198.51.100.0/24", "gateway": null, "host_routes": []}]}`,
		n.MemNIC.A.MAC, tiersutil.NetMemberIP)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/1.0/plug/network", memberBody},
		{"PUT", "/1.0/interface/" + tiersutil.NetVRRP + "/rules", `[{"protocol":"TCP","cidr":null,"port":80}]`},
	} {
		status, ctype, body := e.Do(c.method, c.path, []byte(c.body))
		if status != 500 || ctype != "application/json" || !namesFullDisk(body) {
			t.Errorf("%s %s on a full disk: %d %s %s", c.method, c.path, status, ctype, body)
		}
	}
	// The member port was not moved into the namespace.
	if out, err := exec.Command("ip", "-n", n.Amp.Name, "-o", "link").CombinedOutput(); err != nil || strings.Contains(string(out), n.MemNIC.A.MAC) {
		t.Errorf("member port in the namespace after the refused plug: %v\n%s", err, out)
	}
}

// TestFullDiskStartLeavesNoStrayHAProxy: a start on a full disk (reached
// after a stop on a full disk, which could not record "stopped", so the
// start has nothing to record either) fails with an answer that says the
// disk is full and leaves no HAProxy of that load balancer running: one
// whose pid file could not be written would be a master the agent cannot
// find again. Once there is room, a start works and a restarted agent
// adopts that master: exactly one runs.
func TestFullDiskStartLeavesNoStrayHAProxy(t *testing.T) {
	const lb = "d1d2d3d4-0000-4000-8000-00000000f021"
	e, _ := startedOnTmpfs(t, lb, "127.0.0.1:8445")
	cfgPath := filepath.Join(e.Path("lib"), lb, "haproxy.cfg")
	fill(t, e.Dir)
	if status, _, body := e.Do("PUT", "/1.0/loadbalancer/"+lb+"/stop", nil); status != 500 {
		t.Fatalf("stop on a full disk: %d %s", status, body)
	}
	testenv.WaitFor(t, 10*time.Second, "HAProxy to stop", func() bool { return len(tiersutil.DaemonsOf("haproxy", cfgPath)) == 0 })
	// Fill again: the stop freed the pid file's and the socket's pages.
	fill(t, e.Dir)

	startFailsOnFullDisk(t, e, "/1.0/loadbalancer/"+lb+"/start")
	// The agent retries in the background; none of its attempts may
	// leave a master running while the disk is full.
	noneRuns(t, e, "haproxy", cfgPath)

	unfill(t, e.Dir)
	if status, _, body := e.Do("PUT", "/1.0/loadbalancer/"+lb+"/start", nil); status != 202 {
		t.Fatalf("start with room again: %d %s\n%s", status, body, e.Output())
	}
	masters := mainsOf("haproxy", cfgPath)
	if len(masters) != 1 {
		t.Fatalf("masters after the start: %v", masters)
	}
	restartAdopts(t, e, "haproxy", "HAProxy", cfgPath, masters[0])
	if status, _, body := e.Do("GET", "/1.0/listeners", nil); status != 200 || !strings.Contains(string(body), "ACTIVE") {
		t.Errorf("listeners after an agent restart: %d %s", status, body)
	}
}

// mainsOf is tiersutil.DaemonsOf without the children: the processes whose parent
// is not one of them (HAProxy's masters, keepalived's main processes).
func mainsOf(comm, cfgPath string) []int {
	all := tiersutil.DaemonsOf(comm, cfgPath)
	var mains []int
	for _, pid := range all {
		if !slices.Contains(all, parentOf(pid)) {
			mains = append(mains, pid)
		}
	}
	return mains
}

// noneRuns fails the test if, during 2 s, a process named comm runs
// cfgPath.
func noneRuns(t *testing.T, e *testenv.Env, comm, cfgPath string) {
	t.Helper()
	for i := 0; i < 20; i++ {
		if pids := tiersutil.DaemonsOf(comm, cfgPath); len(pids) > 0 {
			t.Fatalf("%s running %s on a full disk: %s\n%s", comm, cfgPath, describePids(pids), e.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// describePids names each process with its parent and state, to tell a
// leftover of an earlier phase (an orphan, dying) from one the agent just
// started (its child).
func describePids(pids []int) string {
	var b strings.Builder
	for _, pid := range pids {
		state := "?"
		if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			_, rest, _ := strings.Cut(string(data), ") ")
			state, _, _ = strings.Cut(rest, " ")
		}
		fmt.Fprintf(&b, "[pid %d, parent %d, state %s] ", pid, parentOf(pid), state)
	}
	return strings.TrimSpace(b.String())
}

func parentOf(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces: state, ppid, ...
	_, rest, _ := strings.Cut(string(data), ") ")
	f := strings.Fields(rest)
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// TestFullDiskVRRPStartLeavesNoStrayKeepalived: an agent that comes back
// on a full disk to a keepalived (VRRP) that should run but does not
// starts none without room for its pid file, and PUT /1.0/vrrp/start
// answers that the disk is full; no keepalived of this amphora runs
// meanwhile. Once there is room a start works and a
// restarted agent adopts that keepalived: exactly one runs. A stop on a
// full disk still stops it.
func TestFullDiskVRRPStartLeavesNoStrayKeepalived(t *testing.T) {
	topo.RequireRoot(t)
	if _, err := os.Stat("/usr/sbin/keepalived"); err != nil {
		t.Skip("keepalived is not installed (make test installs it)")
	}
	a := vrrputil.NewAmp(t, "fd", "203.0.113.4", 100)
	peer := topo.NewNamespace(t, "vrfd")
	topo.Link(t, a.NS, "eth1", []string{a.Addr + "/24"}, peer, "eth1", []string{"203.0.113.5/24"})
	onTmpfs(t, a.Env, 8<<20)
	cfgPath, pid := a.StartKeepalived(t, "203.0.113.5")
	e := a.Env

	// Gone while the agent was down (as after a reboot), and the disk
	// full when it comes back: it wants keepalived running but has no
	// room for its pid file. (Its old pid files go first: a start
	// removes them, which would make room.)
	e.Stop()
	syscall.Kill(-pid, syscall.SIGKILL)
	// All of them, not only the main process: its VRRP child can outlive
	// it by tens of milliseconds under load and would be taken for one
	// the agent started on the full disk.
	testenv.WaitFor(t, 10*time.Second, "keepalived and its children to die", func() bool {
		return len(tiersutil.DaemonsOf("keepalived", cfgPath)) == 0
	})
	old, _ := filepath.Glob(filepath.Join(a.Base(), "vrrp", "*.pid"))
	for _, p := range old {
		os.Remove(p)
	}
	fill(t, e.Dir)
	e.Start()
	noneRuns(t, e, "keepalived", cfgPath)
	startFailsOnFullDisk(t, e, "/1.0/vrrp/start")
	noneRuns(t, e, "keepalived", cfgPath)

	unfill(t, e.Dir)
	// The agent's own retry may win the race: a start then reloads.
	if status, _, body := e.Do("PUT", "/1.0/vrrp/start", nil); status != 202 {
		t.Fatalf("start with room again: %d %s\n%s", status, body, e.Output())
	}
	mains := mainsOf("keepalived", cfgPath)
	if len(mains) != 1 || mains[0] != a.KeepalivedPid() {
		t.Fatalf("keepalived main processes after the start: %v, pid file names %d", mains, a.KeepalivedPid())
	}
	restartAdopts(t, e, "keepalived", "keepalived", cfgPath, mains[0])

	// Stop on a full disk stops keepalived (a backup left running would
	// keep bidding for the VIP) and says its state could not be recorded.
	fill(t, e.Dir)
	status, _, body := e.Do("PUT", "/1.0/vrrp/stop", nil)
	if status != 500 || !strings.Contains(string(body), "keepalived stopped") || !namesFullDisk(body) {
		t.Errorf("stop on a full disk: %d %s", status, body)
	}
	testenv.WaitFor(t, 10*time.Second, "keepalived to stop", func() bool {
		return len(tiersutil.DaemonsOf("keepalived", cfgPath)) == 0
	})
}
