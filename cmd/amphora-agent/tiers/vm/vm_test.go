//go:build vm

// The VM tier: amphora VMs booted under QEMU from the Debian image
// (packaging/image/build.sh), with the agent's package installed and started by
// systemd, driven from the host.
//
//	make test-vm   (or: go test -tags vm -p 1 -run VM ./cmd/amphora-agent/tiers/vm/)
package vm_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/health"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/ctrlutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/hbutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/lvsutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/tiersutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/vm"
)

const (
	vmHeartbeat = 2 // seconds between heartbeats in the VM tier
	vmKey       = "vm-tier-key"
)

// vmBootWait bounds each wait on a booting guest (its guest agent,
// cloud-init's last stage, the agent's unit) by what Octavia's controller
// tolerates at its defaults before it gives a new amphora up: [haproxy_amphora]
// connection_max_retries (120) attempts connection_retry_interval (5 s)
// apart, when each is refused at once as through the forwarded port here
// (one that hangs adds up to rest_request_conn_timeout, 10 s, to each).
// Each wait gets all of it, not what earlier waits left of a shared
// budget: a busy host stretches a 90 s boot under TCG several-fold, and a
// VM booted beside another must not lose the time spent waiting for that one.
const vmBootWait = 120 * 5 * time.Second

// vmPackage is the .deb under test (make test-vm builds it).
func vmPackage(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("AMPHORA_AGENT_DEB"); p != "" {
		return p
	}
	matches, _ := filepath.Glob(filepath.Join("..", "..", "..", "..", "bin", "amphora-agent_*.deb"))
	if len(matches) == 0 {
		t.Fatal("no agent package: run `make deb` (make test-vm does) or set AMPHORA_AGENT_DEB")
	}
	newest := matches[0]
	for _, m := range matches[1:] {
		a, _ := os.Stat(m)
		b, _ := os.Stat(newest)
		if a.ModTime().After(b.ModTime()) {
			newest = m
		}
	}
	return newest
}

// amphora is one VM with its agent and the controller's view of it.
type amphora struct {
	*vm.VM
	env     *testenv.Env // the controller's certificates and the API address
	hb      *hbutil.Receiver
	started time.Time
	// What Octavia asked Nova for, and the key pair's public key.
	build     octaviaBuild
	publicKey string
}

// vmCreate is how the controller is set up to create an amphora: the
// Octavia options that change what ComputeCreate puts on the config drive,
// and where the VM's management NIC sits.
type vmCreate struct {
	UserDataConfigDrive bool   // [controller_worker] user_data_config_drive
	Timezone            string // [controller_worker] amp_timezone
	ManagementSlot      int    // PCI slot of the management NIC (0: the harness's default)
	// Extra files (target path → content) the controller adds to the
	// config drive, as rsyslog's 10-rsyslog.conf rendered with targets.
	Extra map[string][]byte
	// Image is an image with the agent in it (nil: the base image, the
	// package under test installed at first boot).
	Image *vm.Image
}

// octaviaBuild is what Octavia's CertComputeCreate task asked the compute
// driver for (tiers/testdata/vm/compute_create.py).
type octaviaBuild struct {
	Name             string            `json:"name"`
	KeyName          string            `json:"key_name"`
	UserData         string            `json:"user_data"`
	ConfigDriveFiles map[string]string `json:"config_drive_files"`
	UserDataFiles    map[string]string `json:"user_data_files"` // in write_files
}

const vmKeyName = "vm-tier-keypair" // [controller_worker] amp_ssh_key_name

// computeCreate runs Octavia's own CertComputeCreate task, set up as a
// controller would be for this amphora: amphora-agent.conf from its
// template (the API on every address, heartbeats to the host through
// QEMU's gateway), rsyslog's config, the certificates and the cloud-init
// user data, as they would reach Nova.
func computeCreate(t *testing.T, env *testenv.Env, hbPort int, topology string, c vmCreate) octaviaBuild {
	t.Helper()
	spec := map[string]any{
		"amphora_id": env.AmphoraID, "topology": topology,
		"server_pem": env.ServerCert, "client_ca": env.CAFile,
		"heartbeat": fmt.Sprintf("%s:%d", vm.GatewayIP, hbPort), "heartbeat_key": vmKey,
		"heartbeat_interval": vmHeartbeat, "user_data_config_drive": c.UserDataConfigDrive,
		"key_name": vmKeyName, "timezone": c.Timezone,
	}
	work := t.TempDir()
	stdout, stderr, _ := ctrlutil.RunControllerScript(t, env, ctrlutil.TestdataScript(t, "vm", "compute_create.py"),
		"--spec", writeSpec(t, work, spec), "--workdir", work)
	var b octaviaBuild
	if err := json.Unmarshal(stdout, &b); err != nil || b.UserData == "" {
		t.Fatalf("compute_create.py printed no build call: %v\n%s\n%s", err, stdout, stderr)
	}
	return b
}

// sshPublicKey is a fresh ed25519 public key in authorized_keys form, as
// Nova stores a key pair's public half.
func sshPublicKey(t *testing.T, comment string) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var blob []byte
	for _, field := range [][]byte{[]byte("ssh-ed25519"), pub} {
		blob = binary.BigEndian.AppendUint32(blob, uint32(len(field)))
		blob = append(blob, field...)
	}
	return "ssh-ed25519 " + base64.StdEncoding.EncodeToString(blob) + " " + comment
}

// startAmphora powers on an amphora VM with its package and the config
// drive Nova would make from Octavia's create call; ready waits for its
// agent.
func startAmphora(t *testing.T, name, topology string) *amphora {
	t.Helper()
	return createAmphora(t, name, topology, vmCreate{Timezone: "UTC"})
}

// startAmphoraWith also puts extra (target path → content) on the config
// drive.
func startAmphoraWith(t *testing.T, name, topology string, extra map[string][]byte) *amphora {
	t.Helper()
	return createAmphora(t, name, topology, vmCreate{Timezone: "UTC", Extra: extra})
}

// operatorSysctlFile is the operator's kernel tuning every VM-tier
// amphora carries.
const operatorSysctlFile = "/etc/sysctl.d/60-operator-tuning.conf"

func createAmphora(t *testing.T, name, topology string, c vmCreate) *amphora {
	t.Helper()
	img, pkg := vm.Image{}, ""
	if c.Image != nil {
		img = *c.Image
	} else {
		img, pkg = vm.BuildImage(t), vmPackage(t)
	}
	t.Logf("%s; accelerator %s", img.Info, vm.Accel(img))
	env := testenv.New(t)
	hb := hbutil.NewReceiver(t)
	_, port, _ := strings.Cut(hb.Addr(), ":")
	hbPort, _ := strconv.Atoi(port)
	build := computeCreate(t, env, hbPort, topology, c)
	files := map[string][]byte{
		// An operator's own tuning, one key the agent leaves alone and
		// one it requires otherwise (see the operator-sysctl test).
		operatorSysctlFile: []byte("net.ipv4.tcp_keepalive_intvl = 17\nnet.core.somaxconn = 1024\n"),
	}
	for path, content := range build.ConfigDriveFiles {
		files[path] = []byte(content)
	}
	for path, content := range c.Extra {
		files[path] = content
	}
	key := sshPublicKey(t, "vm-tier@"+name)
	v := vm.Start(t, img, vm.Options{
		Name:           name,
		Package:        pkg,
		InstanceID:     env.AmphoraID,
		Files:          files,
		UserData:       []byte(build.UserData),
		ServerName:     build.Name,
		Hostname:       build.Name + ".novalocal", // Nova appends its dhcp_domain
		KeyName:        build.KeyName,
		PublicKey:      key,
		ManagementSlot: c.ManagementSlot,
	})
	env.Port = v.APIPort
	return &amphora{VM: v, env: env, hb: hb, started: time.Now(), build: build, publicKey: key}
}

func (a *amphora) ready(t *testing.T) {
	t.Helper()
	a.WaitGuest(vmBootWait)
	// cloud-init's last stage runs the user data's runcmd, which restarts
	// the agent when the files came in the user data: the agent counts as
	// ready once that is over.
	a.WaitFor(vmBootWait, "cloud-init's final stage done",
		`[ -e /var/lib/cloud/instance/boot-finished ] || { systemctl list-jobs --no-pager; journalctl -b --no-pager -u 'cloud-*' | tail -n 15; exit 1; }`)
	a.waitActive(vmBootWait)
	t.Logf("%s: agent active %v after power-on", a.Name, time.Since(a.started).Round(time.Second))
}

func bootAmphora(t *testing.T, name, topology string) *amphora {
	t.Helper()
	a := startAmphora(t, name, topology)
	a.ready(t)
	return a
}

// waitActive waits until systemd reports the agent's unit active: with
// Type=notify that is only after READY=1.
func (a *amphora) waitActive(timeout time.Duration) {
	a.WaitFor(timeout, "amphora-agent.service active",
		`[ "$(systemctl is-active amphora-agent.service)" = active ] || {
			journalctl -b --no-pager -u amphora-test-package -u amphora-config-drive -u amphora-agent | tail -25; exit 1; }`)
}

// unitShow returns properties of the agent's unit.
func (a *amphora) unitShow(props ...string) map[string]string {
	out := a.MustExec("systemctl show amphora-agent.service -p " + strings.Join(props, ","))
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, "=")
		m[k] = v
	}
	return m
}

// journalMonotonic is the monotonic time (µs) of the first journal line
// of the agent's unit in this boot containing text.
func (a *amphora) journalMonotonic(text string) int64 {
	out := a.MustExec("journalctl -b -u amphora-agent.service -o json --no-pager")
	for _, line := range strings.Split(out, "\n") {
		var e struct {
			Message   any    `json:"MESSAGE"`
			Monotonic string `json:"__MONOTONIC_TIMESTAMP"`
		}
		if json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		if msg, ok := e.Message.(string); ok && strings.Contains(msg, text) {
			n, _ := strconv.ParseInt(e.Monotonic, 10, 64)
			return n
		}
	}
	return -1
}

// realHMUnwrap runs the health manager's own envelope code on a datagram.
func realHMUnwrap(t *testing.T, datagram []byte, key string) map[string]any {
	t.Helper()
	ctrlutil.RequireOctavia(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctrlutil.DebianPython, "-c", `import binascii, json, sys
from octavia.amphorae.backends.health_daemon import status_message
print(json.dumps(status_message.unwrap_envelope(binascii.unhexlify(sys.argv[1]), sys.argv[2])))`,
		hex.EncodeToString(datagram), key)
	cmd.Env = ctrlutil.PythonEnv()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the health manager's unwrap_envelope refused the heartbeat: %v", err)
	}
	var msg map[string]any
	if err := json.Unmarshal(out, &msg); err != nil {
		t.Fatalf("unwrap_envelope printed %q: %v", out, err)
	}
	return msg
}

// vmNet is the data plane on the host side: a client namespace on the
// VIP network and a member namespace with an HTTP server, each with a
// bridge that the amphorae's tap devices join (one L2 segment per
// network, as Neutron gives them).
type vmNet struct {
	client, member *topo.Namespace
	server         *topo.Server
	udp            []*topo.UDPEcho  // the UDP listener's members
	sctp           []*topo.SCTPEcho // the SCTP listener's members
}

const (
	vmVIP        = "203.0.113.10"
	vmClientIP   = "203.0.113.1"
	vmServerIP   = "198.51.100.1"
	vmServer2IP  = "198.51.100.2" // the second UDP and SCTP member
	vmServerPort = 8080
	vmBridge     = "br0"

	// The UDP and SCTP listeners beside the HTTP one (Octavia's LVS
	// templater renders them; tiers/testdata/interop/haproxy_controller_client.py).
	vmUDPPort     = 5300
	vmSCTPPort    = 3868
	vmUDPListener = "d1000001-0000-4000-8000-000000000001"
	vmUDPPool     = "d1000002-0000-4000-8000-000000000002"
	vmUDPMonitor  = "d1000003-0000-4000-8000-000000000003"
	vmUDPMember1  = "d1000004-0000-4000-8000-000000000004"
	vmUDPMember2  = "d1000005-0000-4000-8000-000000000005"
	vmSCTPList    = "d2000001-0000-4000-8000-000000000001"
	vmSCTPPool    = "d2000002-0000-4000-8000-000000000002"
	vmSCTPMonitor = "d2000003-0000-4000-8000-000000000003"
	vmSCTPMember1 = "d2000004-0000-4000-8000-000000000004"
	vmSCTPMember2 = "d2000005-0000-4000-8000-000000000005"
)

// vmLVSSpec is the load balancer's UDP listener (two echo members, a
// UDP-CONNECT monitor) and SCTP listener (two echo members on user-space
// SCTP, as this host's kernel may have none; an SCTP monitor). The
// monitors' timeouts leave room for a slow emulated VM: a check that runs
// out of time counts as a failure.
func vmLVSSpec(t *testing.T) string {
	return lvsutil.SpecArg(t, udpListenerSpec(), sctpListenerSpec())
}

// vmUDPUnmonitored is the UDP listener without a monitor: what the
// ACTIVE_STANDBY test serves, where two emulated VMs share the host and
// every check process counts against the VRRP check's timeout.
func vmUDPUnmonitored() lvsutil.Listener {
	l := udpListenerSpec()
	l.Monitor = nil
	return l
}

func udpListenerSpec() lvsutil.Listener {
	return lvsutil.Listener{ID: vmUDPListener, Protocol: "UDP", Port: vmUDPPort, PoolID: vmUDPPool,
		Monitor: &lvsutil.Monitor{ID: vmUDPMonitor, Delay: 4, Timeout: 4, Fall: 1},
		Members: []lvsutil.Member{
			{ID: vmUDPMember1, Address: vmServerIP, Port: vmUDPPort, Weight: 1, Enabled: true},
			{ID: vmUDPMember2, Address: vmServer2IP, Port: vmUDPPort, Weight: 1, Enabled: true}}}
}

func sctpListenerSpec() lvsutil.Listener {
	return lvsutil.Listener{ID: vmSCTPList, Protocol: "SCTP", Port: vmSCTPPort, PoolID: vmSCTPPool,
		Monitor: &lvsutil.Monitor{ID: vmSCTPMonitor, Delay: 5, Timeout: 2, Fall: 1},
		Members: []lvsutil.Member{
			{ID: vmSCTPMember1, Address: vmServerIP, Port: vmSCTPPort, Weight: 1, Enabled: true},
			{ID: vmSCTPMember2, Address: vmServer2IP, Port: vmSCTPPort, Weight: 1, Enabled: true}}}
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v %s", strings.Join(args, " "), err, out)
	}
}

func newDataPlane(t *testing.T) *vmNet {
	t.Helper()
	topo.RequireRoot(t)
	n := &vmNet{client: topo.NewNamespace(t, "aavc"), member: topo.NewNamespace(t, "aavm")}
	for ns, addr := range map[*topo.Namespace]string{n.client: vmClientIP + "/24", n.member: vmServerIP + "/24"} {
		ipCmd(t, "-n", ns.Name, "link", "add", vmBridge, "type", "bridge")
		ipCmd(t, "-n", ns.Name, "addr", "add", addr, "dev", vmBridge)
		ipCmd(t, "-n", ns.Name, "link", "set", vmBridge, "up")
	}
	n.server = n.member.ServeHTTP(t, fmt.Sprintf("%s:%d", vmServerIP, vmServerPort), topo.MemberHandler("member-1"))
	ipCmd(t, "-n", n.member.Name, "addr", "add", vmServer2IP+"/24", "dev", vmBridge)
	for i, ip := range []string{vmServerIP, vmServer2IP} {
		n.udp = append(n.udp, n.member.ServeUDPEcho(t, fmt.Sprintf("%s:%d", ip, vmUDPPort), fmt.Sprintf("udp-member-%d", i+1)))
		n.sctp = append(n.sctp, n.member.ServeSCTPEcho(t, fmt.Sprintf("%s:%d", ip, vmSCTPPort), fmt.Sprintf("sctp-member-%d", i+1)))
	}
	return n
}

func (n *vmNet) udpAsk() (string, error) {
	return n.client.UDPAsk(fmt.Sprintf("%s:%d", vmVIP, vmUDPPort), []byte("ping"), 2*time.Second)
}

// sctpAsk is one SCTP association to the VIP from a new source port.
func (n *vmNet) sctpAsk() (string, error) {
	return n.client.SCTPAsk(fmt.Sprintf("%s:%d", vmVIP, vmSCTPPort), []byte("ping"), 3*time.Second)
}

// udpServed sends datagrams to the UDP listener from new client ports
// until every wanted member has answered (IPVS schedules each new flow).
func udpServed(t *testing.T, n *vmNet, timeout time.Duration, want ...string) {
	t.Helper()
	servedBy(t, "UDP", n.udpAsk, timeout, want...)
}

// servedBy asks through the VIP, a new flow each time, until every wanted
// member has answered.
func servedBy(t *testing.T, proto string, ask func() (string, error), timeout time.Duration, want ...string) {
	t.Helper()
	seen := map[string]int{}
	var lastErr error
	testenv.WaitFor(t, timeout, fmt.Sprintf("%s answers from %v through the VIP", proto, want), func() bool {
		got, err := ask()
		if err != nil {
			lastErr = err
			return false
		}
		seen[got]++
		for _, w := range want {
			if seen[w] == 0 {
				return false
			}
		}
		return true
	})
	t.Logf("%s through the VIP answered by %v (last error %v)", proto, seen, lastErr)
}

// udpMembers waits for a heartbeat whose UDP pool has these member
// statuses, and returns it.
func (a *amphora) udpMembers(t *testing.T, timeout time.Duration, m1, m2 string) (health.Message, []byte) {
	t.Helper()
	return a.lvsMembers(t, timeout, vmUDPListener, vmUDPPool, map[string]string{vmUDPMember1: m1, vmUDPMember2: m2})
}

func (a *amphora) sctpMembers(t *testing.T, timeout time.Duration, m1, m2 string) (health.Message, []byte) {
	t.Helper()
	return a.lvsMembers(t, timeout, vmSCTPList, vmSCTPPool, map[string]string{vmSCTPMember1: m1, vmSCTPMember2: m2})
}

// lvsMembers waits for a heartbeat with the listener OPEN and its pool's
// members in these statuses.
func (a *amphora) lvsMembers(t *testing.T, timeout time.Duration, listener, pool string, want map[string]string) (health.Message, []byte) {
	t.Helper()
	return a.hb.WaitFor(timeout, vmKey, fmt.Sprintf("pool %s members %v", pool, want), func(m health.Message) bool {
		p, ok := m.Pools[pool]
		return ok && reflect.DeepEqual(p.Members, want) && m.Listeners[listener].Status == "OPEN"
	})
}

// newTap makes a tap device in the host's namespace for QEMU to attach.
func newTap(t *testing.T) string {
	t.Helper()
	name := topo.UniqueName("aatap")
	if len(name) > 15 {
		name = name[:15]
	}
	ipCmd(t, "tuntap", "add", "dev", name, "mode", "tap")
	t.Cleanup(func() { exec.Command("ip", "link", "delete", name).Run() })
	return name
}

// plugTap hot-plugs a NIC with mac into the VM, as Nova attaches a port,
// and puts the host side of it on ns's bridge.
func plugTap(t *testing.T, v *vm.VM, mac string, ns *topo.Namespace) {
	t.Helper()
	tap := newTap(t)
	if err := v.HotplugNIC(tap, mac); err != nil {
		t.Fatalf("hot-plug %s: %v", mac, err)
	}
	ipCmd(t, "link", "set", tap, "netns", ns.Name)
	ipCmd(t, "-n", ns.Name, "link", "set", tap, "master", vmBridge)
	ipCmd(t, "-n", ns.Name, "link", "set", tap, "up")
}

// attach hot-plugs a VIP NIC and a member NIC into a's VM and has the
// controller's own driver code plug them (VIP, then the member network).
func (n *vmNet) attach(t *testing.T, a *amphora, topology, vrrpIP, memberIP string) {
	t.Helper()
	vipMAC, memberMAC := topo.UniqueMAC(), topo.UniqueMAC()
	plugTap(t, a.VM, vipMAC, n.client)
	plugTap(t, a.VM, memberMAC, n.member)
	a.WaitFor(time.Minute, "both hot-plugged NICs in the VM",
		fmt.Sprintf("ip -br link | grep -qi %s && ip -br link | grep -qi %s", vipMAC, memberMAC))

	spec := map[string]any{
		"amphora_id": a.env.AmphoraID, "client_cert": a.env.ClientCert, "server_ca": a.env.CAFile, "port": a.env.Port,
		"topology": topology, "vip": vmVIP, "vrrp_ip": vrrpIP, "vip_mac": vipMAC, "vip_mtu": 1500,
		"vip_subnet": map[string]any{"id": "vip-subnet", "network_id": "vip-net", "cidr": "203.0.113.0/24",
			"gateway": vmClientIP, "ip_version": 4, "host_routes": []any{}},
		"additional_vips": []any{},
		"member_subnet": map[string]any{"id": "member-subnet", "network_id": "member-net", "cidr": "198.51.100.0/24",
			"gateway": nil, "ip_version": 4, "host_routes": []any{}},
		"member_mac": memberMAC, "member_ip": memberIP, "member_mtu": 1500,
		"unknown_ip": "192.0.2.77",
	}
	work := t.TempDir()
	specFile := writeSpec(t, work, spec)
	stdout, stderr, _ := ctrlutil.RunControllerScript(t, a.env, ctrlutil.TestdataScript(t, "network", "controller_network.py"), "--spec", specFile, "--workdir", work)
	var report map[string]ctrlutil.NetCall
	if err := json.Unmarshal(stdout, &report); err != nil {
		t.Fatalf("controller script printed no report: %v\n%s\n%s", err, stdout, stderr)
	}
	for _, name := range []string{"post_vip_plug", "post_network_plug"} {
		if c, ok := report[name]; !ok || c.Raised != nil {
			t.Fatalf("%s raised %s: %s", name, ctrlutil.Deref(c.Raised), c.Error)
		}
	}
}

func writeSpec(t *testing.T, dir string, spec any) string {
	t.Helper()
	path := filepath.Join(dir, "spec.json")
	data, _ := json.Marshal(spec)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startLB has the controller's driver render (Octavia's own templates),
// upload and start an HTTP load balancer on the VIP.
func startLB(t *testing.T, a *amphora, lvsSpec string, extra ...string) *ctrlutil.HAPController {
	t.Helper()
	ctl := lbController(t, a, append([]string{"--lvs-spec", lvsSpec}, extra...)...)
	ctl.Run("create", nil)
	ctl.Run("start", nil)
	// The UDP and SCTP listeners join: one listener update sends all three.
	ctl.Run("lvs-create", nil)
	return ctl
}

// lbController starts the controller's driver for a's load balancer
// (haproxy_controller_client.py, its arguments after extra's); its
// journal is logged when the test fails.
func lbController(t *testing.T, a *amphora, extra ...string) *ctrlutil.HAPController {
	t.Helper()
	args := []string{
		"--amphora-id", a.env.AmphoraID, "--lb-network-ip", "127.0.0.1", "--port", strconv.Itoa(a.env.Port),
		"--client-cert", a.env.ClientCert, "--server-ca", a.env.CAFile, "--workdir", t.TempDir(),
		"--base-path", "/var/lib/octavia", "--base-cert-dir", "/var/lib/octavia/certs",
		"--lb-id", ctrlutil.HAPLB, "--listener-id", ctrlutil.HAPListener, "--pool-id", ctrlutil.HAPPool,
		"--vip", vmVIP, "--listener-port", "80", "--connection-limit", strconv.Itoa(ctrlutil.HAPConnLimit),
		"--cert-id", ctrlutil.HAPCert,
		"--member", fmt.Sprintf("%s,%s,%d", ctrlutil.HAPMemberIDs[0], vmServerIP, vmServerPort),
	}
	ctl, _ := ctrlutil.StartHAPController(t, a.env, append(args, extra...)...)
	t.Cleanup(func() {
		if t.Failed() && a.Running() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, out, _ := a.Exec(ctx, "journalctl -b --no-pager | grep -i -e keepalived -e amphora-agent | tail -80; tail -n 20 /var/lib/octavia/lvs/*.log")
			t.Logf("%s: the agent's and keepalived's journal:\n%s", a.Name, out)
		}
	})
	return ctl
}

// traffic sends requests through the VIP from the client namespace until
// stopped, counting failures. Bounded: at most limit requests.
type traffic struct {
	ok, failed atomic.Int64
	lastErr    atomic.Value
	stop       chan struct{}
	done       chan struct{}
}

func startTraffic(t *testing.T, n *vmNet, limit int) *traffic {
	tr := &traffic{stop: make(chan struct{}), done: make(chan struct{})}
	c := n.client.HTTPClient(false)
	c.Timeout = 5 * time.Second
	go func() {
		defer close(tr.done)
		for i := 0; i < limit; i++ {
			select {
			case <-tr.stop:
				return
			default:
			}
			if _, err := tiersutil.GetMember(c, "http://"+vmVIP+"/", "X-Member"); err != nil {
				tr.failed.Add(1)
				tr.lastErr.Store(err.Error())
			} else {
				tr.ok.Add(1)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	t.Cleanup(tr.halt)
	return tr
}

func (tr *traffic) halt() {
	select {
	case <-tr.stop:
	default:
		close(tr.stop)
	}
	<-tr.done
}

// waitServed waits until the VIP answers from the member.
func waitServed(t *testing.T, n *vmNet, timeout time.Duration) {
	t.Helper()
	c := n.client.HTTPClient(false)
	c.Timeout = 3 * time.Second
	testenv.WaitFor(t, timeout, "traffic through the VIP", func() bool {
		m, err := tiersutil.GetMember(c, "http://"+vmVIP+"/", "X-Member")
		return err == nil && m == "member-1"
	})
}

// mainPID is the agent's pid as systemd knows it.
func (a *amphora) mainPID() string {
	return strings.TrimSpace(a.MustExec("systemctl show -p MainPID --value amphora-agent.service"))
}

func (a *amphora) haproxyMaster() string {
	return strings.TrimSpace(a.MustExec("cat /var/lib/octavia/" + ctrlutil.HAPLB + "/" + ctrlutil.HAPLB + ".pid"))
}

// waitNewAgent waits until systemd runs an agent other than old, active.
func (a *amphora) waitNewAgent(old string, timeout time.Duration) string {
	a.WaitFor(timeout, "a new, active agent",
		fmt.Sprintf(`pid=$(systemctl show -p MainPID --value amphora-agent.service); [ "$pid" != 0 ] && [ "$pid" != %s ] && [ "$(systemctl is-active amphora-agent.service)" = active ]`, old))
	return a.mainPID()
}

// TestVMSingleAmphora: one amphora VM through its life: hot-plugged NICs
// plugged by the controller's code, a load balancer rendered by Octavia's
// templates serving traffic, with UDP and SCTP listeners on the kernel's
// IPVS (members checked DOWN and UP in the heartbeats), agent restarts and
// kill -9 under traffic, the watchdog, and a reboot with no controller
// call afterwards.
func TestVMSingleAmphora(t *testing.T) {
	ctrlutil.RequireOctavia(t)
	a := bootAmphora(t, "amp-single", "SINGLE")
	var n *vmNet

	ok := t.Run("boot", func(t *testing.T) {
		props := a.unitShow("Type", "ActiveState", "SubState", "ActiveEnterTimestampMonotonic", "KillMode", "WatchdogUSec")
		if props["Type"] != "notify" || props["ActiveState"] != "active" || props["SubState"] != "running" ||
			props["KillMode"] != "process" || props["WatchdogUSec"] == "0" {
			t.Fatalf("unit: %v", props)
		}
		// Type=notify: the unit turns active only once the agent said
		// READY=1, which it does after the namespace is restored and the
		// API listens; a Type=simple unit would be active before both.
		// journald stamps a line of the agent's stdout when it reads it, which
		// on a busy VM lags the write (0.65 s seen with the cloud tier beside);
		// a Type=simple unit turns active seconds before either line.
		const streamLag = 2 * time.Second
		active, _ := strconv.ParseInt(props["ActiveEnterTimestampMonotonic"], 10, 64)
		for _, line := range []string{"network namespace ready", "amphora agent listening"} {
			if at := a.journalMonotonic(line); at < 0 || active < at-streamLag.Microseconds() {
				t.Fatalf("unit active at %d µs, %q logged at %d µs\n%s", active, line, at,
					a.MustExec("journalctl -u amphora-agent.service --no-pager | tail -30"))
			}
		}
		if j := a.MustExec("journalctl -u amphora-agent.service -o cat --no-pager"); !strings.Contains(j, `"amphora_id": "`+a.env.AmphoraID+`"`) {
			t.Fatalf("the journal lacks the agent's structured lines:\n%s", j)
		}
		// cloud-init writes the config drive's files (0660, its mode for
		// them): the key is not for other users' eyes.
		if mode := strings.TrimSpace(a.MustExec("stat -c %a /etc/octavia/certs/server.pem")); !strings.HasSuffix(mode, "0") {
			t.Fatalf("server.pem from the config drive has mode %s", mode)
		}
		status, _, body := a.env.Do("GET", "/1.0/info", nil)
		var info map[string]any
		if status != 200 || json.Unmarshal(body, &info) != nil || info["api_version"] != "1.0" {
			t.Fatalf("GET /1.0/info: %d %s", status, body)
		}
		_, datagram := a.hb.WaitFor(time.Minute, vmKey, "a heartbeat from the VM", func(health.Message) bool { return true })
		if msg := realHMUnwrap(t, datagram, vmKey); msg["id"] != a.env.AmphoraID {
			t.Fatalf("heartbeat as the health manager reads it: %v", msg)
		}
	})
	if !ok {
		t.FailNow()
	}

	// The operator's /etc/sysctl.d reaches the namespace, as upstream's
	// amphora-netns unit loads it: a key only the
	// operator sets has the operator's value, and a key the agent requires
	// has the agent's, which is applied after.
	t.Run("operator-sysctl", func(t *testing.T) {
		got := a.MustExec("ip netns exec amphora-haproxy sysctl -n net.ipv4.tcp_keepalive_intvl net.core.somaxconn")
		if f := strings.Fields(got); len(f) != 2 || f[0] != "17" || f[1] != "65534" {
			t.Fatalf("in the namespace, tcp_keepalive_intvl and somaxconn are %q; want 17 (%s) and 65534 (the agent's)\n%s",
				got, operatorSysctlFile, a.MustExec("journalctl -u amphora-agent.service -o cat --no-pager | grep -i sysctl | tail"))
		}
	})

	// Hot-plug and serve, in the test itself: the namespaces, the member
	// server and the controller live as long as the VM.
	n = newDataPlane(t)
	n.attach(t, a, "SINGLE", "203.0.113.4", "198.51.100.20")
	lvsSpec := vmLVSSpec(t)
	specFile := lvsSpecFile(t, lvsSpec)
	ctl := startLB(t, a, lvsSpec, "--lvs-spec-file", specFile)
	waitServed(t, n, time.Minute)
	t.Logf("hot-plugged NICs plugged by the controller's driver; a load balancer rendered by Octavia's templates serves:\n%s",
		a.MustExec("ip -n amphora-haproxy -br addr"))

	t.Run("udp-and-sctp-listeners", func(t *testing.T) {
		// Datagrams to the VIP reach both members (IPVS NAT, masquerading
		// on the member port), and the heartbeats say so.
		udpServed(t, n, time.Minute, "udp-member-1", "udp-member-2")
		_, datagram := a.udpMembers(t, time.Minute, "UP", "UP")
		msg := realHMUnwrap(t, datagram, vmKey)
		if pools, _ := msg["pools"].(map[string]any); pools[vmUDPPool] == nil {
			t.Fatalf("the health manager's unwrap_envelope finds no pool %s: %v", vmUDPPool, msg)
		}
		a.hb.WaitFor(30*time.Second, vmKey, "IPVS counters of the UDP listener", func(m health.Message) bool {
			st := m.Listeners[vmUDPListener].Stats
			return st.RX > 0 && st.TX > 0 && st.TotConns > 0
		})
		t.Logf("the kernel's table:\n%s", a.MustExec("ip netns exec amphora-haproxy ipvsadm -Ln --stats --exact"))

		// A member that stops answering: keepalived's UDP-CONNECT check
		// takes it out, the heartbeats say DOWN, the other one serves.
		n.udp[1].Stop()
		stopped := time.Now()
		a.udpMembers(t, time.Minute, "UP", "DOWN")
		t.Logf("member 2 DOWN in the heartbeats %v after it stopped answering", time.Since(stopped).Round(100*time.Millisecond))
		for i := 0; i < 6; i++ {
			if got, err := n.udpAsk(); err != nil || got != "udp-member-1" {
				t.Fatalf("with member 2 down, datagram %d: %q %v", i, got, err)
			}
		}
		if err := n.udp[1].Start(); err != nil {
			t.Fatal(err)
		}
		back := time.Now()
		a.udpMembers(t, time.Minute, "UP", "UP")
		t.Logf("member 2 UP again %v after it came back", time.Since(back).Round(100*time.Millisecond))
		udpServed(t, n, time.Minute, "udp-member-1", "udp-member-2")

		// SCTP, the same way: keepalived programs the SCTP virtual
		// service, its SCTP monitor (amphora-health-checker, raw INIT and
		// ABORT) finds both members UP, associations to the VIP reach both
		// (round robin, each from a new source port), a stopped member
		// turns DOWN while the other serves, and UP when it is back. The
		// members are user-space SCTP (sctppeer): the host's kernel needs
		// no SCTP, and a stopped member's kernel answers the checker's INIT
		// with ICMP protocol unreachable (exit 1, down).
		sctpStart := time.Now()
		t.Logf("SCTP in the VM's kernel: %s", strings.TrimSpace(a.MustExec(
			"grep -c ^SCTP /proc/net/protocols | sed 's/^/sctp sockets: /'; grep -E '^CONFIG_IP_VS_PROTO_SCTP|^CONFIG_IP_SCTP=' /boot/config-$(uname -r) || true")))
		if table := a.MustExec("ip netns exec amphora-haproxy ipvsadm -Ln"); !regexp.MustCompile(fmt.Sprintf(`SCTP\s+%s:%d\s`, vmVIP, vmSCTPPort)).MatchString(table) {
			t.Fatalf("no SCTP virtual service:\n%s", table)
		}
		a.sctpMembers(t, time.Minute, "UP", "UP")
		servedBy(t, "SCTP", n.sctpAsk, time.Minute, "sctp-member-1", "sctp-member-2")
		a.hb.WaitFor(30*time.Second, vmKey, "IPVS counters of the SCTP listener", func(m health.Message) bool {
			st := m.Listeners[vmSCTPList].Stats
			return st.RX > 0 && st.TX > 0 && st.TotConns > 0
		})
		n.sctp[1].Stop()
		stopped = time.Now()
		a.sctpMembers(t, time.Minute, "UP", "DOWN")
		t.Logf("SCTP member 2 DOWN in the heartbeats %v after it stopped", time.Since(stopped).Round(100*time.Millisecond))
		for i := 0; i < 6; i++ {
			if got, err := n.sctpAsk(); err != nil || got != "sctp-member-1" {
				t.Fatalf("with SCTP member 2 down, association %d: %q %v", i, got, err)
			}
		}
		if err := n.sctp[1].Start(); err != nil {
			t.Fatal(err)
		}
		back = time.Now()
		a.sctpMembers(t, time.Minute, "UP", "UP")
		t.Logf("SCTP member 2 UP again %v after it came back", time.Since(back).Round(100*time.Millisecond))
		servedBy(t, "SCTP", n.sctpAsk, time.Minute, "sctp-member-1", "sctp-member-2")
		checks := a.MustExec("journalctl -b --no-pager | grep 'amphora-health-checker' | tail -3 || true")
		t.Logf("keepalived on the SCTP monitor:\n%s", checks)
		if strings.Contains(checks, "status 127") || strings.Contains(checks, "status 126") {
			t.Fatal("keepalived could not run amphora-health-checker")
		}
		t.Logf("the SCTP part took %v", time.Since(sctpStart).Round(time.Second))
	})

	// Each change of the UDP listener reaches IPVS and the heartbeats, by
	// a restart of its keepalived (an old keepalived) or a SIGHUP (the
	// image's), with UDP asked through the VIP meanwhile.
	t.Run("udp-listener-changes", func(t *testing.T) { testUDPListenerChanges(t, a, n, ctl, specFile) })

	// The unit's sandbox holds for the agent, HAProxy and keepalived, and
	// rotation works under it.
	t.Run("hardening", func(t *testing.T) { checkHardening(t, a) })

	// HAProxy's output is in the journal under upstream's unit name, and
	// status names that place (README.md, "Where the logs are").
	hapJournal := "journalctl -b --no-pager -o cat -t haproxy-" + ctrlutil.HAPLB
	a.WaitFor(time.Minute, "HAProxy's output in the journal", hapJournal+" | grep -q 'New worker'")
	if st := a.MustExec("/usr/local/bin/amphora-agent status --config-file /etc/octavia/amphora-agent.conf"); !strings.Contains(st, "journalctl -t haproxy-"+ctrlutil.HAPLB) {
		t.Fatalf("status does not name HAProxy's journal identifier:\n%s", st)
	}
	newWorkers := func() string { return strings.TrimSpace(a.MustExec(hapJournal + " | grep -c 'New worker' || true")) }

	t.Run("restart-and-kill-under-traffic", func(t *testing.T) {
		master := a.haproxyMaster()
		workersBefore := newWorkers()
		tr := startTraffic(t, n, 4000)
		old := a.mainPID()
		a.MustExec("systemctl restart amphora-agent.service")
		old = a.waitNewAgent(old, 2*time.Minute)
		a.MustExec("kill -9 " + old)
		a.waitNewAgent(old, 2*time.Minute)
		// Let traffic run a little past the second restart.
		before := tr.ok.Load()
		testenv.WaitFor(t, time.Minute, "more answers after the restarts", func() bool { return tr.ok.Load() > before+20 })
		tr.halt()
		if f := tr.failed.Load(); f != 0 {
			t.Fatalf("%d of %d requests failed across the restarts: %v", f, f+tr.ok.Load(), tr.lastErr.Load())
		}
		if now := a.haproxyMaster(); now != master {
			t.Fatalf("HAProxy master %s replaced by %s: not adopted", master, now)
		}
		// The agents that adopted HAProxy resumed its output at the end of
		// its file: nothing went to the journal twice.
		if now := newWorkers(); now != workersBefore {
			t.Fatalf("HAProxy's 'New worker' lines in the journal: %s before the restarts, %s after", workersBefore, now)
		}
		if j := a.MustExec("journalctl -u amphora-agent.service -o cat --no-pager"); !strings.Contains(j, "adopted running HAProxy") {
			t.Fatal("the restarted agent did not say it adopted HAProxy")
		}
		t.Logf("%d requests, none failed, across systemctl restart and kill -9", tr.ok.Load())
	})

	t.Run("watchdog", func(t *testing.T) {
		tr := startTraffic(t, n, 4000)
		old := a.mainPID()
		a.MustExec("kill -STOP " + old)
		a.waitNewAgent(old, 3*time.Minute)
		tr.halt()
		result := strings.TrimSpace(a.MustExec(`journalctl -u amphora-agent.service --no-pager | grep -c "Watchdog timeout" || true`))
		if result == "0" {
			t.Fatalf("the agent was replaced, but not by the watchdog:\n%s", a.MustExec("journalctl -u amphora-agent.service --no-pager | tail -20"))
		}
		if f := tr.failed.Load(); f != 0 {
			t.Fatalf("%d requests failed while the agent was frozen: %v", f, tr.lastErr.Load())
		}
	})

	t.Run("reboot", func(t *testing.T) {
		// The nftables rules the interface files' scripts made at plug time
		// (LVS masquerading, TCP kept out of conntrack) must come back too.
		// (VIP rules, PUT /1.0/interface/{ip}/rules, are for SR-IOV VIPs,
		// whose scripts leave conntrack on: with untracked TCP on the member
		// port their input policy would drop the members' answers, as
		// upstream's would.)
		// nft names protocols from /etc/protocols, or prints their numbers.
		wantRules := []*regexp.Regexp{
			regexp.MustCompile(`oifname "eth1" meta l4proto (udp|17) masquerade`),
			regexp.MustCompile(`iifname "eth2" meta l4proto (tcp|6) notrack`),
		}
		for _, r := range wantRules {
			if rules := a.MustExec("ip netns exec amphora-haproxy nft list ruleset"); !r.MatchString(rules) {
				t.Fatalf("before the reboot the ruleset lacks %q:\n%s", r, rules)
			}
		}
		routesBefore := a.MustExec("ip -n amphora-haproxy route show table all | grep -v '^local\\|^broadcast\\|^multicast\\|^anycast\\|fe80' | sort")
		bootID := a.MustExec("cat /proc/sys/kernel/random/boot_id")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		a.Exec(ctx, "systemctl reboot")
		cancel()
		testenv.WaitFor(t, vmBootWait, "the VM to come back from its reboot", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			code, out, err := a.Exec(ctx, "cat /proc/sys/kernel/random/boot_id")
			return err == nil && code == 0 && out != bootID
		})
		a.waitActive(vmBootWait)
		// No controller call: NICs, addresses, routes, rules and HAProxy are
		// back, and before READY=1 (the unit's activation).
		addrs := a.MustExec("ip -n amphora-haproxy addr show dev eth1")
		for _, want := range []string{"203.0.113.4/24", vmVIP + "/32"} {
			if !strings.Contains(addrs, want) {
				t.Fatalf("eth1 after reboot lacks %s:\n%s", want, addrs)
			}
		}
		if after := a.MustExec("ip -n amphora-haproxy route show table all | grep -v '^local\\|^broadcast\\|^multicast\\|^anycast\\|fe80' | sort"); after != routesBefore {
			t.Fatalf("routes before the reboot:\n%s\nafter:\n%s", routesBefore, after)
		}
		rules := a.MustExec("ip netns exec amphora-haproxy nft list ruleset")
		for _, r := range wantRules {
			if n := len(r.FindAllString(rules, -1)); n != 1 {
				t.Fatalf("after the reboot the ruleset has %q %d times, want once:\n%s", r, n, rules)
			}
		}
		active, _ := strconv.ParseInt(a.unitShow("ActiveEnterTimestampMonotonic")["ActiveEnterTimestampMonotonic"], 10, 64)
		// The master's start time (clock ticks since boot, USER_HZ 100).
		ticks, _ := strconv.ParseInt(strings.TrimSpace(a.MustExec(
			"awk '{print $22}' /proc/$(cat /var/lib/octavia/"+ctrlutil.HAPLB+"/"+ctrlutil.HAPLB+".pid)/stat")), 10, 64)
		if started := ticks * 10000; started == 0 || started > active {
			t.Fatalf("HAProxy started at %d µs after boot, the unit was active at %d µs", started, active)
		}
		waitServed(t, n, 30*time.Second)
		if log := a.MustExec("ls -l /var/lib/octavia/" + ctrlutil.HAPLB + "/haproxy.log"); !strings.Contains(log, "haproxy.log") {
			t.Fatalf("HAProxy's log is not where README.md (\"Where the logs are\") says: %s", log)
		}
		// The UDP and SCTP listeners too: their keepalived restored, both
		// members checked UP again and served.
		udpServed(t, n, time.Minute, "udp-member-1", "udp-member-2")
		a.udpMembers(t, time.Minute, "UP", "UP")
		a.sctpMembers(t, time.Minute, "UP", "UP")
		servedBy(t, "SCTP", n.sctpAsk, time.Minute, "sctp-member-1", "sctp-member-2")
	})
	t.Run("power-loss", func(t *testing.T) { testPowerLoss(t, a, n) })
}

// vrrpCall runs tiers/testdata/vm/controller_vrrp.py for amphora index this.
func vrrpCall(t *testing.T, amps []*amphora, this int, action string) ctrlutil.NetCall {
	t.Helper()
	type ampSpec struct {
		ID       string `json:"id"`
		Port     int    `json:"port"`
		VRRPIP   string `json:"vrrp_ip"`
		Role     string `json:"role"`
		Priority int    `json:"priority"`
	}
	spec := map[string]any{
		"client_cert": amps[this].env.ClientCert, "server_ca": amps[this].env.CAFile,
		"lb_id": ctrlutil.HAPLB, "vip": vmVIP, "vip_cidr": "203.0.113.0/24", "vip_gateway": vmClientIP, "this": this,
		"amphorae": []ampSpec{
			{ID: amps[0].env.AmphoraID, Port: amps[0].env.Port, VRRPIP: "203.0.113.4", Role: "MASTER", Priority: 100},
			{ID: amps[1].env.AmphoraID, Port: amps[1].env.Port, VRRPIP: "203.0.113.5", Role: "BACKUP", Priority: 90},
		},
	}
	work := t.TempDir()
	stdout, stderr, _ := ctrlutil.RunControllerScript(t, amps[this].env, ctrlutil.TestdataScript(t, "vm", "controller_vrrp.py"),
		"--spec", writeSpec(t, work, spec), "--workdir", work, "--action", action)
	var c ctrlutil.NetCall
	if err := json.Unmarshal(stdout, &c); err != nil {
		t.Fatalf("controller_vrrp.py printed no report: %v\n%s\n%s", err, stdout, stderr)
	}
	if c.Raised != nil && action == "configure" {
		t.Fatalf("%s on %s raised %s: %s\n%s", action, amps[this].Name, *c.Raised, c.Error, stderr)
	}
	return c
}

// holder asks each amphora, through the controller's driver, which
// interface holds the VIP; it returns the index of the one that answers
// eth1 (the others answer None), or -1, and fails on any other answer.
func holder(t *testing.T, amps []*amphora) int {
	t.Helper()
	found := -1
	for i := range amps {
		if !amps[i].Running() {
			continue
		}
		c := vrrpCall(t, amps, i, "interface")
		switch {
		case c.Raised == nil && c.Returned == "eth1":
			if found >= 0 {
				t.Fatalf("both amphorae hold the VIP")
			}
			found = i
		case c.Raised == nil && c.Returned == nil:
			// The driver's answer for an address no interface holds.
		default:
			t.Fatalf("get_interface_from_ip on %s: %v %s %s", amps[i].Name, c.Returned, ctrlutil.Deref(c.Raised), c.Error)
		}
	}
	return found
}

// TestVMActiveStandby: two amphora VMs whose VIP NICs share one L2
// segment, keepalived configs rendered by Octavia's templater and pushed
// by its driver: one MASTER serves the VIP; when its VM loses power the
// BACKUP takes the VIP over and traffic resumes, HTTP and UDP.
func TestVMActiveStandby(t *testing.T) {
	ctrlutil.RequireOctavia(t)
	amps := []*amphora{startAmphora(t, "amp-master", "ACTIVE_STANDBY"), startAmphora(t, "amp-backup", "ACTIVE_STANDBY")}
	for _, a := range amps {
		a.ready(t)
	}
	n := newDataPlane(t)
	for i, a := range amps {
		n.attach(t, a, "ACTIVE_STANDBY", fmt.Sprintf("203.0.113.%d", 4+i), fmt.Sprintf("198.51.100.%d", 20+i))
		startLB(t, a, lvsutil.SpecArg(t, vmUDPUnmonitored()))
	}
	for i := range amps {
		vrrpCall(t, amps, i, "configure")
	}
	// The holder the wait saw: under load a second look can catch the VIP
	// between holders.
	master := -1
	testenv.WaitFor(t, 2*time.Minute, "exactly one amphora holding the VIP", func() bool {
		master = holder(t, amps)
		return master >= 0
	})
	if master != 0 {
		t.Logf("the VIP went to %s (priority 90) first", amps[master].Name)
	}
	waitServed(t, n, time.Minute)
	udpServed(t, n, time.Minute, "udp-member-1", "udp-member-2")
	// keepalived logs to syslog, which the journal collects (package
	// agent/journalfwd).
	amps[master].WaitFor(time.Minute, "keepalived's MASTER line in the journal",
		"journalctl -b --no-pager -t Keepalived_vrrp | grep -q 'Entering MASTER STATE'")
	state := amps[master].MustExec("ip -n amphora-haproxy -br addr show dev eth1")
	t.Logf("%s holds the VIP: %s", amps[master].Name, strings.TrimSpace(state))

	// Pull the MASTER's plug under traffic.
	c := n.client.HTTPClient(false)
	c.Timeout = 2 * time.Second
	cut := time.Now()
	amps[master].PowerOff()
	var back time.Duration
	testenv.WaitFor(t, 2*time.Minute, "traffic through the BACKUP", func() bool {
		if _, err := tiersutil.GetMember(c, "http://"+vmVIP+"/", "X-Member"); err == nil {
			back = time.Since(cut)
			return true
		}
		return false
	})
	t.Logf("failover: the VIP answered again %v after the MASTER lost power", back.Round(100*time.Millisecond))
	// The UDP listener's keepalived on the BACKUP serves the VIP it took.
	udpServed(t, n, time.Minute, "udp-member-1", "udp-member-2")
	t.Logf("failover: UDP answered by both members %v after the MASTER lost power", time.Since(cut).Round(100*time.Millisecond))
	if h := holder(t, amps); h != 1-master {
		t.Fatalf("after the failover the controller finds the VIP on amphora %d, want %s", h, amps[1-master].Name)
	}
}

// syslogReceiver is a log offloading target on the host: UDP on host
// loopback, which the VM reaches through QEMU's gateway.
type syslogReceiver struct {
	conn *net.UDPConn
	mu   sync.Mutex
	got  []string
}

func newSyslogReceiver(t *testing.T) *syslogReceiver {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	r := &syslogReceiver{conn: conn}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			n, _, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			r.mu.Lock()
			r.got = append(r.got, string(buf[:n]))
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	return r
}

// target is the receiver as the controller names it in *_log_targets.
func (r *syslogReceiver) target() string {
	return fmt.Sprintf("%s:%d", vm.GatewayIP, r.conn.LocalAddr().(*net.UDPAddr).Port)
}

// find returns the received messages containing every one of texts.
func (r *syslogReceiver) find(texts ...string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, m := range r.got {
		all := true
		for _, s := range texts {
			all = all && strings.Contains(m, s)
		}
		if all {
			out = append(out, m)
		}
	}
	return out
}

func (r *syslogReceiver) waitFor(t *testing.T, timeout time.Duration, what string, texts ...string) string {
	t.Helper()
	var found []string
	testenv.WaitFor(t, timeout, what, func() bool {
		found = r.find(texts...)
		return len(found) > 0
	})
	return found[0]
}

// renderRsyslogConf has Octavia's LoggingJinjaTemplater render
// 10-rsyslog.conf for these offloading options.
func renderRsyslogConf(t *testing.T, args ...string) []byte {
	t.Helper()
	ctrlutil.RequireOctavia(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctrlutil.DebianPython, append([]string{ctrlutil.TestdataScript(t, "vm", "controller_logging.py"), "--workdir", t.TempDir()}, args...)...)
	cmd.Env = ctrlutil.PythonEnv()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("controller_logging.py: %v\n%s", err, stderr.String())
	}
	return out
}

const (
	vmMember2IP = "198.51.100.3" // the PING-monitored pool's second member
)

// TestVMLogsAndPingMonitor: one amphora booted with the controller's
// 10-rsyslog.conf (Octavia's LoggingJinjaTemplater, admin and tenant
// targets on the host) on its config drive, serving a pool with a PING
// health monitor (Octavia's template, the package's ping-wrapper.sh):
// HAProxy's flow lines for requests through the VIP reach the tenant
// target and are kept in /var/log/haproxy.log (rotated by logrotate); the
// agent's and keepalived's lines reach the admin target; the agent's
// lines are in the journal once, with their priority; an unreachable
// member goes DOWN in the heartbeats and comes back UP; with
// disable_local_log_storage the flow lines still leave and stay off the
// disk.
func TestVMLogsAndPingMonitor(t *testing.T) {
	ctrlutil.RequireOctavia(t)
	tenant, admin := newSyslogReceiver(t), newSyslogReceiver(t)
	rsyslogConf := renderRsyslogConf(t, "--tenant-target", tenant.target(), "--admin-target", admin.target())
	a := startAmphoraWith(t, "amp-logs", "SINGLE", map[string][]byte{"/etc/rsyslog.d/10-rsyslog.conf": rsyslogConf})
	a.ready(t)
	// cloud-init writes the file before sysinit.target (its local stage
	// for Nova's files, its init stage for user data) and rsyslog starts
	// after it, so rsyslog's first start reads it; the agent's first line
	// at the admin target below depends on that.
	t.Logf("rsyslog: %s", a.MustExec("systemctl is-active rsyslog; ls -l /run/rsyslog/octavia/log /etc/rsyslog.d/; journalctl -b -o short-monotonic -u rsyslog -u cloud-init-local -u cloud-init | grep -e Start -e Stopp -e Finished"))

	n := newDataPlane(t)
	ipCmd(t, "-n", n.member.Name, "addr", "add", vmMember2IP+"/24", "dev", vmBridge)
	n.member.ServeHTTP(t, fmt.Sprintf("%s:%d", vmMember2IP, vmServerPort), topo.MemberHandler("member-2"))
	n.attach(t, a, "SINGLE", "203.0.113.4", "198.51.100.20")
	// The UDP listener's keepalived logs to syslog: the admin target gets it.
	startLB(t, a, lvsutil.SpecArg(t, vmUDPUnmonitored()), "--ping-monitor",
		"--member", fmt.Sprintf("%s,%s,%d", ctrlutil.HAPMemberIDs[1], vmMember2IP, vmServerPort))
	waitServed(t, n, time.Minute)
	if cfg := a.MustExec("cat /var/lib/octavia/" + ctrlutil.HAPLB + "/haproxy.cfg"); !strings.Contains(cfg, "external-check command /var/lib/octavia/ping-wrapper.sh") {
		t.Fatalf("the rendered config has no PING check:\n%s", cfg)
	}
	members := func(m1, m2 string) {
		t.Helper()
		want := map[string]string{ctrlutil.HAPMemberIDs[0]: m1, ctrlutil.HAPMemberIDs[1]: m2}
		a.hb.WaitFor(time.Minute, vmKey, fmt.Sprintf("pool members %v", want), func(m health.Message) bool {
			// Heartbeat v3 names an HAProxy pool <pool>:<listener>.
			return reflect.DeepEqual(m.Pools[ctrlutil.HAPPool+":"+ctrlutil.HAPListener].Members, want)
		})
	}

	t.Run("ping-monitor", func(t *testing.T) {
		members("UP", "UP")
		// The second member's address goes away: pings go unanswered.
		ipCmd(t, "-n", n.member.Name, "addr", "del", vmMember2IP+"/24", "dev", vmBridge)
		gone := time.Now()
		members("UP", "DOWN")
		t.Logf("member 2 DOWN in the heartbeats %v after its address went away", time.Since(gone).Round(100*time.Millisecond))
		waitServed(t, n, 30*time.Second)
		ipCmd(t, "-n", n.member.Name, "addr", "add", vmMember2IP+"/24", "dev", vmBridge)
		back := time.Now()
		members("UP", "UP")
		t.Logf("member 2 UP again %v after its address came back", time.Since(back).Round(100*time.Millisecond))
	})

	c := n.client.HTTPClient(false)
	c.Timeout = 3 * time.Second
	request := func(path string) {
		t.Helper()
		testenv.WaitFor(t, 30*time.Second, "a request through the VIP", func() bool {
			_, err := tiersutil.GetMember(c, "http://"+vmVIP+path, "X-Member")
			return err == nil
		})
	}

	t.Run("offloading-and-local-storage", func(t *testing.T) {
		marker := "/aa-logs-" + topo.Tag()
		request(marker)
		line := tenant.waitFor(t, time.Minute, "HAProxy's flow line at the tenant target", marker, ctrlutil.HAPLB)
		t.Logf("tenant target got: %s", strings.TrimSpace(line))
		if got := admin.find(marker); len(got) != 0 {
			t.Fatalf("a flow line reached the admin target: %q", got)
		}
		admin.waitFor(t, time.Minute, "the agent's lines at the admin target", "amphora-agent", "amphora agent listening")
		admin.waitFor(t, time.Minute, "keepalived's lines at the admin target", "Keepalived")
		admin.waitFor(t, time.Minute, "HAProxy's admin lines at the admin target", "haproxy", "started")

		// Kept on the disk too, and rotated.
		a.WaitFor(30*time.Second, "the flow line in /var/log/haproxy.log", "grep -q -- '"+marker+"' /var/log/haproxy.log")
		a.MustExec("logrotate -f /etc/logrotate.d/haproxy")
		after := marker + "-rotated"
		request(after)
		a.WaitFor(30*time.Second, "a new flow line in the new /var/log/haproxy.log",
			"grep -q -- '"+after+"' /var/log/haproxy.log && grep -q -- '"+marker+"' /var/log/haproxy.log.1")
	})

	t.Run("journal", func(t *testing.T) {
		// A restart-only option changed and changed back, each with a
		// SIGHUP: two warnings.
		a.MustExec(`sed -i 's/^bind_port = 9443$/bind_port = 9444/' /etc/octavia/amphora-agent.conf && systemctl kill -s HUP amphora-agent.service`)
		a.WaitFor(30*time.Second, "the first warning", "journalctl -u amphora-agent -p warning -o cat | grep -q 'takes effect when the agent restarts'")
		a.MustExec(`sed -i 's/^bind_port = 9444$/bind_port = 9443/' /etc/octavia/amphora-agent.conf && systemctl kill -s HUP amphora-agent.service`)
		a.WaitFor(30*time.Second, "the second warning",
			"[ $(journalctl -u amphora-agent -p warning -o cat | grep -c 'takes effect when the agent restarts') -ge 2 ]")
		type entry struct {
			Message  any    `json:"MESSAGE"`
			Priority string `json:"PRIORITY"`
			Facility string `json:"SYSLOG_FACILITY"`
		}
		var warnings, listening []entry
		for _, l := range strings.Split(a.MustExec("journalctl -b -u amphora-agent -o json --no-pager"), "\n") {
			var e entry
			if json.Unmarshal([]byte(l), &e) != nil {
				continue
			}
			msg, _ := e.Message.(string)
			switch {
			case strings.Contains(msg, "takes effect when the agent restarts"):
				warnings = append(warnings, e)
			case strings.Contains(msg, "amphora agent listening"):
				listening = append(listening, e)
			}
		}
		// One agent start, one SIGHUP pair: each line stored once.
		if len(listening) != 1 || len(warnings) != 2 {
			t.Fatalf("the journal has %d 'listening' lines (want 1) and %d warnings (want 2): %v %v", len(listening), len(warnings), listening, warnings)
		}
		for _, e := range append(warnings, listening...) {
			if msg, _ := e.Message.(string); (strings.Contains(msg, "takes effect") && e.Priority != "4") ||
				(strings.Contains(msg, "listening") && e.Priority != "6") || e.Facility != "17" {
				t.Fatalf("journal entry %v: want priority 4 (warning) or 6 (info) and facility 17 (local1)", e)
			}
		}
		admin.waitFor(t, time.Minute, "the agent's warning at the admin target", "takes effect when the agent restarts")
	})

	t.Run("disable-local-log-storage", func(t *testing.T) {
		// Octavia 11's template leaves "stop" on the admin rule's line when
		// admin targets are set without forward_all_logs, so the file that
		// can work has tenant targets only.
		conf := renderRsyslogConf(t, "--tenant-target", tenant.target(), "--disable-local-log-storage")
		if !strings.Contains(string(conf), "*.* stop") {
			t.Fatalf("rendered without stop:\n%s", conf)
		}
		a.MustExec(fmt.Sprintf("echo %s | base64 -d > /etc/rsyslog.d/10-rsyslog.conf && systemctl restart rsyslog",
			base64.StdEncoding.EncodeToString(conf)))
		tag := topo.Tag()
		marker := "/aa-nolocal-" + tag
		testenv.WaitFor(t, time.Minute, "the flow line at the tenant target", func() bool {
			request(marker)
			return len(tenant.find(marker)) > 0
		})
		// rsyslog writes a line it keeps at once (no buffering here): had
		// it kept this one, it would be there by now. The command spells
		// the marker in two parts: qemu-ga logs every command it runs to
		// the journal, under /var/log.
		if out := a.MustExec("grep -rl -- \"$(printf '%s%s' /aa-nolocal- " + tag + ")\" /var/log || true"); strings.TrimSpace(out) != "" {
			t.Fatalf("with disable_local_log_storage the flow line is on the disk in %s", out)
		}
	})
}
