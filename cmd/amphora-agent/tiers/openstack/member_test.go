//go:build openstack

// The real-OpenStack tier (opt-in, not in make test). For now it proves
// the member image (../internal/openstack/member-image.sh) on its own:
// booted as Nova boots it, set up over SSH as octavia-tempest-plugin sets
// up its member web servers, serving what the plugin then checks.
//
//	make test-member-image
package openstack_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/certs/devpki"
)

// memberUser is the image's login user: tempest.conf's [validation]
// image_ssh_user.
const memberUser = "debian"

// The plugin's paths on the member (octavia_tempest_plugin.common.constants).
const (
	devShm      = "/dev/shm/"
	testServer  = devShm + "test_server.bin"
	serverCert  = devShm + "cert.pem"
	serverKey   = devShm + "key.pem"
	clientCA    = devShm + "client_ca.pem"
	memberIPv6  = "2001:db8:51::99"
	memberNet4  = "198.51.100.0/24"
	memberNet6  = "2001:db8:51::/64"
	bootTimeout = 10 * time.Minute
)

// The prologue tempest's RemoteClient puts before every command it runs.
const shellPrologue = "set -eu -o pipefail; PATH=$PATH:/sbin;"

// member is one booted member VM and how the host reaches it: QEMU user
// networking forwards a loopback port to each of the guest's ports.
type member struct {
	t    *testing.T
	dir  string
	key  string      // the private key file
	tcp  map[int]int // guest TCP port → host loopback port
	udp  map[int]int // guest UDP port → host loopback port
	qemu *exec.Cmd
	done chan struct{}
}

func TestMemberImage(t *testing.T) {
	image := os.Getenv("AMPHORA_MEMBER_IMAGE")
	server := os.Getenv("AMPHORA_TEST_SERVER")
	if image == "" || server == "" {
		t.Skip("AMPHORA_MEMBER_IMAGE (member-image.sh's qcow2) and AMPHORA_TEST_SERVER (the plugin's test_server.bin) are unset: make test-member-image sets them")
	}
	for _, tool := range []string{"qemu-system-x86_64", "qemu-img", "xorriso", "mkfs.vfat", "mcopy", "ssh", "scp", "ssh-keygen"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing (make deps installs it)", tool)
		}
	}
	memory := 256
	if n, err := strconv.Atoi(os.Getenv("AMPHORA_MEMBER_MEMORY_MB")); err == nil && n > 0 {
		memory = n
	}
	// Nova writes the config drive in either format (config_drive_format)
	// and attaches an ISO 9660 drive as a CD-ROM, a vfat one as a disk.
	// One VM at a time.
	for _, format := range []string{"iso9660", "vfat"} {
		t.Run(format, func(t *testing.T) { testMember(t, image, server, memory, format) })
	}
}

func testMember(t *testing.T, image, server string, memory int, driveFormat string) {
	m := bootMember(t, image, memory, driveFormat)

	// Boot to SSH, timed from QEMU's start: the plugin's first step,
	// RemoteClient.validate_authentication, as tempest retries it.
	start := time.Now()
	deadline := start.Add(bootTimeout)
	for {
		if _, err := m.ssh("true"); err == nil {
			break
		} else if time.Now().After(deadline) || !m.running() {
			t.Fatalf("no SSH login as %s within %s: %v", memberUser, time.Since(start).Round(time.Second), err)
		}
		time.Sleep(time.Second)
	}
	t.Logf("boot to SSH login: %s (TCG, %d MiB, %s config drive)", time.Since(start).Round(100*time.Millisecond), memory, driveFormat)

	// The same login by tempest's own client (paramiko), when the
	// OpenStack root is at hand: its RSA key exchange with this sshd is
	// what the plugin's runs depend on.
	if root := os.Getenv("AMPHORA_OPENSTACK_ROOT"); root != "" {
		m.tempestLogin(root)
	}

	// _enable_ipv6_nic_webserver: an address of the member's IPv6 subnet
	// added by hand, as Cirros needs.
	m.mustSSH(fmt.Sprintf("sudo ip address add %s/64 dev eth0 || true", memberIPv6))

	// _install_start_webserver: the binary by scp in the legacy protocol
	// (-O, as the plugin passes to any scp of OpenSSH 8.7 or later), then
	// the member's certificate, key and client CA in one scp.
	m.scp(true, devShm+"test_server.bin", server)
	pki := memberPKI(t, m.dir)
	m.scp(true, devShm, pki.cert, pki.key, pki.clientCA)
	// The same file again over SFTP (scp's default protocol), compared
	// byte for byte with the one copied the legacy way.
	m.scp(false, devShm+"test_server.sftp", server)
	want := fileSHA256(t, server)
	for _, path := range []string{testServer, devShm + "test_server.sftp"} {
		got := strings.Fields(m.mustSSH("sha256sum " + path))
		if len(got) == 0 || got[0] != want {
			t.Fatalf("%s on the member: sha256 %v, want %s", path, got, want)
		}
	}
	m.mustSSH(`sudo sh -c "echo 1 > /proc/sys/vm/overcommit_memory"`)
	m.mustSSH(fmt.Sprintf("sudo screen -d -m %s -port 80 -id %d -https_port 443 -cert %s -key %s -https_client_auth_port 9443 -client_ca %s",
		testServer, 1, serverCert, serverKey, clientCA))
	m.mustSSH(fmt.Sprintf("sudo screen -d -m %s -port 81 -id %d", testServer, 2))

	// _validate_webserver and _validate_udp_server, and the HTTPS ports
	// the TLS scenarios use.
	m.expectHTTP("http", 80, nil, "1")
	m.expectHTTP("http", 81, nil, "2")
	m.expectHTTP("https", 443, &tls.Config{RootCAs: pki.roots, ServerName: "member"}, "1")
	m.expectHTTP("https", 9443, &tls.Config{RootCAs: pki.roots, ServerName: "member", Certificates: []tls.Certificate{pki.client}}, "1")
	m.expectUDP(80, "1")
	m.expectUDP(81, "2")

	// eth0 got its IPv4 address by DHCP and an IPv6 one from the router's
	// advertisements (SLAAC); the hand-made one is there too.
	addrs := m.mustSSH("ip -o address show dev eth0")
	for _, want := range []string{"inet 198.51.100.", "inet6 2001:db8:51:0:", "inet6 " + memberIPv6 + "/64"} {
		if !strings.Contains(addrs, want) {
			t.Errorf("eth0 has no %q address:\n%s", want, addrs)
		}
	}
	t.Logf("member memory with both servers running:\n%s", m.mustSSH("free -m"))
	t.Logf("boot:\n%s", m.mustSSH("sudo systemd-analyze; sudo systemd-analyze critical-chain ssh.service | tail -n +4"))
}

// bootMember starts the image on a qcow2 overlay with a config drive as
// Nova writes it for a server with a key pair (a fresh RSA key, as
// tempest's key pairs are), in driveFormat (iso9660 or vfat), its NIC on
// QEMU user networking (DHCP from memberNet4, router advertisements of
// memberNet6). QEMU is killed and everything removed in t.Cleanup.
func bootMember(t *testing.T, image string, memoryMB int, driveFormat string) *member {
	t.Helper()
	dir := t.TempDir()
	m := &member{t: t, dir: dir, key: filepath.Join(dir, "key"), tcp: map[int]int{}, udp: map[int]int{}}
	name := "member-" + randomHex(t, 4)
	run(t, "ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-m", "PEM", "-N", "", "-C", name, "-f", m.key)
	pub, err := os.ReadFile(m.key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	drive := filepath.Join(dir, "config-drive")
	latest := filepath.Join(drive, "openstack", "latest")
	if err := os.MkdirAll(latest, 0o755); err != nil {
		t.Fatal(err)
	}
	uuid := randomHex(t, 16)
	meta, _ := json.Marshal(map[string]any{
		"uuid":              uuid[:8] + "-" + uuid[8:12] + "-" + uuid[12:16] + "-" + uuid[16:20] + "-" + uuid[20:],
		"name":              name,
		"hostname":          name,
		"launch_index":      0,
		"availability_zone": "nova",
		"public_keys":       map[string]string{name: string(pub)},
		"keys":              []map[string]string{{"name": name, "type": "ssh", "data": string(pub)}},
	})
	if err := os.WriteFile(filepath.Join(latest, "meta_data.json"), meta, 0o644); err != nil {
		t.Fatal(err)
	}
	// As Nova attaches them to a pc machine: ISO 9660 as the IDE CD-ROM
	// hdd, vfat as a virtio disk.
	var driveArg string
	switch driveFormat {
	case "iso9660":
		iso := filepath.Join(dir, "config-drive.iso")
		run(t, "xorriso", "-as", "mkisofs", "-quiet", "-V", "config-2", "-J", "-r", "-o", iso, drive)
		driveArg = "file=" + iso + ",media=cdrom,if=ide,index=3,readonly=on"
	case "vfat":
		fat := filepath.Join(dir, "config-drive.vfat")
		run(t, "mkfs.vfat", "-C", "-n", "config-2", fat, "2048")
		run(t, "mcopy", "-s", "-i", fat, filepath.Join(drive, "openstack"), "::")
		driveArg = "file=" + fat + ",if=virtio,format=raw,readonly=on"
	default:
		t.Fatalf("no config drive format %q", driveFormat)
	}
	disk := filepath.Join(dir, "disk.qcow2")
	run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-b", image, "-F", "qcow2", disk)

	forwards := []string{}
	for _, port := range []int{22, 80, 81, 443, 9443} {
		m.tcp[port] = freePort(t, "tcp")
		forwards = append(forwards, fmt.Sprintf("hostfwd=tcp:127.0.0.1:%d-:%d", m.tcp[port], port))
	}
	for _, port := range []int{80, 81} {
		m.udp[port] = freePort(t, "udp")
		forwards = append(forwards, fmt.Sprintf("hostfwd=udp:127.0.0.1:%d-:%d", m.udp[port], port))
	}
	// TCG always: /dev/kvm is no use on the hosts this tier runs on.
	m.qemu = exec.Command("qemu-system-x86_64", "-name", name, "-M", "pc", "-accel", "tcg",
		"-m", strconv.Itoa(memoryMB), "-smp", "1", "-nographic", "-monitor", "none",
		"-serial", "file:"+filepath.Join(dir, "console.log"),
		"-drive", "file="+disk+",if=virtio,format=qcow2,cache=unsafe",
		"-drive", driveArg,
		"-netdev", fmt.Sprintf("user,id=net0,net=%s,ipv6-net=%s,%s", memberNet4, memberNet6, strings.Join(forwards, ",")),
		"-device", "virtio-net-pci,netdev=net0,mac=52:54:00:33:64:01")
	qlog, err := os.Create(filepath.Join(dir, "qemu.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer qlog.Close()
	m.qemu.Stdout, m.qemu.Stderr = qlog, qlog
	if err := m.qemu.Start(); err != nil {
		t.Fatal(err)
	}
	m.done = make(chan struct{})
	go func() { m.qemu.Wait(); close(m.done) }()
	t.Cleanup(func() {
		m.qemu.Process.Kill()
		<-m.done
		if t.Failed() {
			console, _ := os.ReadFile(filepath.Join(dir, "console.log"))
			qemuLog, _ := os.ReadFile(filepath.Join(dir, "qemu.log"))
			t.Logf("%s console (last lines):\n%s\nQEMU: %s", name, lastLines(string(console), 40), qemuLog)
		}
	})
	return m
}

func (m *member) running() bool {
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

// sshOptions are the plugin's scp options (and so tempest's ssh's):
// no host key kept or checked, RSA keys with ssh-rsa allowed.
func (m *member) sshOptions() []string {
	return []string{"-o", "UserKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=no",
		"-o", "PubkeyAcceptedKeyTypes=+ssh-rsa", "-o", "ConnectTimeout=10", "-o", "ConnectionAttempts=1",
		"-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "-i", m.key}
}

// ssh runs cmd as RemoteClient.exec_command does: after the prologue, in
// the login user's shell, without a terminal.
func (m *member) ssh(cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append(m.sshOptions(), "-p", strconv.Itoa(m.tcp[22]), memberUser+"@127.0.0.1", shellPrologue+" "+cmd)
	var stderr bytes.Buffer
	c := exec.CommandContext(ctx, "ssh", args...)
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		return string(out), fmt.Errorf("ssh %q: %v: %s", cmd, err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func (m *member) mustSSH(cmd string) string {
	m.t.Helper()
	out, err := m.ssh(cmd)
	if err != nil {
		m.t.Fatal(err)
	}
	return out
}

// tempestScript logs in with tempest's RemoteClient (the private key on
// standard input, the port as argument) and runs one of the plugin's
// commands through it.
const tempestScript = `import sys
from tempest.lib.common.utils.linux import remote_client
client = remote_client.RemoteClient("127.0.0.1", sys.argv[1], pkey=sys.stdin.read(), ssh_key_type="rsa", ssh_timeout=120)
client.ssh_client.port = int(sys.argv[2])
client.validate_authentication()
print(client.exec_command('sudo sh -c "echo 1 > /proc/sys/vm/overcommit_memory" && cat /proc/sys/vm/overcommit_memory').strip())
`

// tempestLogin runs tempestScript with the OpenStack root's Python,
// chrooted in a mount namespace of its own (its /proc and /dev are
// mounted there and go with it).
func (m *member) tempestLogin(root string) {
	m.t.Helper()
	key, err := os.Open(m.key)
	if err != nil {
		m.t.Fatal(err)
	}
	defer key.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "unshare", "-m", "sh", "-ec",
		`mount -t proc proc "$1/proc"; mount --bind /dev "$1/dev"; shift; exec chroot "$@"`,
		"sh", root, root, "python3", "-c", tempestScript, memberUser, strconv.Itoa(m.tcp[22]))
	c.Stdin = key
	out, err := c.CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "1") {
		m.t.Fatalf("tempest's RemoteClient as %s: %v\n%s", memberUser, err, out)
	}
	m.t.Logf("tempest's RemoteClient logged in as %s and ran the overcommit command", memberUser)
}

// scp copies files to target on the member as the plugin does; legacy
// picks the SCP protocol (-O) over SFTP.
func (m *member) scp(legacy bool, target string, files ...string) {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := m.sshOptions()
	if legacy {
		args = append(args, "-O")
	}
	args = append(append(append(args, "-P", strconv.Itoa(m.tcp[22])), files...), memberUser+"@127.0.0.1:"+target)
	if out, err := exec.CommandContext(ctx, "scp", args...).CombinedOutput(); err != nil {
		m.t.Fatalf("scp (legacy %v) to %s: %v\n%s", legacy, target, err, out)
	}
}

// expectHTTP GETs / on the member's port until the body is want; the
// server may still be starting.
func (m *member) expectHTTP(scheme string, port int, tlsConfig *tls.Config, want string) {
	m.t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	defer client.CloseIdleConnections()
	url := fmt.Sprintf("%s://127.0.0.1:%d/", scheme, m.tcp[port])
	var last string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		resp, err := client.Get(url)
		if err != nil {
			last = err.Error()
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && string(body) == want {
			return
		}
		last = fmt.Sprintf("%s: %q", resp.Status, body)
	}
	m.t.Fatalf("GET %s (the member's %d): want %q, last: %s", url, port, want, last)
}

// expectUDP sends a datagram to the member's port until the answer is
// want, as the plugin's make_udp_request.
func (m *member) expectUDP(port int, want string) {
	m.t.Helper()
	var last string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		got, err := udpRequest(m.udp[port])
		if err == nil && got == want {
			return
		}
		last = fmt.Sprintf("%q %v", got, err)
	}
	m.t.Fatalf("UDP to the member's %d: want %q, last: %s", port, want, last)
}

func udpRequest(port int) (string, error) {
	conn, err := net.Dial("udp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := conn.Write([]byte("data\n")); err != nil {
		return "", err
	}
	buf := make([]byte, 1500)
	n, err := conn.Read(buf)
	return string(buf[:n]), err
}

// pkiFiles is the member's TLS material as the plugin makes it: a server
// certificate from the member CA, its key, and the CA of the clients the
// client-auth port accepts (with one such client for this test).
type pkiFiles struct {
	cert, key, clientCA string
	roots               *x509.CertPool
	client              tls.Certificate
}

func memberPKI(t *testing.T, dir string) pkiFiles {
	t.Helper()
	ca, err := devpki.NewAuthority("member CA")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Server("member", net.ParseIP("127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	clientCA, err := devpki.NewAuthority("member client CA")
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientCA.Client("member client")
	if err != nil {
		t.Fatal(err)
	}
	client, err := tls.X509KeyPair(cli.CertPEM, cli.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	p := pkiFiles{cert: filepath.Join(dir, "cert.pem"), key: filepath.Join(dir, "key.pem"),
		clientCA: filepath.Join(dir, "client_ca.pem"), roots: x509.NewCertPool(), client: client}
	p.roots.AddCert(ca.Cert)
	for path, data := range map[string][]byte{p.cert: srv.CertPEM, p.key: srv.KeyPEM, p.clientCA: clientCA.PEM} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func freePort(t *testing.T, network string) int {
	t.Helper()
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
