//go:build cloud

package cloud_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/cloud"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/vm"
)

// The members the scenarios serve from the controller's namespace on the
// member network: two for the listeners' pools, a third for the L7
// policy's pool.
const (
	sceneMember1 = "198.51.100.130"
	sceneMember2 = "198.51.100.131"
	sceneMember3 = "198.51.100.132"
	sceneHTTP    = 8080
	sceneUDP     = 5300
	sceneSCTP    = 3868
)

// scene is one load balancer on one amphora VM that the scenarios of
// TestCloudScenarios share, with the member servers behind it.
type scene struct {
	cp     *cloud.ControlPlane
	lb     apiLB
	client *http.Client
	http   map[string]*topo.Server // by member name
	names  map[string]string       // API id → the test's name, for logs
	// memberSubnet: members' subnet ("" → the fabric's IPv4 member subnet).
	memberSubnet string
	// tls: the TERMINATED_HTTPS listener while it exists.
	tls *tlsListener
}

// cli runs the openstack CLI and returns its trimmed output.
func (s *scene) cli(t *testing.T, args ...string) string {
	t.Helper()
	out, err := s.cp.OpenStack(args...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// rest sends one API request as the test's project.
func (s *scene) rest(t *testing.T, method, path string, body, out any) {
	t.Helper()
	if _, err := s.cp.API(method, path, cloudProject, body, out); err != nil {
		t.Fatal(err)
	}
}

// change makes one API change and waits until the load balancer is
// ACTIVE again (the worker's flow done, the amphora configured), logging
// how long that took. A flow that failed and was reverted also leaves the
// load balancer ACTIVE (the changed object in ERROR): the worker's log
// tells, and an answer of the agent it did not expect fails the test.
func (s *scene) change(t *testing.T, what string, do func()) {
	t.Helper()
	worker := s.serviceLog("octavia-worker")
	before := fileSize(worker)
	start := time.Now()
	do()
	waitLB(t, s.cp, s.lb.ID, "ACTIVE", 5*time.Minute)
	t.Logf("%s → ACTIVE in %.1fs", what, time.Since(start).Seconds())
	if failed := flowFailures(worker, before); failed != "" {
		t.Errorf("%s: the worker's flow failed:\n%s", what, failed)
	}
}

// serviceLog is the log file of the control plane's service name.
func (s *scene) serviceLog(name string) string {
	for _, svc := range s.cp.Services {
		if svc.Name == name {
			return svc.Log
		}
	}
	return ""
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// logSince is what the log file gained after offset.
func logSince(path string, offset int64) string {
	data, err := os.ReadFile(path)
	if err != nil || int64(len(data)) < offset {
		return ""
	}
	return string(data[offset:])
}

// flowFailures returns the lines of the worker's log after offset that
// show an amphora call failing a flow: the agent's unexpected answers and
// the tasks that failed on them. The compute and connectivity waits'
// failures are Octavia's retries while a VM boots, not faults.
func flowFailures(log string, offset int64) string {
	var out []string
	for _, line := range strings.Split(logSince(log, offset), "\n") {
		failedTask := strings.Contains(line, "transitioned into state 'FAILURE'") &&
			!strings.Contains(line, "compute-wait") && !strings.Contains(line, "connectivity-wait")
		if failedTask || strings.Contains(line, "Amphora agent returned unexpected result code") {
			if len(line) > 1500 {
				line = line[:1500] + "…"
			}
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// addMember adds a member on the member subnet through REST (the CLI's
// --subnet-id looks the subnet up in Neutron) and returns its id.
func (s *scene) addMember(t *testing.T, pool, name, addr string, port int) string {
	t.Helper()
	var resp struct {
		Member struct {
			ID string `json:"id"`
		} `json:"member"`
	}
	s.change(t, "member "+name, func() {
		body := map[string]any{"member": map[string]any{"name": name, "address": addr, "protocol_port": port,
			"subnet_id": s.memberSubnetID()}}
		s.rest(t, "POST", "/v2/lbaas/pools/"+pool+"/members", body, &resp)
	})
	s.names[resp.Member.ID] = name + "(" + s.names[pool] + ")"
	return resp.Member.ID
}

// serve makes a listener on port (protocol proto), its default pool
// (ROUND_ROBIN) and a health monitor on it (monitor: the CLI's arguments
// after --type), each ACTIVE before the next, and returns the pool's id.
func (s *scene) serve(t *testing.T, name, proto string, port int, monitor ...string) string {
	t.Helper()
	s.change(t, fmt.Sprintf("listener %s %s:%d", name, proto, port), func() {
		s.cli(t, "loadbalancer", "listener", "create", "--name", name, "--protocol", proto,
			"--protocol-port", fmt.Sprint(port), s.lb.ID)
	})
	var pool string
	s.change(t, "pool "+proto, func() {
		pool = s.cli(t, "loadbalancer", "pool", "create", "--name", "p"+name, "--lb-algorithm", "ROUND_ROBIN",
			"--listener", name, "--protocol", proto, "-f", "value", "-c", "id")
	})
	s.names[pool] = "p" + name
	s.change(t, monitor[0]+" health monitor", func() {
		s.cli(t, append(append([]string{"loadbalancer", "healthmonitor", "create", "--type"}, monitor...), pool)...)
	})
	return pool
}

// memberPair adds member-1 and member-2 on port to the pool (named with
// prefix), waits until the API reports both ONLINE, and returns their ids
// by name.
func (s *scene) memberPair(t *testing.T, pool, prefix string, port int) map[string]string {
	t.Helper()
	ids := map[string]string{}
	for _, name := range []string{"member-1", "member-2"} {
		addr := map[string]string{"member-1": sceneMember1, "member-2": sceneMember2}[name]
		ids[name] = s.addMember(t, pool, prefix+name, addr, port)
	}
	for _, name := range []string{"member-1", "member-2"} {
		s.waitMember(t, pool, ids[name], prefix+name, "ONLINE")
	}
	return ids
}

type apiStatus struct {
	ProvisioningStatus string `json:"provisioning_status"`
	OperatingStatus    string `json:"operating_status"`
}

// waitOperating polls an object of the API (path answers {key: {...}})
// until its operating status is want: for members and pools that is the
// health manager writing what the amphora's heartbeats say.
func (s *scene) waitOperating(t *testing.T, what, path, key, want string) {
	t.Helper()
	start := time.Now()
	var last apiStatus
	cloud.WaitFor(t, 2*time.Minute, fmt.Sprintf("%s %s in the API", what, want), func() bool {
		var got map[string]apiStatus
		if _, err := s.cp.API("GET", path, cloudProject, nil, &got); err != nil {
			return false
		}
		last = got[key]
		return last.OperatingStatus == want
	})
	t.Logf("%s %s (provisioning %s) after %.1fs", what, want, last.ProvisioningStatus, time.Since(start).Seconds())
}

func (s *scene) waitMember(t *testing.T, pool, id, name, want string) {
	t.Helper()
	s.waitOperating(t, "member "+name, "/v2/lbaas/pools/"+pool+"/members/"+id, "member", want)
}

// httpAsk is one request to the VIP on a new connection; it answers the
// member that served it, or "status NNN" for an answer of the proxy's own.
func (s *scene) httpAsk(port int, path string) func() (string, error) {
	return func() (string, error) {
		resp, err := s.client.Get("http://" + net.JoinHostPort(s.lb.VIPAddress, fmt.Sprint(port)) + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		if m := resp.Header.Get("X-Member"); m != "" && resp.StatusCode == http.StatusOK {
			return m, nil
		}
		return fmt.Sprintf("status %d %s", resp.StatusCode, resp.Header.Get("Location")), nil
	}
}

func (s *scene) udpAsk() (string, error) {
	return s.cp.NS.UDPAsk(fmt.Sprintf("%s:%d", s.lb.VIPAddress, sceneUDP), []byte("ping"), 2*time.Second)
}

func (s *scene) sctpAsk() (string, error) {
	return s.cp.NS.SCTPAsk(fmt.Sprintf("%s:%d", s.lb.VIPAddress, sceneSCTP), []byte("ping"), 3*time.Second)
}

// onlyFrom waits until a run of consecutive answers through the VIP
// comes only from want, each of want among them: the change is in effect
// (an answer from anything else, or an error, starts the run again).
func onlyFrom(t *testing.T, what string, ask func() (string, error), want ...string) {
	t.Helper()
	start := time.Now()
	run := 4 * len(want)
	var seen map[string]int
	n := 0
	var last string
	var lastErr error
	reset := func() { seen, n = map[string]int{}, 0 }
	reset()
	ok := func(got string) bool {
		for _, w := range want {
			if got == w {
				return true
			}
		}
		return false
	}
	cloud.WaitFor(t, 2*time.Minute, fmt.Sprintf("%s answered only by %v", what, want), func() bool {
		got, err := ask()
		if err != nil || !ok(got) {
			last, lastErr = got, err
			reset()
			return false
		}
		seen[got]++
		n++
		if n < run {
			return false
		}
		for _, w := range want {
			if seen[w] == 0 {
				return false
			}
		}
		return true
	})
	t.Logf("%s: %v after %.1fs (last other answer %q, %v)", what, seen, time.Since(start).Seconds(), last, lastErr)
}

// slowMember answers like topo.MemberHandler, after 3 s on /slow (what
// the listener's member data timeout cuts short).
func slowMember(name string) http.Handler {
	member := topo.MemberHandler(name)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(3 * time.Second)
		}
		member.ServeHTTP(w, r)
	})
}

// amphoraVMs is what the compute driver boots: the image an operator
// would upload, `make image`'s (make test-cloud makes it and names it in
// AMPHORA_IMAGE).
func amphoraVMs(t *testing.T) *cloud.AmphoraVMs {
	t.Helper()
	image := os.Getenv("AMPHORA_IMAGE")
	if image == "" {
		t.Fatal("AMPHORA_IMAGE is not set (make test-cloud makes the image and sets it)")
	}
	return &cloud.AmphoraVMs{Image: vm.Baked(t, image)}
}

// newScene is a scene on cp with no load balancer yet.
func newScene(cp *cloud.ControlPlane) *scene {
	return &scene{cp: cp, client: cp.NS.HTTPClient(false), http: map[string]*topo.Server{}, names: map[string]string{}}
}

// serveMembers puts each address on br-member (the member network's
// bridge in the controller's namespace) and serves HTTP there as
// member-N; the first echoes of them also answer UDP as udp-member-N and,
// with sctp, SCTP as sctp-member-N.
func (s *scene) serveMembers(t *testing.T, addrs []string, echoes int, sctp bool) {
	t.Helper()
	for i, addr := range addrs {
		name := fmt.Sprintf("member-%d", i+1)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := s.cp.NS.Exec(ctx, "ip", "addr", "add", addr+"/25", "dev", "br-member")
		cancel()
		if err != nil {
			t.Fatalf("%s on br-member: %v: %s", addr, err, out)
		}
		s.http[name] = s.cp.NS.ServeHTTP(t, net.JoinHostPort(addr, fmt.Sprint(sceneHTTP)), slowMember(name))
		if i < echoes {
			s.cp.NS.ServeUDPEcho(t, net.JoinHostPort(addr, fmt.Sprint(sceneUDP)), "udp-"+name)
			if sctp {
				s.cp.NS.ServeSCTPEcho(t, net.JoinHostPort(addr, fmt.Sprint(sceneSCTP)), "sctp-"+name)
			}
		}
	}
}

// TestCloudScenarios drives one SINGLE load balancer on one amphora VM
// through what users do with it, each scenario a subtest asserting the
// API's provisioning and operating statuses and the traffic through the
// VIP: an HTTP health monitor (members ONLINE, one stopped → ERROR, back
// → ONLINE), updates (member weight and admin state, the pool's
// algorithm, L7 policies, the listener's connection limit and member
// timeout), a TERMINATED_HTTPS listener with SNI, UDP and SCTP listeners with their monitors, a PING monitor,
// the agent and HAProxy killed under Octavia (AgentFaults), the
// amphora's power cut and Octavia's failover (AmphoraFailover), single deletes, and the cascade delete leaving nothing in the database.
func TestCloudScenarios(t *testing.T) {
	boot := amphoraVMs(t)
	// The amphora's clock lags the controller's: it boots, serves and
	// takes rotated certificates all the same.
	boot.ClockOffset = -amphoraClockLag
	// Housekeeping purges deleted load balancers and amphorae at once, so
	// the cascade delete's database check can wait for an empty database.
	// A shorter heartbeat_timeout lets AmphoraFailover's power cut be
	// noticed sooner (scenesHeartbeatTimeout says why this value).
	cp := cloud.Start(t, cloud.Options{VMs: boot,
		Extra: "[house_keeping]\ncleanup_interval = 5\namphora_expiry_age = 1\nload_balancer_expiry_age = 1\n" +
			fmt.Sprintf("\n[health_manager]\nheartbeat_timeout = %d\n", int(scenesHeartbeatTimeout.Seconds()))})
	created := time.Now()
	s := newScene(cp)
	s.lb = waitLB(t, cp, createLB(t, cp, "lb-scenes"), "ACTIVE", 20*time.Minute)
	s.names[s.lb.ID] = "lb"
	s.checkCreate(t, time.Since(created), vm.Accel(boot.Image))

	s.serveMembers(t, []string{sceneMember1, sceneMember2, sceneMember3}, 2, true)

	second := s.startSecondLB(t)
	var pool string
	members := map[string]string{} // name → id
	if !t.Run("HTTPMonitor", func(t *testing.T) { pool = s.httpMonitor(t, members) }) {
		t.Fatal("the HTTP listener did not come up; the other scenarios build on it")
	}
	t.Run("MemberUpdates", func(t *testing.T) { s.memberUpdates(t, pool, members) })
	t.Run("PoolAlgorithm", func(t *testing.T) { s.poolAlgorithm(t, pool) })
	t.Run("L7Policies", func(t *testing.T) { s.l7Policies(t) })
	t.Run("ListenerLimits", func(t *testing.T) { s.listenerLimits(t) })
	t.Run("TerminatedHTTPS", func(t *testing.T) { s.terminatedHTTPS(t, pool) })
	t.Run("UDP", func(t *testing.T) {
		s.lvsListener(t, "UDP", sceneUDP, "UDP-CONNECT", s.udpAsk)
	})
	t.Run("SCTP", func(t *testing.T) {
		s.lvsListener(t, "SCTP", sceneSCTP, "SCTP", s.sctpAsk)
	})
	t.Run("PingMonitor", func(t *testing.T) { s.pingMonitor(t) })
	t.Run("Prometheus", func(t *testing.T) { s.prometheus(t) })
	t.Run("CertRotation", func(t *testing.T) { s.certRotation(t) })
	t.Run("SecondLoadBalancerIPv6", func(t *testing.T) { second.finish(t) })
	t.Run("AgentFaults", func(t *testing.T) { s.agentFaults(t) })
	t.Run("AmphoraFailover", func(t *testing.T) { s.amphoraFailover(t) })
	s.logTransitions(t)
	t.Run("Deletes", func(t *testing.T) { s.deletes(t, pool, members) })
	t.Run("Unplug", func(t *testing.T) { s.unplug(t, pool, members) })
	t.Run("CascadeDelete", func(t *testing.T) { s.cascadeDelete(t) })
}

// checkCreate: the create left one server whose VM holds the VIP, whose
// config drive carries what Nova would write (network_data.json for the
// management port, Octavia's user data, which cloud-init ran, and the
// worker's files, which cloud-init wrote), and whose
// agent answered the worker's requests; it logs the time to ACTIVE and
// the agent's share of it (from its journal: first request to last
// answer; the rest is the VM booting).
func (s *scene) checkCreate(t *testing.T, took time.Duration, accel string) {
	if s.lb.OperatingStatus != "ONLINE" {
		t.Errorf("operating status %s after the create, want ONLINE (the health manager's view of the heartbeats)", s.lb.OperatingStatus)
	}
	servers, vms := s.cp.Fabric.Servers(), s.cp.VMs()
	if len(servers) != 1 || len(vms) != 1 {
		t.Fatalf("%d servers and %d VMs after the create, want 1", len(servers), len(vms))
	}
	server, v := servers[0], vms[servers[0].ID]
	if v == nil {
		t.Fatalf("server %s has no VM", server.ID)
	}
	share := cloud.AgentRequests(v.MustExec(cloud.AgentJournal))
	t.Logf("create → ACTIVE in %.1fs (%s); the agent's share: %d requests, first to last answer %.1fs",
		took.Seconds(), accel, share.Requests, share.Span().Seconds())
	if share.Requests == 0 {
		t.Errorf("no request records in the agent's journal: its share of the create cannot be computed:\n%s",
			v.MustExec("journalctl -b -u amphora-agent.service --no-pager | tail -n 20"))
	}
	v.MustExec("ip netns exec amphora-haproxy ip -4 addr show | grep -q 'inet " + s.lb.VIPAddress + "/'")

	mac := server.Ports[0].MACAddress
	nd := v.MustExec(`d=$(mktemp -d) && mount -o ro /dev/disk/by-label/config-2 "$d" && ` +
		`cat "$d/openstack/latest/network_data.json"; umount "$d"; rmdir "$d"`)
	if !strings.Contains(nd, `"ethernet_mac_address":"`+mac+`"`) || !strings.Contains(nd, `"type":"ipv4_dhcp"`) {
		t.Errorf("network_data.json on the config drive does not describe the management port %s by DHCP: %s", mac, nd)
	}
	checkUserData(t, v, server.UserData)
	checkDriveFiles(t, v, server.Files)
}

// checkDriveFiles: every file the worker put on the config drive is on
// the amphora byte for byte, written by cloud-init (amphora-config-drive,
// the package's own writer, stepped aside).
func checkDriveFiles(t *testing.T, v *vm.VM, files map[string][]byte) {
	t.Helper()
	for _, path := range []string{"/etc/octavia/amphora-agent.conf", "/etc/octavia/certs/server.pem",
		"/etc/octavia/certs/client_ca.pem", "/etc/rsyslog.d/10-rsyslog.conf"} {
		content, ok := files[path]
		if !ok {
			t.Fatalf("the worker put no %s on the config drive (%d files)", path, len(files))
		}
		sum := sha256.Sum256(content)
		if got, _, _ := strings.Cut(v.MustExec("sha256sum "+path), " "); got != hex.EncodeToString(sum[:]) {
			t.Errorf("%s on the amphora differs from the config drive's", path)
		}
	}
	if r := strings.TrimSpace(v.MustExec("systemctl show -p ConditionResult --value amphora-config-drive.service")); r != "no" {
		t.Errorf("amphora-config-drive ran beside cloud-init (ConditionResult=%s)", r)
	}
}

// checkUserData: Octavia's user data (ComputeCreate's cloud-config:
// runcmd restarts rsyslog, which then reads the controller's
// 10-rsyslog.conf) reached the VM as Nova would pass it, and cloud-init
// ran it: its copy holds the same bytes, it finished without errors, and
// rsyslog was started again while cloud-init's last stage ran the runcmd.
func checkUserData(t *testing.T, v *vm.VM, userData string) {
	t.Helper()
	if !strings.HasPrefix(userData, "#cloud-config") || !strings.Contains(userData, "systemctl restart rsyslog") {
		t.Fatalf("the worker's user data is not Octavia's cloud-config: %q", userData)
	}
	sum := sha256.Sum256([]byte(userData))
	if got, _, _ := strings.Cut(v.MustExec("sha256sum /var/lib/cloud/instance/user-data.txt"), " "); got != hex.EncodeToString(sum[:]) {
		t.Errorf("cloud-init's user data differs from the worker's (user_data dropped?):\n%s\nwant:\n%s",
			v.MustExec("cat /var/lib/cloud/instance/user-data.txt"), userData)
	}
	// The agent answers before cloud-init's last stage is done.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	_, status, err := v.Exec(ctx, "timeout 150 cloud-init status --wait --long")
	cancel()
	if err != nil || !strings.Contains(status, "status: done") {
		t.Errorf("cloud-init did not finish cleanly: %v\n%s", err, status)
	}
	if script := v.MustExec("cat /var/lib/cloud/instance/scripts/runcmd 2>&1 || true"); !strings.Contains(script, "systemctl restart rsyslog") {
		t.Errorf("cloud-init's runcmd script lacks the user data's commands:\n%s", script)
	}
	show := func(unit, prop string) float64 {
		t.Helper()
		out := strings.TrimSpace(v.MustExec("systemctl show -p " + prop + " --value " + unit))
		n, err := strconv.ParseFloat(out, 64)
		if err != nil {
			t.Fatalf("%s %s: %q", unit, prop, out)
		}
		return n / 1e6
	}
	final, rsyslog := show("cloud-final.service", "ExecMainStartTimestampMonotonic"), show("rsyslog.service", "ExecMainStartTimestampMonotonic")
	if rsyslog < final {
		t.Errorf("rsyslog last started at %.1fs, before cloud-final (%.1fs): the user data's runcmd did not run", rsyslog, final)
	}
	t.Logf("user data (%d bytes) run by cloud-init: cloud-final at %.1fs, rsyslog restarted at %.1fs; %s",
		len(userData), final, rsyslog, strings.Join(strings.Fields(status), " "))
}

// httpMonitor: an HTTP listener, a pool, an HTTP health monitor and two
// members → both ONLINE in the API and serving; member-1 stopped → ERROR
// (the pool and the load balancer DEGRADED) and only member-2 serving;
// member-1 back → ONLINE and serving again. Returns the pool's id.
func (s *scene) httpMonitor(t *testing.T, members map[string]string) string {
	lb := s.lb.ID
	pool := s.serve(t, "l-http", "HTTP", 80, "HTTP", "--url-path", "/", "--delay", "2", "--timeout", "2",
		"--max-retries", "1", "--max-retries-down", "1")
	for name, id := range s.memberPair(t, pool, "", sceneHTTP) {
		members[name] = id
	}
	onlyFrom(t, "HTTP", s.httpAsk(80, "/"), "member-1", "member-2")

	if err := s.http["member-1"].Stop(); err != nil {
		t.Fatal(err)
	}
	s.waitMember(t, pool, members["member-1"], "member-1", "ERROR")
	s.waitOperating(t, "pool", "/v2/lbaas/pools/"+pool, "pool", "DEGRADED")
	s.waitOperating(t, "load balancer", "/v2/lbaas/loadbalancers/"+lb, "loadbalancer", "DEGRADED")
	onlyFrom(t, "HTTP with member-1 stopped", s.httpAsk(80, "/"), "member-2")

	if err := s.http["member-1"].Start(); err != nil {
		t.Fatal(err)
	}
	s.waitMember(t, pool, members["member-1"], "member-1", "ONLINE")
	s.waitOperating(t, "load balancer", "/v2/lbaas/loadbalancers/"+lb, "loadbalancer", "ONLINE")
	onlyFrom(t, "HTTP with member-1 back", s.httpAsk(80, "/"), "member-1", "member-2")
	return pool
}

// memberUpdates: member-1's weight 0 → DRAINING and no traffic; weight 1
// but admin state down → OFFLINE and no traffic; admin state up → ONLINE
// and traffic to both again.
func (s *scene) memberUpdates(t *testing.T, pool string, members map[string]string) {
	path := "/v2/lbaas/pools/" + pool + "/members/" + members["member-1"]
	update := func(what string, fields map[string]any) {
		s.change(t, "member-1 "+what, func() {
			s.rest(t, "PUT", path, map[string]any{"member": fields}, nil)
		})
	}
	update("weight 0", map[string]any{"weight": 0})
	s.waitMember(t, pool, members["member-1"], "member-1", "DRAINING")
	onlyFrom(t, "HTTP with member-1 at weight 0", s.httpAsk(80, "/"), "member-2")

	update("weight 1, admin state down", map[string]any{"weight": 1, "admin_state_up": false})
	s.waitMember(t, pool, members["member-1"], "member-1", "OFFLINE")
	onlyFrom(t, "HTTP with member-1 down by admin", s.httpAsk(80, "/"), "member-2")

	update("admin state up", map[string]any{"admin_state_up": true})
	s.waitMember(t, pool, members["member-1"], "member-1", "ONLINE")
	onlyFrom(t, "HTTP with member-1 up again", s.httpAsk(80, "/"), "member-1", "member-2")
}

// poolAlgorithm: SOURCE_IP sends every connection of the one client to
// one member; back to ROUND_ROBIN, both serve again.
func (s *scene) poolAlgorithm(t *testing.T, pool string) {
	s.change(t, "pool SOURCE_IP", func() {
		s.cli(t, "loadbalancer", "pool", "set", "--lb-algorithm", "SOURCE_IP", pool)
	})
	seen := map[string]int{}
	ask := s.httpAsk(80, "/")
	for i := 0; i < 12; i++ {
		got, err := ask()
		if err != nil {
			t.Fatal(err)
		}
		seen[got]++
	}
	if len(seen) != 1 {
		t.Errorf("SOURCE_IP: one client's 12 connections answered by %v, want one member", seen)
	}
	// LEAST_CONNECTIONS would also send sequential connections to one
	// member: the amphora's HAProxy config tells the two apart.
	for _, v := range s.amphoraVMs(t) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		code, out, err := v.Exec(ctx, "grep -h '^ *balance ' /var/lib/octavia/"+s.lb.ID+"/haproxy.cfg")
		cancel()
		if err != nil || code != 0 || !strings.Contains(out, "balance source") {
			t.Errorf("the amphora's HAProxy config after SOURCE_IP: %q (exit %d, %v), want balance source", out, code, err)
		}
	}
	t.Logf("SOURCE_IP: 12 connections answered by %v", seen)
	s.change(t, "pool ROUND_ROBIN", func() {
		s.cli(t, "loadbalancer", "pool", "set", "--lb-algorithm", "ROUND_ROBIN", pool)
	})
	onlyFrom(t, "HTTP with ROUND_ROBIN again", ask, "member-1", "member-2")
}

// l7Policies: a second pool (member-3) chosen by a REDIRECT_TO_POOL policy
// for paths under /p2, and a REDIRECT_TO_URL policy for paths under /old;
// everything else still goes to the listener's default pool.
func (s *scene) l7Policies(t *testing.T) {
	var pool2 string
	s.change(t, "pool p-l7", func() {
		pool2 = s.cli(t, "loadbalancer", "pool", "create", "--name", "p-l7", "--lb-algorithm", "ROUND_ROBIN",
			"--loadbalancer", s.lb.ID, "--protocol", "HTTP", "-f", "value", "-c", "id")
	})
	s.names[pool2] = "p-l7"
	s.addMember(t, pool2, "member-3", sceneMember3, sceneHTTP)
	s.change(t, "L7 policy REDIRECT_TO_POOL", func() {
		s.cli(t, "loadbalancer", "l7policy", "create", "--name", "pol-pool", "--action", "REDIRECT_TO_POOL",
			"--redirect-pool", pool2, "l-http")
	})
	s.change(t, "L7 rule PATH STARTS_WITH /p2", func() {
		s.cli(t, "loadbalancer", "l7rule", "create", "--type", "PATH", "--compare-type", "STARTS_WITH", "--value", "/p2", "pol-pool")
	})
	onlyFrom(t, "HTTP /p2/x", s.httpAsk(80, "/p2/x"), "member-3")
	onlyFrom(t, "HTTP /other", s.httpAsk(80, "/other"), "member-1", "member-2")

	s.change(t, "L7 policy REDIRECT_TO_URL", func() {
		s.cli(t, "loadbalancer", "l7policy", "create", "--name", "pol-url", "--action", "REDIRECT_TO_URL",
			"--redirect-url", "http://moved.example.org/new", "l-http")
	})
	s.change(t, "L7 rule PATH STARTS_WITH /old", func() {
		s.cli(t, "loadbalancer", "l7rule", "create", "--type", "PATH", "--compare-type", "STARTS_WITH", "--value", "/old", "pol-url")
	})
	onlyFrom(t, "HTTP /old/page", s.httpAsk(80, "/old/page"), "status 302 http://moved.example.org/new")
	for _, pol := range []string{"pol-pool", "pol-url"} {
		if got := s.cli(t, "loadbalancer", "l7policy", "show", pol, "-f", "value", "-c", "provisioning_status", "-c", "operating_status"); got != "ACTIVE\nONLINE" {
			t.Errorf("L7 policy %s: %q, want ACTIVE and ONLINE", pol, got)
		}
	}
}

// listenerLimits: a member data timeout of 1 s turns a 3 s answer into
// the proxy's 504; a connection limit of 2 holds a third connection while
// two are open. Both undone → the slow answer and the third connection
// get through.
func (s *scene) listenerLimits(t *testing.T) {
	slow := s.httpAsk(80, "/slow")
	if got, err := slow(); err != nil || !strings.HasPrefix(got, "member-") {
		t.Fatalf("/slow before the change: %q, %v", got, err)
	}
	s.change(t, "listener connection limit 2, member data timeout 1000 ms", func() {
		s.cli(t, "loadbalancer", "listener", "set", "--connection-limit", "2", "--timeout-member-data", "1000", "l-http")
	})
	onlyFrom(t, "HTTP /slow with a 1 s member timeout", slow, "status 504 ")
	vip := net.JoinHostPort(s.lb.VIPAddress, "80")
	var held []net.Conn
	for i := 0; i < 2; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := s.cp.NS.DialContext(ctx, "tcp", vip)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	third := *s.client
	third.Timeout = 3 * time.Second
	if resp, err := third.Get("http://" + vip + "/"); err == nil {
		resp.Body.Close()
		t.Errorf("a third connection with two held was answered (%s): the connection limit of 2 is not in effect", resp.Status)
	} else {
		t.Logf("a third connection with two held: %v", err)
	}
	for _, c := range held {
		c.Close()
	}
	s.change(t, "listener connection limit -1, member data timeout 50000 ms", func() {
		s.cli(t, "loadbalancer", "listener", "set", "--connection-limit", "-1", "--timeout-member-data", "50000", "l-http")
	})
	onlyFrom(t, "HTTP /slow with the default timeout", slow, "member-1", "member-2")
}

// lvsListener: a UDP or SCTP listener, its pool with a monitor of type
// monitor and the two members → members ONLINE, both answering through
// the VIP.
func (s *scene) lvsListener(t *testing.T, proto string, port int, monitor string, ask func() (string, error)) {
	p := strings.ToLower(proto)
	pool := s.serve(t, "l-"+p, proto, port, monitor, "--delay", "3", "--timeout", "2", "--max-retries", "1", "--max-retries-down", "1")
	s.memberPair(t, pool, p+"-", port)
	onlyFrom(t, proto, ask, p+"-member-1", p+"-member-2")
}

// pingMonitor: a TCP listener whose pool has a PING monitor → the
// members ONLINE (the amphora pings them) and both answering.
func (s *scene) pingMonitor(t *testing.T) {
	pool := s.serve(t, "l-tcp", "TCP", 81, "PING", "--delay", "2", "--timeout", "2", "--max-retries", "1", "--max-retries-down", "1")
	s.memberPair(t, pool, "tcp-", sceneHTTP)
	onlyFrom(t, "TCP:81", s.httpAsk(81, "/"), "member-1", "member-2")
}

// prometheus: a PROMETHEUS listener → ACTIVE, and a scrape through the
// VIP answers with the load balancer's and listeners' metrics.
func (s *scene) prometheus(t *testing.T) {
	defer s.logVMState(t)
	s.change(t, "listener PROMETHEUS:9100", func() {
		s.cli(t, "loadbalancer", "listener", "create", "--name", "l-prom", "--protocol", "PROMETHEUS",
			"--protocol-port", "9100", s.lb.ID)
	})
	s.checkScrape(t)
}

// checkScrape: a scrape through the VIP's PROMETHEUS listener answers
// with the load balancer's and listeners' metrics.
func (s *scene) checkScrape(t *testing.T) {
	t.Helper()
	var body string
	cloud.WaitFor(t, time.Minute, "a scrape through the VIP", func() bool {
		resp, err := s.client.Get("http://" + net.JoinHostPort(s.lb.VIPAddress, "9100") + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		body = string(data)
		return resp.StatusCode == http.StatusOK
	})
	for _, want := range []string{"octavia_loadbalancer_max_connections", "octavia_listener_connections_total"} {
		if !strings.Contains(body, want) {
			t.Errorf("the scrape lacks %s (%d bytes)", want, len(body))
		}
	}
	t.Logf("a scrape through the VIP: %d bytes, %d lines", len(body), strings.Count(body, "\n"))
}

// logVMState logs, when the scenario failed, what the amphora runs: the
// agent's last journal lines, the sockets open in the load balancer's
// namespace, and the HAProxy and keepalived processes.
func (s *scene) logVMState(t *testing.T) {
	if !t.Failed() {
		return
	}
	for _, v := range s.cp.VMs() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, out, err := v.Exec(ctx, "journalctl -b -u amphora-agent.service --no-pager | tail -n 80; "+
			"ip netns exec amphora-haproxy ss -lntup; ps -eo pid,etimes,args | grep -E '[h]aproxy|[k]eepalived'")
		cancel()
		t.Logf("amphora %s at the failure (%v):\n%s", v.Name, err, out)
	}
}

// logTransitions prints the operating status changes the health manager
// wrote so far (what the heartbeats made of each object), with the
// objects' names where the test knows them.
func (s *scene) logTransitions(t *testing.T) {
	var log string
	for _, svc := range s.cp.Services {
		if svc.Name == "octavia-health-manager" {
			data, _ := os.ReadFile(svc.Log)
			log = string(data)
		}
	}
	var out []string
	for _, line := range strings.Split(log, "\n") {
		_, change, ok := strings.Cut(line, " [-] ")
		if !ok || len(line) < 23 || !strings.Contains(change, "status has changed") {
			continue
		}
		change, _, _ = strings.Cut(change, ", updating db")
		for id, name := range s.names {
			change = strings.ReplaceAll(change, id, name)
		}
		out = append(out, line[11:23]+" "+change)
	}
	t.Logf("the health manager's status changes:\n%s", strings.Join(out, "\n"))
}

// deletes: a member (traffic to the other only), the L7 policy and its
// pool (/p2 back on the default pool), the UDP listener (no answer on
// its port any more), the TERMINATED_HTTPS listener (port 443 closed),
// each ACTIVE afterwards.
func (s *scene) deletes(t *testing.T, pool string, members map[string]string) {
	s.change(t, "delete member-2", func() {
		s.rest(t, "DELETE", "/v2/lbaas/pools/"+pool+"/members/"+members["member-2"], nil, nil)
	})
	onlyFrom(t, "HTTP without member-2", s.httpAsk(80, "/"), "member-1")
	s.change(t, "delete L7 policy pol-pool", func() {
		s.cli(t, "loadbalancer", "l7policy", "delete", "pol-pool")
	})
	s.change(t, "delete pool p-l7", func() {
		s.cli(t, "loadbalancer", "pool", "delete", "p-l7")
	})
	onlyFrom(t, "HTTP /p2/x without its policy", s.httpAsk(80, "/p2/x"), "member-1")
	s.change(t, "delete listener l-udp", func() {
		s.cli(t, "loadbalancer", "listener", "delete", "l-udp")
	})
	cloud.WaitFor(t, time.Minute, "no UDP answer on the deleted listener's port", func() bool {
		_, err := s.udpAsk()
		return err != nil
	})
	out := s.cli(t, "loadbalancer", "listener", "list", "--loadbalancer", s.lb.ID, "-f", "value", "-c", "name")
	if strings.Contains(out, "l-udp") {
		t.Errorf("listener l-udp still listed: %q", out)
	}
	if s.tls != nil {
		s.deleteTLS(t)
	}
}

// memberNICs is how many of the server's ports are on the member network.
func (s *scene) memberNICs(t *testing.T) int {
	t.Helper()
	servers := s.cp.Fabric.Servers()
	if len(servers) != 1 {
		t.Fatalf("%d servers, want 1", len(servers))
	}
	n := 0
	for _, p := range servers[0].Ports {
		if p.NetworkID == s.cp.MemberNet.ID {
			n++
		}
	}
	return n
}

// unplug: the pools of the other listeners deleted, then the last member
// on the member network → the member flow's network delta unplugs that
// network from the amphora (the NIC leaves the VM) and the listener
// answers 503; the member added again → the network is plugged again
// and the member serves.
func (s *scene) unplug(t *testing.T, pool string, members map[string]string) {
	for _, p := range []string{"pl-tcp", "pl-sctp", "pl-udp"} {
		s.change(t, "delete pool "+p, func() { s.cli(t, "loadbalancer", "pool", "delete", p) })
	}
	if n := s.memberNICs(t); n != 1 {
		t.Fatalf("%d ports on the member network before the last member goes, want 1", n)
	}
	s.change(t, "delete member-1, the last on the member network", func() {
		s.rest(t, "DELETE", "/v2/lbaas/pools/"+pool+"/members/"+members["member-1"], nil, nil)
	})
	if n := s.memberNICs(t); n != 0 {
		t.Errorf("%d ports on the member network after its last member went, want 0", n)
	}
	// v.Exec, not v.WaitFor: the VM reports fatal failures to the test
	// that booted it, not to this subtest.
	for _, v := range s.cp.VMs() {
		cloud.WaitFor(t, time.Minute, "no address on the member network in the amphora", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			code, _, err := v.Exec(ctx, "ip -n amphora-haproxy -4 -o addr show | grep -q ' 198.51.100.1[4-9][0-9]/'")
			return err == nil && code == 1
		})
	}
	onlyFrom(t, "HTTP with no member", s.httpAsk(80, "/"), "status 503 ")
	members["member-1"] = s.addMember(t, pool, "member-1", sceneMember1, sceneHTTP)
	if n := s.memberNICs(t); n != 1 {
		t.Errorf("%d ports on the member network after a member came back, want 1", n)
	}
	onlyFrom(t, "HTTP with member-1 back on a new NIC", s.httpAsk(80, "/"), "member-1")
}

// octaviaTables are the tables of Octavia's database that hold a load
// balancer and what hangs off it. Not listener_statistics: Octavia 11
// never deletes its rows (the health manager's stats driver replaces them,
// no flow or housekeeping removes them; they outlive their listener).
var octaviaTables = []string{"load_balancer", "vip", "additional_vip", "vrrp_group", "listener", "listener_cidr",
	"sni", "pool", "session_persistence", "member", "health_monitor", "l7policy", "l7rule",
	"amphora", "amphora_health", "amphora_build_request"}

// rowsLeft counts the rows of each table (the test's control plane holds
// one load balancer), naming the tables that are not empty.
func (s *scene) rowsLeft(t *testing.T) string {
	t.Helper()
	where := map[string]string{}
	for _, table := range octaviaTables {
		where[table] = "TRUE"
	}
	return s.countRows(t, octaviaTables, where)
}

// cascadeDelete: the load balancer's cascade delete → the API no longer
// finds it, the VM is gone, the listeners, pools, members, monitors and
// L7 policies are deleted at once, and housekeeping purges the rows of the
// load balancer and its amphora: the database holds nothing of it.
func (s *scene) cascadeDelete(t *testing.T) {
	start := time.Now()
	s.rest(t, "DELETE", "/v2/lbaas/loadbalancers/"+s.lb.ID+"?cascade=true", nil, nil)
	waitLB(t, s.cp, s.lb.ID, "DELETED", 5*time.Minute)
	t.Logf("cascade delete → gone in %.1fs", time.Since(start).Seconds())
	if n := len(s.cp.VMs()); n != 0 {
		t.Errorf("%d VMs left after the delete", n)
	}
	if n := s.cp.Fabric.PortCount(); n != 0 {
		t.Errorf("%d ports left after the delete", n)
	}
	left := s.rowsLeft(t)
	t.Logf("rows right after the delete: %s", left)
	for _, table := range []string{"listener", "pool", "member", "health_monitor", "l7policy", "l7rule"} {
		if strings.Contains(" "+left, " "+table+"=") {
			t.Errorf("the cascade delete left rows in %s: %s", table, left)
		}
	}
	purge := time.Now()
	cloud.WaitFor(t, 2*time.Minute, "housekeeping purging the load balancer and its amphora", func() bool {
		left = s.rowsLeft(t)
		return left == ""
	})
	t.Logf("database empty %.1fs after the delete", time.Since(purge).Seconds())
}
