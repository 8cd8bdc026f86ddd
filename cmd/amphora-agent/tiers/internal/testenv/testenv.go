// Package testenv starts the real amphora-agent binary for system and
// interop tests: a private PKI shaped like the controller's, a config with
// all state under a temporary folder, a loopback port, and clients that
// present the controller certificate.
package testenv

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/fsutil"
	"github.com/amphora-agent/amphora-agent/agent/testkit"
	"github.com/amphora-agent/amphora-agent/certs/devpki"
	"github.com/amphora-agent/amphora-agent/haproxy/stats/haproxytest"
)

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// Binary returns the agent binary: $AMPHORA_AGENT_BIN if set (make test
// passes the one it built), else one built once per test process.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("AMPHORA_AGENT_BIN"); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return abs
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "amphora-agent-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "amphora-agent")
		cmd := exec.Command("go", "build", "-o", buildPath, "./cmd/amphora-agent")
		cmd.Dir = moduleRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "..")
}

// Env is one agent with its own files.
type Env struct {
	Dir        string
	AmphoraID  string
	ConfigPath string
	CA         *devpki.Authority
	CAFile     string // signs the server and the controller client
	ServerCert string // agent_server_cert
	ClientCert string // controller client cert + key, one PEM
	Port       int
	// Extra is appended to the rendered config (later values win).
	Extra string
	// Env is added to the agent's environment (NOTIFY_SOCKET=..., say).
	Env []string
	// Credential, when set, runs the agent as that user (the test makes
	// Dir readable to it).
	Credential *syscall.Credential
	// Wrap, when set, is a command the agent runs under: the agent's
	// command line follows it, and it must exec the agent (so that the
	// agent keeps its pid), as `unshare -m ...` does.
	Wrap []string
	// ControllerAhead is how far the controller's clock runs ahead of the
	// amphora's: ClientTLS checks the agent's certificate at that time.
	ControllerAhead time.Duration

	namespace string

	t    testing.TB
	cmd  *exec.Cmd
	out  *SyncBuffer
	done chan struct{}
}

// New prepares (but does not start) an agent.
func New(t testing.TB) *Env {
	t.Helper()
	// A short folder: HAProxy's unix sockets live under it, and socket
	// paths are limited to 107 bytes.
	dir, err := os.MkdirTemp("", "aa-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ca, err := devpki.NewAuthority("test controller CA")
	if err != nil {
		t.Fatal(err)
	}
	e := &Env{Dir: dir, AmphoraID: "9d2b6e1c-4f3a-4c8e-8b7d-2a1e5f6c7d80", CA: ca, t: t}
	e.CAFile = e.Path("certs", "ca.pem")
	e.ServerCert = e.Path("certs", "server.pem")
	e.ClientCert = e.Path("certs", "client.pem")
	e.ConfigPath = e.Path("amphora-agent.conf")
	for _, d := range []string{"certs", "lib", "lib/certs", "interfaces"} {
		if err := os.MkdirAll(e.Path(d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// As on an amphora (/var/lib/octavia is 0755): `haproxy -c` runs as
	// the haproxy user and must reach the staged config and the
	// user/group file. The keys' folders stay 0700.
	for _, d := range []string{"", "lib"} {
		if err := os.Chmod(e.Path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	server, err := ca.Server(e.AmphoraID)
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.Client("controller")
	if err != nil {
		t.Fatal(err)
	}
	e.write(e.CAFile, ca.PEM)
	e.write(e.ServerCert, server.Combined())
	e.write(e.ClientCert, client.Combined())
	e.Port = haproxytest.FreePort(t)
	// The agent creates its data-plane namespace at start-up; remove it
	// with the test (a test that names its own namespace removes that).
	e.namespace = fmt.Sprintf("amphora-test-%d", e.Port)
	t.Cleanup(func() { exec.Command("ip", "netns", "delete", e.namespace).Run() })
	return e
}

// Namespace is the data-plane namespace the rendered config names.
// It is fixed when the Env is made, even if a test moves Port later.
func (e *Env) Namespace() string { return e.namespace }

// Path joins parts under the env's folder.
func (e *Env) Path(parts ...string) string {
	return filepath.Join(append([]string{e.Dir}, parts...)...)
}

func (e *Env) write(path string, data []byte) {
	if err := fsutil.WriteFile(path, data, 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// Config renders the agent config the way the controller does, with this
// env's paths.
func (e *Env) Config() string {
	return fmt.Sprintf(`
[DEFAULT]
debug = True
use_syslog = False

[haproxy_amphora]
base_cert_dir = %s
base_path = %s
bind_host = 127.0.0.1
bind_port = %d
haproxy_cmd = /usr/sbin/haproxy

[health_manager]
controller_ip_port_list = 127.0.0.1:5555
heartbeat_interval = 10
heartbeat_key = insecure

[amphora_agent]
agent_server_ca = %s
agent_server_cert = %s
agent_server_network_dir = %s
agent_request_read_timeout = 180
amphora_id = %s
amphora_udp_driver = keepalived_lvs
agent_tls_protocol = TLSv1.2
network_namespace = %s
plugged_interfaces_file = %s
nftables_rules_file = %s
haproxy_user_group_file = %s
pci_rescan_file = %s

[controller_worker]
loadbalancer_topology = SINGLE
%s`, e.Path("lib", "certs"), e.Path("lib"), e.Port, e.CAFile, e.ServerCert, e.Path("interfaces"),
		e.AmphoraID, e.Namespace(), e.Path("lib", "plugged_interfaces"), e.Path("lib", "nftables-vip.rules"),
		e.Path("lib", "haproxy-default-user-group.conf"), e.Path("pci-rescan"), e.Extra)
}

// Start writes the config (unless the file exists) and runs the agent
// until it accepts a mutual-TLS connection. The process is stopped in
// t.Cleanup.
func (e *Env) Start() {
	e.t.Helper()
	e.Spawn()
	e.WaitServing()
}

// Spawn writes the config (unless the file exists) and starts the agent
// without waiting for it. The process is stopped in t.Cleanup.
func (e *Env) Spawn() {
	t := e.t
	t.Helper()
	if _, err := os.Stat(e.ConfigPath); os.IsNotExist(err) {
		e.write(e.ConfigPath, []byte(e.Config()))
	}
	e.out = &SyncBuffer{}
	argv := append(append([]string(nil), e.Wrap...), Binary(t), "--config-file", e.ConfigPath)
	e.cmd = exec.Command(argv[0], argv[1:]...)
	e.cmd.Stdout, e.cmd.Stderr = e.out, e.out
	e.cmd.Env = append(withoutServiceManager(os.Environ()), e.Env...)
	if e.Credential != nil {
		e.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: e.Credential}
	}
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e.done = make(chan struct{})
	go func() { e.cmd.Wait(); close(e.done) }()
	t.Cleanup(e.Stop)
}

// WaitServing waits until the agent started by Spawn completes a TLS
// handshake on its API port; it fails the test if the agent exits first.
func (e *Env) WaitServing() {
	t := e.t
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", e.Addr(), e.ClientTLS())
		if err == nil {
			conn.Close()
			return
		}
		select {
		case <-e.done:
			t.Fatalf("agent exited during start-up: %v\n%s", e.cmd.ProcessState, e.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent not accepting TLS on %s: %v\n%s", e.Addr(), err, e.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// withoutServiceManager drops systemd's notify and watchdog variables: an
// agent under test must not talk to the service manager that runs the
// tests, only to what a test passes in Env.
func withoutServiceManager(env []string) []string {
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID":
			continue
		}
		out = append(out, kv)
	}
	return out
}

// Stop terminates the agent (SIGTERM, then SIGKILL after 10 s).
func (e *Env) Stop() {
	if e.cmd == nil || e.cmd.Process == nil {
		return
	}
	select {
	case <-e.done:
		return
	default:
	}
	e.cmd.Process.Signal(os.Interrupt)
	select {
	case <-e.done:
	case <-time.After(10 * time.Second):
		e.cmd.Process.Kill()
		<-e.done
	}
}

// Signal sends sig to the running agent.
func (e *Env) Signal(sig os.Signal) error { return e.cmd.Process.Signal(sig) }

// Pid is the running agent's process id.
func (e *Env) Pid() int { return e.cmd.Process.Pid }

// Exited reports whether the agent process has ended.
func (e *Env) Exited() <-chan struct{} { return e.done }

// Output is what the agent logged so far.
func (e *Env) Output() string {
	if e.out == nil {
		return "(the agent runs elsewhere)"
	}
	return e.out.String()
}

// Addr is the API address.
func (e *Env) Addr() string { return net.JoinHostPort("127.0.0.1", fmt.Sprint(e.Port)) }

// URL is the API URL of path.
func (e *Env) URL(path string) string { return "https://" + e.Addr() + path }

// ClientTLS is the controller's TLS setup: its client certificate, the CA,
// and the amphora id as the expected server name.
func (e *Env) ClientTLS() *tls.Config {
	cert, err := tls.LoadX509KeyPair(e.ClientCert, e.ClientCert)
	if err != nil {
		e.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.CA.PEM)
	ahead := e.ControllerAhead
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: e.AmphoraID, MinVersion: tls.VersionTLS12,
		Time: func() time.Time { return time.Now().Add(ahead) }}
}

// ServedCertificate opens a new connection and returns the server
// certificate the agent presents on it.
func (e *Env) ServedCertificate() *x509.Certificate {
	e.t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", e.Addr(), e.ClientTLS())
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

// Client is an HTTP client that authenticates as the controller. Each call
// uses a new connection so certificate changes are observed.
func (e *Env) Client() *http.Client {
	return &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: e.ClientTLS(), DisableKeepAlives: true},
	}
}

// Do sends a request and returns status, content type and body.
func (e *Env) Do(method, path string, body []byte) (int, string, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.URL(path), bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := e.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), buf.Bytes()
}

// WaitFor is testkit.WaitFor, kept here so that the tier tests reach
// their whole harness through one package.
var WaitFor = testkit.WaitFor

// SyncBuffer and WriteFile are testkit's, here for the same reason as
// WaitFor.
type SyncBuffer = testkit.SyncBuffer

var WriteFile = testkit.WriteFile

// Count returns how many lines of the agent's output contain all of subs.
func (e *Env) Count(subs ...string) int {
	n := 0
	for _, line := range strings.Split(e.Output(), "\n") {
		all := true
		for _, s := range subs {
			if !strings.Contains(line, s) {
				all = false
				break
			}
		}
		if all {
			n++
		}
	}
	return n
}
