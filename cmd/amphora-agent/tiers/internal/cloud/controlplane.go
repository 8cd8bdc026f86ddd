package cloud

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/vm"
)

// The controller's addresses: its namespace's end of the management
// bridge, the VIP network's gateway, and where the services listen.
const (
	ControllerIP   = "198.51.100.1"
	ManagementCIDR = "198.51.100.0/25"
	VIPCIDR        = "203.0.113.0/24"
	VIPGateway     = "203.0.113.1"
	MemberCIDR     = "198.51.100.128/25"
	MemberGateway  = "198.51.100.129"
	// IPv6: a second subnet on the VIP network (br-vip carries both) and
	// an IPv6-only member network on br-member6, each gateway an address
	// of the controller's namespace.
	VIP6CIDR       = "2001:db8:0:203::/64"
	VIP6Gateway    = "2001:db8:0:203::1"
	Member6CIDR    = "2001:db8:0:198::/64"
	Member6Gateway = "2001:db8:0:198::1"
	HealthPort     = 5555
	APIAddr        = "127.0.0.1:9876"
)

// serviceStartLimit bounds each Octavia service's start-up.
const serviceStartLimit = 4 * time.Minute

// Options shape one control plane.
type Options struct {
	// AmphoraDriver is [controller_worker] amphora_driver: Octavia's
	// REST driver ("amphora_haproxy_rest_driver", the default) or its
	// no-op driver ("amphora_noop_driver"), which runs the flows without
	// talking to any amphora.
	AmphoraDriver string
	// VMs, when set, boots each server as an amphora VM; otherwise
	// servers exist on paper only (PaperHypervisor).
	VMs *AmphoraVMs
	// Extra is appended to octavia.conf (later sections and values win
	// in oslo.config).
	Extra string
	// OctaviaRoot is a root file system holding another release's
	// Octavia (octavia-root.sh builds trixie's): its services and
	// octavia-db-manage run from it, MariaDB, RabbitMQ, dnsmasq and the
	// client from the host. Empty means AMPHORA_OCTAVIA_ROOT, and when
	// that is empty too, the host's Octavia.
	OctaviaRoot string
}

// ControlPlane is Octavia's API, worker, health manager and housekeeping
// with their MariaDB and RabbitMQ, each a process group in the
// controller's own network namespace, all files under Dir.
type ControlPlane struct {
	Dir    string
	NS     *topo.Namespace
	Config string // octavia.conf
	Fabric *Fabric
	// The networks the fabric starts with, each a bridge in NS with the
	// namespace's address on it: management (br-mgmt, the controller at
	// ControllerIP), VIP (br-vip, VIPGateway) and members (br-member,
	// MemberGateway; a test serves members from NS on more addresses).
	ManagementNet, VIPNet, MemberNet          *Network
	ManagementSubnet, VIPSubnet, MemberSubnet *Subnet
	// IPv6: VIP6Subnet is the VIP network's second subnet (VIP6Gateway on
	// br-vip); Member6Net is on br-member6 (Member6Gateway).
	VIP6Subnet    *Subnet
	Member6Net    *Network
	Member6Subnet *Subnet
	Services      []*Service
	// Timings of the start-up steps, in order ("mariadb ready 1.2s", ...).
	Timings []string

	t           testing.TB
	octaviaRoot string
	client      *http.Client
	dhcp        *Service
	dhcpMu      sync.Mutex
}

// Start brings the control plane up and tears it down in t.Cleanup (also
// when the test fails, after printing each service's log digest).
// AMPHORA_CLOUD_KEEP=1 keeps the folder (its path is logged).
func Start(t testing.TB, o Options) *ControlPlane {
	t.Helper()
	topo.RequireRoot(t)
	if o.OctaviaRoot == "" {
		o.OctaviaRoot = os.Getenv("AMPHORA_OCTAVIA_ROOT")
	}
	octaviaBins := []string{"octavia-api", "octavia-worker", "octavia-health-manager", "octavia-housekeeping", "octavia-db-manage"}
	hostBins := []string{"mariadbd", "mariadb-install-db", "epmd", "openstack"}
	if o.OctaviaRoot == "" {
		hostBins = append(hostBins, octaviaBins...)
	} else {
		for _, bin := range octaviaBins {
			if _, err := os.Stat(filepath.Join(o.OctaviaRoot, "usr", "bin", bin)); err != nil {
				t.Fatalf("cloud tier: the Octavia root has no %s: %v", bin, err)
			}
		}
		t.Logf("cloud: Octavia %s from %s", OctaviaVersion(o.OctaviaRoot), o.OctaviaRoot)
	}
	for _, bin := range hostBins {
		if _, err := exec.LookPath(bin); err != nil {
			if _, err2 := os.Stat(filepath.Join("/usr/sbin", bin)); err2 != nil {
				t.Fatalf("cloud tier: %s is missing (make deps-cloud installs Debian's packages): %v", bin, err)
			}
		}
	}
	if o.AmphoraDriver == "" {
		o.AmphoraDriver = "amphora_haproxy_rest_driver"
	}
	dir, err := os.MkdirTemp("", "aa-cloud-")
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("AMPHORA_CLOUD_KEEP") == "" {
		t.Cleanup(func() { os.RemoveAll(dir) })
	} else {
		t.Logf("cloud: keeping %s", dir)
	}
	for _, d := range []string{"logs", "certs", "certstore", "lock", "mysql", "rabbitmq"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	c := &ControlPlane{Dir: dir, t: t, octaviaRoot: o.OctaviaRoot}
	if o.VMs != nil {
		c.Fabric = NewFabric(&vmHypervisor{c: c, opts: *o.VMs, vms: map[string]*vm.VM{}, taps: map[string][]string{}})
	} else {
		c.Fabric = NewFabric(PaperHypervisor{})
	}
	begin := time.Now()
	step := func(what string) {
		c.Timings = append(c.Timings, fmt.Sprintf("%s %.1fs", what, time.Since(begin).Seconds()))
	}

	c.NS = topo.NewNamespace(t, "cp")
	// Octavia's API is a single-threaded wsgiref server and slow under
	// load: one client with generous timeouts.
	c.client = c.NS.HTTPClient(true)
	c.client.Timeout = 2 * time.Minute
	c.client.Transport.(*http.Transport).ResponseHeaderTimeout = 2 * time.Minute
	for _, n := range []struct {
		name, bridge, cidr, ownAddr, gateway, firstFree string
		net                                             **Network
		subnet                                          **Subnet
	}{
		{"lb-mgmt-net", "br-mgmt", ManagementCIDR, ControllerIP, "", "198.51.100.10", &c.ManagementNet, &c.ManagementSubnet},
		{"vip-net", "br-vip", VIPCIDR, VIPGateway, VIPGateway, "203.0.113.10", &c.VIPNet, &c.VIPSubnet},
		{"member-net", "br-member", MemberCIDR, MemberGateway, MemberGateway, "198.51.100.140", &c.MemberNet, &c.MemberSubnet},
		{"member6-net", "br-member6", Member6CIDR, Member6Gateway, Member6Gateway, "2001:db8:0:198::100", &c.Member6Net, &c.Member6Subnet},
	} {
		c.mustNS("ip", "link", "add", n.bridge, "type", "bridge")
		// A bridge without an address of its own takes its lowest port's,
		// so each VM's tap could change the MAC of the gateway and the
		// clients on that network, and the amphorae's replies went to the
		// old one until their neighbour entry was renewed (HTTP through
		// the VIP hung during failovers). Neutron's router keeps its MAC.
		c.mustNS("ip", "link", "set", n.bridge, "address", BridgeMAC(n.bridge))
		c.addOwnAddr(n.ownAddr, n.cidr, n.bridge)
		c.mustNS("ip", "link", "set", n.bridge, "up")
		if *n.net, *n.subnet, err = c.Fabric.AddNetwork(n.name, n.cidr, n.gateway, n.firstFree, n.bridge); err != nil {
			t.Fatal(err)
		}
	}
	c.addOwnAddr(VIP6Gateway, VIP6CIDR, "br-vip")
	if c.VIP6Subnet, err = c.Fabric.AddSubnet(c.VIPNet.ID, "vip-net-v6-subnet", VIP6CIDR, VIP6Gateway, "2001:db8:0:203::10"); err != nil {
		t.Fatal(err)
	}
	// Neutron's DHCP agent (dnsmasq, with VMs) serves the management
	// network only; the VIP and member ports are configured by the agent.
	c.ManagementSubnet.EnableDHCP = true
	if err := controllerPKI(c.path("certs")); err != nil {
		t.Fatal(err)
	}
	sock := c.path("fabric.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go c.Fabric.Serve(l)
	t.Cleanup(func() { l.Close() })
	t.Cleanup(c.teardown)

	if o.VMs != nil {
		c.startDHCP()
	}
	c.startDatabase()
	step("mariadb ready")
	c.startRabbitMQ()
	step("rabbitmq ready")
	c.Config = c.path("octavia.conf")
	if err := os.WriteFile(c.Config, []byte(c.octaviaConf(o)), 0o600); err != nil {
		t.Fatal(err)
	}
	dbManage := c.octavia("octavia-db-manage", "--config-file", c.Config, "upgrade", "head")
	c.run(2*time.Minute, dbManage[0], dbManage[1:]...)
	step("schema made")

	env := []string{"PYTHONPATH=" + driversDir(), "AMPHORA_TEST_FABRIC=" + sock}
	octavia := func(name string) *Service {
		log := c.path("logs", name+".log")
		return c.startService(name, log, env, c.octavia(name, "--config-file", c.Config, "--log-file", log)...)
	}
	api := octavia("octavia-api")
	worker := octavia("octavia-worker")
	hm := octavia("octavia-health-manager")
	hk := octavia("octavia-housekeeping")
	// The four services import Octavia at once; on 2 cores shared with
	// other tests' VMs that alone took over 90 s (seen at load 12), so the
	// deadlines are generous: they cost nothing when the service is up.
	c.waitReady(api, serviceStartLimit, func(*Service) error {
		resp, err := c.HTTP().Get("http://" + APIAddr + "/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET / answered %s", resp.Status)
		}
		return nil
	})
	step("api ready")
	c.waitReady(worker, serviceStartLimit, func(*Service) error { return c.workerConsuming() })
	step("worker consuming")
	c.waitReady(hm, serviceStartLimit, func(s *Service) error { return udpBound(s, HealthPort) })
	step("health manager listening")
	c.waitReady(hk, serviceStartLimit, func(s *Service) error { return s.logHas("Starting house keeping") })
	step("housekeeping running")
	return c
}

// addOwnAddr gives the namespace addr on bridge with cidr's prefix
// length; an IPv6 one skips duplicate address detection, so it answers
// at once.
func (c *ControlPlane) addOwnAddr(addr, cidr, bridge string) {
	args := []string{"addr", "add", addr + "/" + strings.SplitN(cidr, "/", 2)[1], "dev", bridge}
	if strings.Contains(addr, ":") {
		args = append(args, "nodad")
	}
	c.mustNS("ip", args...)
}

func (c *ControlPlane) path(parts ...string) string {
	return filepath.Join(append([]string{c.Dir}, parts...)...)
}

// octavia is the command line that runs argv, one of Octavia's commands,
// from the Octavia root when there is one (octavia-sandbox.sh).
func (c *ControlPlane) octavia(argv ...string) []string {
	if c.octaviaRoot == "" {
		return argv
	}
	return append([]string{filepath.Join(filepath.Dir(driversDir()), "octavia-sandbox.sh"), c.octaviaRoot, c.Dir, driversDir()}, argv...)
}

func readTrimmed(path string) string {
	data, _ := os.ReadFile(path)
	return strings.TrimSpace(string(data))
}

// OctaviaVersion is the Debian version of the Octavia in root (an Octavia
// root; "" for the host's).
func OctaviaVersion(root string) string {
	if root != "" {
		return readTrimmed(filepath.Join(root, ".octavia-version"))
	}
	out, _ := exec.Command("dpkg-query", "-W", "-f=${Version}", "python3-octavia").Output()
	return strings.TrimSpace(string(out))
}

// driversDir is where the Python drivers and their dist-info live.
func driversDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "drivers")
}

func (c *ControlPlane) mustNS(name string, args ...string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.NS.Exec(ctx, name, args...); err != nil {
		c.t.Fatal(err)
	}
}

// run runs a command to completion in the namespace; its output goes to
// logs/<name>.out and into the failure message.
func (c *ControlPlane) run(timeout time.Duration, name string, args ...string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := c.NS.Command(ctx, name, args...)
	cmd.Dir = c.Dir
	out, err := cmd.CombinedOutput()
	os.WriteFile(c.path("logs", filepath.Base(name)+".out"), out, 0o600)
	if err != nil {
		c.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// waitReady polls ready until it succeeds, failing the test when the
// service exits first or the deadline passes. The service keeps ready for
// Restart.
func (c *ControlPlane) waitReady(s *Service, timeout time.Duration, ready func(*Service) error) {
	c.t.Helper()
	s.ready, s.readyLimit = ready, timeout
	deadline := time.Now().Add(timeout)
	for {
		err := ready(s)
		if err == nil {
			s.Up = time.Since(s.Started)
			return
		}
		if !s.Running() {
			c.t.Fatalf("%s exited during start-up (%v); its log:\n%s", s.Name, s.cmd.ProcessState, logDigest(s.Log, 60))
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s not ready within %v: %v; its log:\n%s", s.Name, timeout, err, logDigest(s.Log, 60))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// startDatabase makes a fresh MariaDB data folder under Dir and runs
// mariadbd on it (as root, so no other user needs to reach the test's
// folder), then Octavia's database and user.
func (c *ControlPlane) startDatabase() {
	datadir := c.path("mysql")
	c.run(2*time.Minute, "mariadb-install-db", "--no-defaults", "--datadir="+datadir, "--user=root",
		"--auth-root-authentication-method=socket", "--skip-test-db")
	sock := c.path("mysqld.sock")
	s := c.startService("mariadb", c.path("logs", "mariadb.log"), nil,
		"mariadbd", "--no-defaults", "--datadir="+datadir, "--socket="+sock, "--pid-file="+c.path("mysqld.pid"),
		"--bind-address=127.0.0.1", "--port=3306", "--user=root", "--log-error="+c.path("logs", "mariadb.log"),
		"--innodb-buffer-pool-size=32M", "--performance-schema=OFF", "--skip-name-resolve")
	c.waitReady(s, time.Minute, func(*Service) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := c.NS.Exec(ctx, "mariadb", "--no-defaults", "-S", sock, "-e", "SELECT 1")
		return err
	})
	c.run(time.Minute, "mariadb", "--no-defaults", "-S", sock, "-e",
		"CREATE DATABASE octavia CHARACTER SET utf8mb4; "+
			"CREATE USER 'octavia'@'127.0.0.1' IDENTIFIED BY 'octavia'; "+
			"GRANT ALL ON octavia.* TO 'octavia'@'127.0.0.1';")
}

// rabbitEnv points RabbitMQ at the test's folder: its node, data, logs,
// config and cookie (HOME), never /etc/rabbitmq or /var/lib/rabbitmq.
func (c *ControlPlane) rabbitEnv() []string {
	base := c.path("rabbitmq")
	return []string{
		"HOME=" + base,
		"RABBITMQ_NODENAME=rabbit-" + c.NS.Name + "@localhost",
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT=5672",
		"RABBITMQ_MNESIA_BASE=" + filepath.Join(base, "mnesia"),
		"RABBITMQ_LOG_BASE=" + c.path("logs"),
		"RABBITMQ_CONF_ENV_FILE=" + filepath.Join(base, "rabbitmq-env.conf"),
		"RABBITMQ_CONFIG_FILE=" + filepath.Join(base, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE=" + filepath.Join(base, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE=" + filepath.Join(base, "enabled_plugins"),
		"RABBITMQ_PID_FILE=" + filepath.Join(base, "rabbit.pid"),
	}
}

// startRabbitMQ runs epmd in the foreground first (Erlang would otherwise
// start it as a daemon that leaves its process group), then the broker.
// Ports are the defaults: the namespace is the test's own.
func (c *ControlPlane) startRabbitMQ() {
	base := c.path("rabbitmq")
	for name, content := range map[string]string{
		"rabbitmq-env.conf": "", "enabled_plugins": "[].\n", "advanced.config": "[].\n",
		"rabbitmq.conf": "listeners.tcp.default = 5672\nloopback_users.guest = true\n",
	} {
		if err := os.WriteFile(filepath.Join(base, name), []byte(content), 0o600); err != nil {
			c.t.Fatal(err)
		}
	}
	epmd := c.startService("epmd", "", nil, "epmd", "-address", "127.0.0.1")
	c.waitReady(epmd, 30*time.Second, func(*Service) error { return c.dial("127.0.0.1:4369") })
	s := c.startService("rabbitmq", "", c.rabbitEnv(), "/usr/lib/rabbitmq/bin/rabbitmq-server")
	c.waitReady(s, 2*time.Minute, func(*Service) error { return c.dial("127.0.0.1:5672") })
}

func (c *ControlPlane) dial(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := c.NS.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return conn.Close()
}

// workerConsuming is true once the worker's amphorav2 queue has a
// consumer: before that, the API's casts would go to no queue and be lost.
func (c *ControlPlane) workerConsuming() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := c.NS.Command(ctx, "/usr/lib/rabbitmq/bin/rabbitmqctl", "-q", "list_queues", "name", "consumers")
	cmd.Env = append(os.Environ(), c.rabbitEnv()...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("rabbitmqctl: %v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "octavia_provisioning_v2" && f[1] != "0" {
			return nil
		}
	}
	return fmt.Errorf("no consumer on octavia_provisioning_v2 yet: %q", out)
}

// udpBound is true once a socket of the service's namespace is bound to
// UDP port (read through the service's own /proc/PID/net/udp).
func udpBound(s *Service, port int) error {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/udp", s.cmd.Process.Pid))
	if err != nil {
		return err
	}
	want := fmt.Sprintf(":%04X ", port)
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 1 && strings.HasSuffix(f[1]+" ", want) {
			return nil
		}
	}
	return fmt.Errorf("nothing bound to UDP port %d", port)
}

// logHas checks the service's log since this process of it started (a
// restarted service appends to the log of the one before).
func (s *Service) logHas(text string) error {
	data, err := os.ReadFile(s.Log)
	if err != nil {
		return err
	}
	if int64(len(data)) < s.LogFrom || !bytes.Contains(data[s.LogFrom:], []byte(text)) {
		return fmt.Errorf("%s does not say %q yet", filepath.Base(s.Log), text)
	}
	return nil
}

// teardown prints each service's log digest when the test failed (while
// they still run), then stops them in the reverse order of their start:
// Octavia's services before the broker and the database they use.
func (c *ControlPlane) teardown() {
	if c.t.Failed() {
		var b strings.Builder
		for _, s := range c.Services {
			fmt.Fprintf(&b, "=== %s (%s) ===\n%s", s.Name, s.Log, logDigest(s.Log, 40))
		}
		fmt.Fprintf(&b, "=== driver calls ===\n%s\n", strings.Join(c.Fabric.Calls(), " "))
		c.t.Logf("cloud: control plane at the failure:\n%s", b.String())
	}
	for i := len(c.Services) - 1; i >= 0; i-- {
		c.Services[i].Stop(20 * time.Second)
	}
}

// HTTP is a client whose connections start in the controller's namespace.
func (c *ControlPlane) HTTP() *http.Client { return c.client }

// API sends a request to Octavia's API as project project (noauth takes
// it from X-Project-Id); a non-nil out receives the decoded answer.
func (c *ControlPlane) API(method, path, project string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, "http://"+APIAddr+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if project != "" {
		req.Header.Set("X-Project-Id", project)
	}
	resp, err := c.HTTP().Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(data))
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: %v: %s", method, path, err, data)
		}
	}
	return resp.StatusCode, nil
}

// OpenStack runs Debian's `openstack` CLI in the controller's namespace
// as a user without Keystone would (OS_AUTH_TYPE=none, the API as its
// endpoint) and returns its standard output.
func (c *ControlPlane) OpenStack(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := c.NS.Command(ctx, "openstack", args...)
	cmd.Env = append(os.Environ(), "OS_AUTH_TYPE=none", "OS_ENDPOINT=http://"+APIAddr)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("openstack %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return string(out), nil
}

// SQL runs a query on Octavia's database as root (tab-separated rows, no
// column names), as an operator checks what the control plane kept.
func (c *ControlPlane) SQL(query string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := c.NS.Exec(ctx, "mariadb", "--no-defaults", "-S", c.path("mysqld.sock"), "-N", "-B", "octavia", "-e", query)
	if err != nil {
		return "", fmt.Errorf("SQL %q: %v: %s", query, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// Memory lists each service's PSS and process count, one line each.
func (c *ControlPlane) Memory() []string {
	var out []string
	total := 0
	for _, s := range c.Services {
		kib, n := s.PSS()
		total += kib
		out = append(out, fmt.Sprintf("%-24s %6.1f MiB in %d process(es), ready after %.1fs", s.Name, float64(kib)/1024, n, s.Up.Seconds()))
	}
	return append(out, fmt.Sprintf("%-24s %6.1f MiB", "total", float64(total)/1024))
}

// WaitFor is testkit.WaitFor, for tests that reach the tier through this
// package alone.
var WaitFor = testkit.WaitFor

// BridgeMAC is the fixed, locally administered MAC of one of the control
// plane's bridges (by name), which its ports never change.
func BridgeMAC(bridge string) string {
	sum := 0
	for _, c := range bridge {
		sum = sum*31 + int(c)
	}
	return fmt.Sprintf("02:aa:%02x:%02x:%02x:01", byte(sum>>16), byte(sum>>8), byte(sum))
}
