//go:build system

// System tests: the real binary over real mutual TLS on loopback.
package system_test

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/certs/devpki"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/tiersutil"
	"github.com/amphora-agent/amphora-agent/haproxy/stats/haproxytest"
)

func dial(e *testenv.Env, cfg *tls.Config) (*tls.Conn, error) {
	return tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", e.Addr(), cfg)
}

// handshakeRefused reports whether the server refused cfg: either the
// handshake fails, or (TLS 1.3, where the client finishes first) the first
// read fails with the server's alert.
func handshakeRefused(e *testenv.Env, cfg *tls.Config) bool {
	conn, err := dial(e, cfg)
	if err != nil {
		return true
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("GET / HTTP/1.1\r\nHost: amp\r\nConnection: close\r\n\r\n")); err != nil {
		return true
	}
	var buf [64]byte
	n, err := conn.Read(buf[:])
	return n == 0 || err != nil && !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 200")
}

func TestTLSClientAuthentication(t *testing.T) {
	e := testenv.New(t)
	e.Start()

	good := e.ClientTLS()
	if handshakeRefused(e, good) {
		t.Fatal("the controller's certificate was refused")
	}

	noCert := good.Clone()
	noCert.Certificates = nil
	if !handshakeRefused(e, noCert) {
		t.Error("a client without a certificate was served")
	}

	other, err := devpki.NewAuthority("someone else")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := other.Client("controller")
	if err != nil {
		t.Fatal(err)
	}
	strangerCert, err := tls.X509KeyPair(stranger.CertPEM, stranger.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	foreign := good.Clone()
	foreign.Certificates = []tls.Certificate{strangerCert}
	if !handshakeRefused(e, foreign) {
		t.Error("a client certificate from another CA was served")
	}
}

func TestTLSVersions(t *testing.T) {
	e := testenv.New(t)
	e.Start()
	for _, c := range []struct {
		name    string
		version uint16
		refused bool
	}{
		{"TLS 1.0", tls.VersionTLS10, true},
		{"TLS 1.1", tls.VersionTLS11, true},
		{"TLS 1.2", tls.VersionTLS12, false},
		{"TLS 1.3", tls.VersionTLS13, false},
	} {
		cfg := e.ClientTLS()
		cfg.MinVersion, cfg.MaxVersion = c.version, c.version
		if got := handshakeRefused(e, cfg); got != c.refused {
			t.Errorf("%s: refused = %v, want %v", c.name, got, c.refused)
		}
	}
}

func TestTLS13Minimum(t *testing.T) {
	e := testenv.New(t)
	e.Extra = "[amphora_agent]\nagent_tls_protocol = TLSv1.3\n"
	e.Start()
	cfg := e.ClientTLS()
	cfg.MaxVersion = tls.VersionTLS12
	if !handshakeRefused(e, cfg) {
		t.Error("TLS 1.2 accepted with agent_tls_protocol = TLSv1.3")
	}
	if handshakeRefused(e, e.ClientTLS()) {
		t.Error("TLS 1.3 refused")
	}
}

// A controller set to agent_tls_protocol = TLSv1 (Octavia accepts SSLv3,
// TLSv1, TLSv1.1) still gets TLS 1.2 at least, and the agent says so in one
// warning, not again on each SIGHUP or configuration push that repeats it.
func TestWeakTLSProtocolKeepsTLS12AndWarnsOnce(t *testing.T) {
	e := testenv.New(t)
	e.Extra = "[amphora_agent]\nagent_tls_protocol = TLSv1\n"
	e.Start()
	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
		cfg := e.ClientTLS()
		cfg.MinVersion, cfg.MaxVersion = v, v
		if !handshakeRefused(e, cfg) {
			t.Errorf("TLS version %x accepted with agent_tls_protocol = TLSv1", v)
		}
	}
	if handshakeRefused(e, e.ClientTLS()) {
		t.Fatal("TLS 1.2 refused")
	}
	const option = "agent_tls_protocol"
	if n := e.Count(option); n != 1 {
		t.Fatalf("start-up: %d lines name %s, want 1:\n%s", n, option, e.Output())
	}
	if err := e.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the SIGHUP reload", func() bool { return e.Count("configuration applied") >= 1 })
	conf, _ := os.ReadFile(e.ConfigPath)
	if status, _, resp := e.Do("PUT", "/1.0/config", conf); status != 202 {
		t.Fatalf("configuration push: %d %s", status, resp)
	}
	testenv.WaitFor(t, 10*time.Second, "the push applied", func() bool { return e.Count("configuration applied") >= 2 })
	if n := e.Count(option); n != 1 {
		t.Fatalf("after a SIGHUP and a push of the same value: %d lines name %s, want 1:\n%s", n, option, e.Output())
	}
}

func TestCertificateRotation(t *testing.T) {
	e := testenv.New(t)
	e.Start()
	before := e.ServedCertificate().SerialNumber.String()

	// Invalid uploads are refused and the old certificate keeps serving.
	next, err := e.CA.Server(e.AmphoraID)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := e.CA.Server("other")
	// Certificates the controller could not connect through: it checks
	// the amphora id as host name and the validity (with its own clock).
	expired, _ := e.CA.ServerValid(e.AmphoraID, []string{e.AmphoraID}, time.Now().Add(-30*24*time.Hour), time.Now().Add(-48*time.Hour))
	for name, body := range map[string][]byte{
		"certificate without key": next.CertPEM,
		"key without certificate": next.KeyPEM,
		"mismatched key":          append(append([]byte{}, next.CertPEM...), other.KeyPEM...),
		"garbage":                 []byte("not a pem"),
		"another amphora's":       other.Combined(),
		"expired two days ago":    expired.Combined(),
	} {
		status, ctype, resp := e.Do("PUT", "/1.0/certificate", body)
		if status != 400 || ctype != "application/json" || !strings.Contains(string(resp), `"message":"Invalid certificate"`) {
			t.Errorf("%s: %d %s %s", name, status, ctype, resp)
		}
		if got := e.ServedCertificate().SerialNumber.String(); got != before {
			t.Fatalf("%s: serving a different certificate after a refused upload", name)
		}
	}

	// A valid upload is served on the next connection, without restart;
	// repeating it (a controller retry) changes nothing.
	for i := 0; i < 2; i++ {
		status, _, resp := e.Do("PUT", "/1.0/certificate", next.Combined())
		if status != 202 || string(resp) != `{"message":"OK"}` {
			t.Fatalf("rotation %d: %d %s", i, status, resp)
		}
	}
	leaf, err := next.Leaf()
	if err != nil {
		t.Fatal(err)
	}
	want := leaf.SerialNumber.String()
	if got := e.ServedCertificate().SerialNumber.String(); got != want {
		t.Fatalf("serving serial %s after rotation, want %s", got, want)
	}
	st, err := os.Stat(e.ServerCert)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("server certificate mode %v, %v; want 0600", st.Mode().Perm(), err)
	}
	if data, _ := os.ReadFile(e.ServerCert); !bytes.Equal(data, next.Combined()) {
		t.Fatal("server certificate file differs from the upload")
	}
}

// The controller stamps NotBefore with its own clock and uploads at once;
// an amphora whose clock lags takes the rotation (202), serves the new
// certificate to a controller whose clock is ahead, and starts again with
// it on disk.
func TestCertificateRotationWithClockSkew(t *testing.T) {
	e := testenv.New(t)
	e.Start()
	const ahead = 10 * time.Minute
	issued := time.Now().Add(ahead)
	next, err := e.CA.ServerValid(e.AmphoraID, []string{e.AmphoraID}, issued, issued.Add(30*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	status, _, resp := e.Do("PUT", "/1.0/certificate", next.Combined())
	if status != 202 || string(resp) != `{"message":"OK"}` {
		t.Fatalf("rotation with NotBefore %s ahead: %d %s", ahead, status, resp)
	}
	if got := e.Count("not valid yet by this amphora's clock"); got != 1 {
		t.Errorf("%d warnings about the skew, want 1\n%s", got, e.Output())
	}
	leaf, err := next.Leaf()
	if err != nil {
		t.Fatal(err)
	}
	e.ControllerAhead = ahead
	check := func(when string) {
		t.Helper()
		if got := e.ServedCertificate().SerialNumber; got.Cmp(leaf.SerialNumber) != 0 {
			t.Fatalf("%s: serving serial %s, want the rotated %s", when, got, leaf.SerialNumber)
		}
		if status, _, resp := e.Do("GET", "/1.0/info", nil); status != 200 {
			t.Fatalf("%s: GET /1.0/info through the rotated certificate: %d %s", when, status, resp)
		}
	}
	check("after rotation")
	e.Stop()
	e.Start()
	check("after a restart")
}

func TestConfigUpload(t *testing.T) {
	e := testenv.New(t)
	e.Start()
	original, _ := os.ReadFile(e.ConfigPath)

	bad := strings.Replace(string(original), "bind_port = ", "bind_port = 9443 # ", 1)
	status, ctype, resp := e.Do("PUT", "/1.0/config", []byte(bad))
	if status != 400 || ctype != "application/json" || !strings.Contains(string(resp), "bind_port") {
		t.Fatalf("invalid config: %d %s %s", status, ctype, resp)
	}
	if now, _ := os.ReadFile(e.ConfigPath); !bytes.Equal(now, original) {
		t.Fatal("an invalid upload changed the config file")
	}
	if status, _, _ := e.Do("GET", "/1.0/info", nil); status != 200 {
		t.Fatal("agent stopped serving after an invalid config upload")
	}

	updated := strings.NewReplacer("heartbeat_interval = 10", "heartbeat_interval = 7",
		"loadbalancer_topology = SINGLE", "loadbalancer_topology = ACTIVE_STANDBY").Replace(string(original))
	for i := 0; i < 2; i++ {
		status, _, resp = e.Do("PUT", "/1.0/config", []byte(updated))
		if status != 202 || string(resp) != `{"message":"OK"}` {
			t.Fatalf("upload %d: %d %s", i, status, resp)
		}
	}
	now, _ := os.ReadFile(e.ConfigPath)
	if string(now) != updated {
		t.Fatal("config file is not the uploaded one")
	}
	if st, _ := os.Stat(e.ConfigPath); st.Mode().Perm() != 0o600 {
		t.Fatalf("config mode %v", st.Mode().Perm())
	}
	testenv.WaitFor(t, 5*time.Second, "the new topology applied", func() bool {
		return e.Count("configuration applied", `"topology": "ACTIVE_STANDBY"`, `"heartbeat_interval": "7s"`) >= 1
	})

	// SIGHUP re-reads the file.
	if err := os.WriteFile(e.ConfigPath, []byte(strings.Replace(updated, "heartbeat_interval = 7", "heartbeat_interval = 9", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "SIGHUP reload", func() bool {
		return e.Count("configuration applied", `"heartbeat_interval": "9s"`) >= 1
	})
}

func TestVersionDiscoveryAndErrors(t *testing.T) {
	e := testenv.New(t)
	e.Start()
	for _, c := range []struct {
		method, path string
		status       int
		contains     string
	}{
		{"GET", "/", 200, `{"api_version":"1.0"}`},
		{"GET", "//", 200, `{"api_version":"1.0"}`},
		{"GET", "/1.0/does-not-exist", 404, `"http_code":404`},
		{"PUT", "/1.0/info", 405, `"http_code":405`},
	} {
		status, ctype, body := e.Do(c.method, c.path, nil)
		if status != c.status || ctype != "application/json" || !strings.Contains(string(body), c.contains) {
			t.Errorf("%s %s: %d %s %s", c.method, c.path, status, ctype, body)
		}
	}
	status, _, body := e.Do("GET", "/1.0/details", nil)
	var details map[string]any
	if status != 200 || json.Unmarshal(body, &details) != nil || details["api_version"] != "1.0" {
		t.Fatalf("details: %d %s", status, body)
	}
}

func TestDualStackDefaultBind(t *testing.T) {
	e := testenv.New(t)
	e.Extra = "[haproxy_amphora]\nbind_host = ::\n"
	e.Start()
	cfg := e.ClientTLS()
	conn, err := tls.Dial("tcp", net.JoinHostPort("::1", strconv.Itoa(e.Port)), cfg)
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	conn.Close()
}

func TestGracefulShutdown(t *testing.T) {
	e := testenv.New(t)
	e.Start()
	if err := e.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.Exited():
	case <-time.After(15 * time.Second):
		t.Fatal("agent did not stop on SIGTERM")
	}
	// The server drains first, then the heartbeat loop and the restore
	// are stopped and joined, in that order.
	out, at := e.Output(), -1
	for _, step := range []string{"shutting down", "heartbeat sender stopped", "agent stopped; HAProxy and keepalived keep running"} {
		i := strings.Index(out, step)
		if i < 0 || i < at {
			t.Fatalf("shutdown step %q missing or out of order:\n%s", step, out)
		}
		at = i
	}
}

func TestBadConfigStopsStartupWithOneClearLine(t *testing.T) {
	e := testenv.New(t)
	e.Extra = "[haproxy_amphora]\nbind_port = 99999\n"
	if err := os.WriteFile(e.ConfigPath, []byte(e.Config()), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(testenv.Binary(t), "--config-file", e.ConfigPath).CombinedOutput()
	if err == nil {
		t.Fatal("agent started with bind_port = 99999")
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], e.ConfigPath) || !strings.Contains(lines[0], "[haproxy_amphora] bind_port") || !strings.Contains(lines[0], "99999") {
		t.Fatalf("start-up error is not one line naming file, section, key and value:\n%s", out)
	}
}

func TestVersionFlag(t *testing.T) {
	out, err := exec.Command(testenv.Binary(t), "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "amphora-agent ") {
		t.Fatalf("--version: %v %q", err, out)
	}
}

// TestRepeatedConfigFile: later --config-file values win, like oslo.
func TestRepeatedConfigFile(t *testing.T) {
	e := testenv.New(t)
	if err := os.WriteFile(e.ConfigPath, []byte(e.Config()), 0o600); err != nil {
		t.Fatal(err)
	}
	// The second file moves the API to another port and turns debug off.
	override := e.Path("override.conf")
	port := haproxytest.FreePort(t)
	if err := os.WriteFile(override, []byte(fmt.Sprintf("[haproxy-amphora]\nbind-port = %d\n[DEFAULT]\ndebug = False\n", port)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testenv.Binary(t), "--config-file", e.ConfigPath, "--config-file="+override)
	var out testenv.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	e.Port = port
	testenv.WaitFor(t, 15*time.Second, "the agent on the overriding port", func() bool {
		conn, err := dial(e, e.ClientTLS())
		if err == nil {
			conn.Close()
		}
		return err == nil
	})
	if status, _, _ := e.Do("GET", "/1.0/info", nil); status != 200 {
		t.Fatalf("info on the overriding port: %d", status)
	}
	// debug = False from the second file: no per-request debug lines.
	if strings.Contains(out.String(), "DEBUG") {
		t.Fatalf("debug logging although the last file turned it off:\n%s", out.String())
	}
}

// TestDebugOptionSwitchesLogLevelLive: debug applies on PUT /1.0/config.
func TestDebugOptionSwitchesLogLevelLive(t *testing.T) {
	e := testenv.New(t)
	e.Start()
	cfg, _ := os.ReadFile(e.ConfigPath)
	quiet := strings.Replace(string(cfg), "debug = True", "debug = False", 1)
	if status, _, body := e.Do("PUT", "/1.0/config", []byte(quiet)); status != 202 {
		t.Fatalf("config: %d %s", status, body)
	}
	before := e.Count("DEBUG", `"path": "/1.0/info"`)
	for i := 0; i < 3; i++ {
		e.Do("GET", "/1.0/info", nil)
	}
	if status, _, _ := e.Do("PUT", "/1.0/config", cfg); status != 202 {
		t.Fatal("config back to debug")
	}
	e.Do("GET", "/1.0/info", nil)
	testenv.WaitFor(t, 5*time.Second, "debug lines again", func() bool {
		return e.Count("DEBUG", `"path": "/1.0/info"`) > before
	})
	if got := e.Count("DEBUG", `"path": "/1.0/info"`); got != before+1 {
		t.Fatalf("%d debug request lines for /1.0/info after the switches, want %d (3 quiet requests, then 1 logged)", got, before+1)
	}
}

func TestCertificateEndpoints(t *testing.T) {
	e := testenv.New(t)
	e.Start()
	const lb = "5b6c3d0e-7f1a-4b2c-9d3e-0f1a2b3c4d5e"
	base := "/1.0/loadbalancer/" + lb + "/certificates/"
	wrong := `{"message":"Filename has wrong format"}`
	for _, method := range []string{"PUT", "GET", "DELETE"} {
		// A large body with a bad name still gets its answer.
		status, ctype, body := e.Do(method, base+"test.bla", bytes.Repeat([]byte("x"), 1<<20))
		if status != 400 || ctype != "application/json" || string(body) != wrong {
			t.Errorf("%s test.bla: %d %s %s", method, status, ctype, body)
		}
	}
	status, _, body := e.Do("GET", base+"x.pem", nil)
	if status != 404 || string(body) != `{"message":"Certificate Not Found","details":"No certificate with filename: x.pem"}` {
		t.Errorf("GET missing: %d %s", status, body)
	}
	if status, _, body := e.Do("DELETE", base+"x.pem", nil); status != 200 || string(body) != `{"message":"OK"}` {
		t.Errorf("DELETE missing: %d %s", status, body)
	}
	pem := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	req, _ := http.NewRequest("PUT", e.URL(base+"x.pem"), bytes.NewReader(pem))
	resp, err := e.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := tiersutil.MD5Hex(pem)
	if resp.StatusCode != 200 || resp.Header.Get("ETag") != want {
		t.Fatalf("PUT: %d ETag %q, want %s", resp.StatusCode, resp.Header.Get("ETag"), want)
	}
	if st, err := os.Stat(e.Path("lib", "certs", lb, "x.pem")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("stored certificate: %v %v", st, err)
	}
	if status, _, body := e.Do("GET", base+"x.pem", nil); status != 200 || string(body) != `{"md5sum":"`+want+`"}` {
		t.Errorf("GET: %d %s", status, body)
	}
	// Ids that could leave the certificate folder are refused.
	if status, _, body := e.Do("PUT", "/1.0/loadbalancer/..%2e/certificates/x.pem", pem); status != 400 && status != 404 {
		t.Errorf("PUT with an escaping id: %d %s", status, body)
	}
	if status, _, _ := e.Do("PUT", "/1.0/loadbalancer/.hidden/certificates/x.pem", pem); status != 400 {
		t.Errorf("PUT with id .hidden: %d", status)
	}
}
