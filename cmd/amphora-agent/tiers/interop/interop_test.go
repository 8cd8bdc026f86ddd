//go:build interop

// The interop tier: the real agent binary driven by the real Octavia
// controller client (Debian's python3-octavia, AmphoraAPIClient1_0) through
// tiers/testdata/interop/controller_client.py.
//
//	go test -tags interop -count=1 -v ./cmd/amphora-agent/tiers/interop/ -run Interop
package interop_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/fsutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/ctrlutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
)

const (
	// unknownPathLimit is how fast the client must give up on an unknown
	// path: a retried 404 would take connection_max_retries x
	// connection_retry_interval (3 x 1 s) at least.
	unknownPathLimit = 5 * time.Second
	logWait          = 10 * time.Second

	newHeartbeatInterval = 7
	newTopology          = "ACTIVE_STANDBY"
	notFoundException    = "octavia.amphorae.drivers.haproxy.exceptions.NotFound"
)

// clientReport is what controller_client.py prints.
type clientReport struct {
	Driver              string             `json:"driver"`
	Client              string             `json:"client"`
	APIVersionResponse  map[string]any     `json:"api_version_response"`
	PopulatedAPIVersion []int              `json:"populated_api_version"`
	AmphoraAPIVersion   string             `json:"amphora_api_version"`
	Info                json.RawMessage    `json:"info"`
	HAProxyVersions     []string           `json:"haproxy_versions"`
	Details             json.RawMessage    `json:"details"`
	UpdateAgentConfig   callResult         `json:"update_agent_config"`
	UpdateCert          callResult         `json:"update_cert_for_rotation"`
	InfoAfterRotation   json.RawMessage    `json:"info_after_rotation"`
	Seconds             map[string]float64 `json:"seconds"`
	ControllerConfig    map[string]any     `json:"controller_config"`
	UnknownPath         struct {
		Path        string  `json:"path"`
		Raised      *string `json:"raised"`
		Status      int     `json:"status"`
		ContentType string  `json:"content_type"`
		Body        string  `json:"body"`
		Seconds     float64 `json:"seconds"`
	} `json:"unknown_path"`
}

type callResult struct {
	Status int            `json:"status"`
	Body   map[string]any `json:"body"`
}

func TestInteropControllerClient(t *testing.T) {
	ctrlutil.RequireOctavia(t)
	script := ctrlutil.TestdataScript(t, "interop", "controller_client.py")

	env := testenv.New(t)
	env.Start()
	oldSerial := env.ServedCertificate().SerialNumber

	// The new agent config: the one the agent runs with, with the two
	// options the controller's AmphoraConfigUpdate changes.
	newConfig := env.Config()
	for old, repl := range map[string]string{
		"heartbeat_interval = 10\n":        fmt.Sprintf("heartbeat_interval = %d\n", newHeartbeatInterval),
		"loadbalancer_topology = SINGLE\n": "loadbalancer_topology = " + newTopology + "\n",
	} {
		if !strings.Contains(newConfig, old) {
			t.Fatalf("testenv config no longer contains %q; update this test\n%s", old, newConfig)
		}
		newConfig = strings.Replace(newConfig, old, repl, 1)
	}
	newServer, err := env.CA.Server(env.AmphoraID)
	if err != nil {
		t.Fatal(err)
	}
	newLeaf, err := newServer.Leaf()
	if err != nil {
		t.Fatal(err)
	}
	newSerial := newLeaf.SerialNumber
	if newSerial.Cmp(oldSerial) == 0 {
		t.Fatal("the rotated certificate has the old serial number")
	}

	work := t.TempDir()
	configFile := filepath.Join(work, "amphora-agent.conf.new")
	pemFile := filepath.Join(work, "server.pem.new")
	for path, data := range map[string][]byte{configFile: []byte(newConfig), pemFile: newServer.Combined()} {
		if err := fsutil.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if n := env.Count("configuration applied"); n != 0 {
		t.Fatalf("agent logged %d configuration changes before the controller sent one\n%s", n, env.Output())
	}

	report, stderr, took := runControllerClient(t, env, script,
		"--amphora-id", env.AmphoraID,
		"--lb-network-ip", "127.0.0.1",
		"--port", strconv.Itoa(env.Port),
		"--client-cert", env.ClientCert,
		"--server-ca", env.CAFile,
		"--agent-config", configFile,
		"--server-pem", pemFile,
		"--workdir", work,
		"--unknown-path", "does-not-exist",
	)
	t.Logf("controller client ran %v; per call (s): %v; unknown path gave up after %.3fs",
		took.Round(time.Millisecond), report.Seconds, report.UnknownPath.Seconds)
	t.Logf("controller client: driver=%s client=%s controller config=%v", report.Driver, report.Client, report.ControllerConfig)
	if testing.Verbose() {
		t.Logf("controller client stderr (octavia's log):\n%s", stderr)
	}

	// Everything the script sent is done; a marker request fences the
	// agent's log so that later counts are final.
	const marker = "/interop-log-fence"
	if status, _, _ := env.Do("GET", marker, nil); status != 404 {
		t.Fatalf("GET %s = %d, want 404", marker, status)
	}
	waitLog(t, env, "log fence", "\trequest\t", pathField(marker))

	t.Logf("agent access log:\n%s", requestLines(env))

	t.Run("version discovery", func(t *testing.T) {
		if got := report.APIVersionResponse; len(got) != 1 || got["api_version"] != "1.0" {
			t.Errorf("get_api_version() = %v, want {'api_version': '1.0'}", got)
		}
		if fmt.Sprint(report.PopulatedAPIVersion) != "[1 0]" || report.AmphoraAPIVersion != "1.0" {
			t.Errorf("driver populated api_version %q (%v), want 1.0 ([1 0])", report.AmphoraAPIVersion, report.PopulatedAPIVersion)
		}
		if report.Client != "AmphoraAPIClient1_0" {
			t.Errorf("driver chose %s, want AmphoraAPIClient1_0", report.Client)
		}
		// The controller asks for GET // and the agent must answer it as
		// GET / (no 404, no redirect needed).
		if n := env.Count("\trequest\t", `"method": "GET"`, pathField("//"), `"status": 200`); n == 0 {
			t.Errorf("agent log has no GET // answered with 200\n%s", requestLines(env))
		}
		if n := env.Count("\trequest\t", pathField("//"), `"status": 3`); n != 0 {
			t.Errorf("agent redirected GET // %d times; it should serve it\n%s", n, requestLines(env))
		}
	})

	t.Run("info", func(t *testing.T) {
		info := decodeObject(t, "info", report.Info)
		for _, k := range []string{"hostname", "haproxy_version", "api_version", "keepalived_version", "ipvsadm_version"} {
			wantType(t, "info", info, k, "string")
		}
		if info["api_version"] != "1.0" {
			t.Errorf("info api_version = %v, want 1.0", info["api_version"])
		}
		if v, ok := info["haproxy_version"].(string); ok {
			parts := strings.Split(v, ".")
			if len(parts) < 2 {
				t.Errorf("haproxy_version %q has no major.minor", v)
			} else {
				for _, p := range parts[:2] {
					if _, err := strconv.Atoi(p); err != nil {
						t.Errorf("haproxy_version %q: %q is not an integer (the controller calls int() on it)", v, p)
					}
				}
			}
		}
		// The controller's own parsing (driver._get_haproxy_versions).
		if len(report.HAProxyVersions) != 2 {
			t.Errorf("controller parsed haproxy versions %v, want [major minor]", report.HAProxyVersions)
		}
		for _, p := range report.HAProxyVersions {
			if _, err := strconv.Atoi(p); err != nil {
				t.Errorf("controller parsed haproxy version part %q, not an integer", p)
			}
		}
	})

	t.Run("details", func(t *testing.T) { checkDetails(t, report.Details) })

	t.Run("config update", func(t *testing.T) {
		if r := report.UpdateAgentConfig; r.Status != 202 || r.Body["message"] != "OK" {
			t.Errorf("update_agent_config answered %d %v, want 202 {message: OK}", r.Status, r.Body)
		}
		got, err := os.ReadFile(env.ConfigPath)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != newConfig {
			t.Errorf("%s differs from the uploaded config\ngot:\n%s\nwant:\n%s", env.ConfigPath, got, newConfig)
		}
		st, err := os.Stat(env.ConfigPath)
		if err != nil {
			t.Fatal(err)
		}
		if perm := st.Mode().Perm(); perm != 0o600 {
			t.Errorf("%s has mode %#o, want 0600", env.ConfigPath, perm)
		}
		waitLog(t, env, "the new configuration applied", "configuration applied",
			`"topology": "`+newTopology+`"`, fmt.Sprintf(`"heartbeat_interval": "%ds"`, newHeartbeatInterval))
	})

	t.Run("certificate rotation", func(t *testing.T) {
		if r := report.UpdateCert; r.Status != 202 || r.Body["message"] != "OK" {
			t.Errorf("update_cert_for_rotation answered %d %v, want 202 {message: OK}", r.Status, r.Body)
		}
		got, err := os.ReadFile(env.ServerCert)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, newServer.Combined()) {
			t.Errorf("%s is not the uploaded PEM", env.ServerCert)
		}
		if st, err := os.Stat(env.ServerCert); err != nil {
			t.Fatal(err)
		} else if perm := st.Mode().Perm(); perm != 0o600 {
			t.Errorf("%s has mode %#o, want 0600", env.ServerCert, perm)
		}
		var last *big.Int
		deadline := time.Now().Add(logWait)
		for {
			last = env.ServedCertificate().SerialNumber
			if last.Cmp(newSerial) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a new TLS connection still sees serial %x (old %x), want the rotated %x", last, oldSerial, newSerial)
			}
			time.Sleep(50 * time.Millisecond)
		}
		// A fresh controller client (new session, hostname = amphora id)
		// accepted the rotated certificate.
		info := decodeObject(t, "info after rotation", report.InfoAfterRotation)
		if info["api_version"] != "1.0" {
			t.Errorf("get_info after rotation = %v", info)
		}
	})

	t.Run("unknown path", func(t *testing.T) {
		u := report.UnknownPath
		if u.Raised == nil || *u.Raised != notFoundException {
			t.Errorf("GET 1.0/%s raised %v, want %s (status %d, content-type %q, body %s)",
				u.Path, ctrlutil.Deref(u.Raised), notFoundException, u.Status, u.ContentType, u.Body)
		}
		if u.Status != 404 || !strings.Contains(u.ContentType, "application/json") {
			t.Errorf("GET 1.0/%s: status %d content-type %q, want 404 application/json", u.Path, u.Status, u.ContentType)
		}
		if d := time.Duration(u.Seconds * float64(time.Second)); d >= unknownPathLimit {
			t.Errorf("the client needed %v to give up on an unknown path, want < %v (retried?)", d, unknownPathLimit)
		}
		path := "/1.0/" + u.Path
		if n := env.Count("\trequest\t", pathField(path)); n != 1 {
			t.Errorf("agent logged %d requests for %s, want exactly 1 (no retry)\n%s", n, path, requestLines(env))
		}
	})

	if t.Failed() {
		t.Logf("agent output:\n%s", env.Output())
	}
}

// runControllerClient runs controller_client.py and decodes its report.
func runControllerClient(t *testing.T, env *testenv.Env, script string, args ...string) (clientReport, string, time.Duration) {
	t.Helper()
	stdout, stderr, took := ctrlutil.RunControllerScript(t, env, script, args...)
	var report clientReport
	dec := json.NewDecoder(bytes.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&report); err != nil {
		t.Fatalf("controller client printed no valid report: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	return report, stderr, took
}

// checkDetails checks every key of GET /1.0/details (spec §2.3) and its
// JSON type, as the controller receives it.
func checkDetails(t *testing.T, raw json.RawMessage) {
	d := decodeObject(t, "details", raw)
	for k, typ := range map[string]string{
		"hostname": "string", "haproxy_version": "string", "api_version": "string",
		"keepalived_version": "string", "ipvsadm_version": "string",
		"networks": "object", "active": "bool", "haproxy_count": "int", "cpu_count": "int",
		"cpu": "object", "memory": "object", "disk": "object", "load": "array",
		"active_tuned_profiles": "string", "topology": "string", "topology_status": "string",
		"listeners": "array", "packages": "object", "lvs_listener_process_count": "int",
	} {
		wantType(t, "details", d, k, typ)
	}
	if d["active"] != true {
		t.Errorf("details active = %v, want true", d["active"])
	}
	if d["topology"] != "SINGLE" || d["topology_status"] != "OK" {
		t.Errorf("details topology %v / %v, want SINGLE / OK", d["topology"], d["topology_status"])
	}
	if p, ok := d["packages"].(map[string]any); ok && len(p) != 0 {
		t.Errorf("details packages = %v, want {}", p)
	}
	if cpu, ok := d["cpu"].(map[string]any); ok {
		wantType(t, "details.cpu", cpu, "total", "int")
		for _, k := range []string{"user", "system", "soft_irq"} {
			wantType(t, "details.cpu", cpu, k, "string")
		}
	}
	if mem, ok := d["memory"].(map[string]any); ok {
		for _, k := range []string{"total", "free", "buffers", "cached", "swap_used", "shared", "slab"} {
			wantType(t, "details.memory", mem, k, "int")
		}
		if total, ok := mem["total"].(json.Number); ok {
			// kB, not bytes: no machine running this has 1 TB of memory.
			if n, _ := total.Int64(); n <= 0 || n > 1<<30 {
				t.Errorf("details memory.total = %d, want kB", n)
			}
		}
	}
	if disk, ok := d["disk"].(map[string]any); ok {
		for _, k := range []string{"used", "available"} {
			wantType(t, "details.disk", disk, k, "int")
		}
	}
	if load, ok := d["load"].([]any); ok {
		if len(load) != 3 {
			t.Errorf("details load = %v, want 3 entries", load)
		}
		for i, v := range load {
			if _, ok := v.(string); !ok {
				t.Errorf("details load[%d] = %v (%T), want a string", i, v, v)
			}
		}
	}
	if listeners, ok := d["listeners"].([]any); ok {
		for i, v := range listeners {
			if _, ok := v.(string); !ok {
				t.Errorf("details listeners[%d] = %v (%T), want a string", i, v, v)
			}
		}
	}
	if nets, ok := d["networks"].(map[string]any); ok {
		for name, v := range nets {
			n, ok := v.(map[string]any)
			if !ok {
				t.Errorf("details networks[%s] = %v, want an object", name, v)
				continue
			}
			for _, k := range []string{"network_tx", "network_rx"} {
				wantType(t, "details.networks."+name, n, k, "int")
			}
		}
	}
}

func decodeObject(t *testing.T, what string, raw json.RawMessage) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil {
		t.Fatalf("%s is not a JSON object: %v: %s", what, err, raw)
	}
	return m
}

// wantType checks the JSON type of m[key]; numbers must be decoded with
// UseNumber, "int" means an integer literal.
func wantType(t *testing.T, what string, m map[string]any, key, typ string) {
	t.Helper()
	v, present := m[key]
	if !present {
		t.Errorf("%s has no %q", what, key)
		return
	}
	ok := false
	switch typ {
	case "string":
		_, ok = v.(string)
	case "bool":
		_, ok = v.(bool)
	case "object":
		_, ok = v.(map[string]any)
	case "array":
		_, ok = v.([]any)
	case "int":
		if n, isNum := v.(json.Number); isNum {
			_, err := strconv.ParseInt(n.String(), 10, 64)
			ok = err == nil
		}
	default:
		t.Fatalf("unknown type %q", typ)
	}
	if !ok {
		t.Errorf("%s %q = %v (%T), want JSON %s", what, key, v, v, typ)
	}
}

// pathField is how the access log's path field appears in a log line.
func pathField(path string) string { return `"path": "` + path + `"` }

func waitLog(t *testing.T, env *testenv.Env, what string, subs ...string) {
	t.Helper()
	deadline := time.Now().Add(logWait)
	for env.Count(subs...) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for the agent to log %s (%q)\n%s", logWait, what, subs, env.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func requestLines(env *testenv.Env) string {
	var b strings.Builder
	for _, line := range strings.Split(env.Output(), "\n") {
		if strings.Contains(line, "\trequest\t") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}
