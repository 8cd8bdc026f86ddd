//go:build system

package system_test

// The hostile-input suite: the real binary over mutual TLS, attacked
// the way a hostile tester would. Every case
// asserts the answer and that nothing the agent keeps on disk changed
// (a snapshot of the agent's whole folder: config, certificates,
// base_path, base_cert_dir, interface files). The slow uploader's effect
// on the mutation lock is also unit-tested in agent/api/slowbody_test.go.

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amphora-agent/amphora-agent/agent/health"
	"github.com/amphora-agent/amphora-agent/agent/health/healthtest"
	"github.com/amphora-agent/amphora-agent/agent/metrics"
	"github.com/amphora-agent/amphora-agent/agent/metrics/metricstest"
	"github.com/amphora-agent/amphora-agent/agent/status"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/hbutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/tiersutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/vrrputil"
	"github.com/amphora-agent/amphora-agent/haproxy/stats/haproxytest"
)

const (
	hostileLB    = "6a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	hostileLimit = 64 << 10 // max_upload_size of the suite's agent
	hostileRead  = 2        // agent_request_read_timeout: the request budget, seconds
)

// hostileRig is one agent holding a load balancer's config and a
// certificate, with files a traversal would aim at.
type hostileRig struct {
	t    *testing.T
	e    *testenv.Env
	base string
	cfg  string
}

// newHostileRig starts the agent with a request budget of readTimeout
// seconds.
func newHostileRig(t *testing.T, readTimeout int) *hostileRig {
	t.Helper()
	e := testenv.New(t)
	e.Extra = fmt.Sprintf("[amphora_agent]\nmax_upload_size = %d\nagent_request_read_timeout = %d\n", hostileLimit, readTimeout)
	e.Start()
	h := &hostileRig{t: t, e: e, base: e.Path("lib")}
	h.cfg = tiersutil.PlainLBConfig(h.base, hostileLB, "127.0.0.1:8081", "127.0.0.1:8443")
	if status, _, body := e.Do("PUT", "/1.0/loadbalancer/"+e.AmphoraID+"/"+hostileLB+"/haproxy", []byte(h.cfg)); status != 202 {
		t.Fatalf("upload: %d %s", status, body)
	}
	if status, _, body := e.Do("PUT", "/1.0/loadbalancer/"+hostileLB+"/certificates/x.pem", []byte("pem")); status != 200 {
		t.Fatalf("certificate upload: %d %s", status, body)
	}
	for _, p := range []string{"victim.pem", "lib/victim.pem", "lib/certs/victim.pem", "interfaces/eth9.json"} {
		if err := os.WriteFile(e.Path(p), []byte("kept: "+p), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// unchanged runs fn and fails the test if any file of the agent changed.
func (h *hostileRig) unchanged(what string, fn func()) {
	h.t.Helper()
	before := snapshot(h.t, h.e.Dir)
	fn()
	if diff := snapshotDiff(before, snapshot(h.t, h.e.Dir)); diff != "" {
		h.t.Errorf("%s changed the agent's files:\n%s", what, diff)
	}
}

// raw opens a mutual-TLS connection for hand-made requests.
func (h *hostileRig) raw() *tls.Conn {
	h.t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", h.e.Addr(), h.e.ClientTLS())
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c
}

// readAnswer reads one response from c within limit.
func readAnswer(c net.Conn, limit time.Duration) (*http.Response, []byte, error) {
	c.SetReadDeadline(time.Now().Add(limit))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

// isErrorShape reports whether body is one of the spec's two JSON error
// shapes.
func isErrorShape(body []byte) bool {
	var v map[string]any
	if json.Unmarshal(body, &v) != nil {
		return false
	}
	_, a := v["message"].(string)
	_, b := v["error"].(string)
	return a || b
}

// TestHostileTraversal sends path-traversal and otherwise unsafe ids and
// filenames to every route that takes one: each is refused or answered as
// unknown in JSON, never a 200 for a read, and no file changes.
func TestHostileTraversal(t *testing.T) {
	h := newHostileRig(t, hostileRead)
	e := h.e
	// (A backslash is an ordinary character on Linux: "..\x.pem" is a
	// file inside the load balancer's folder, not a traversal.)
	ids := []string{
		"..", ".", "...", "%2e%2e", "%2E%2E", "..%2f..", "%2e%2e%2f%2e%2e%2fvictim.pem", "..%2fvictim.pem",
		"%00", "x%00.pem", hostileLB + "%2f..", "~", "*", "-rf", "--help", "%0a",
		"certs", "vrrp", strings.Repeat("a", 300), strings.Repeat("a", 300) + ".pem", "%c0%ae%c0%ae",
	}
	routes := []struct{ method, path string }{
		{"PUT", "/1.0/loadbalancer/" + e.AmphoraID + "/{}/haproxy"},
		{"PUT", "/1.0/loadbalancer/{}/" + hostileLB + "/haproxy"},
		{"GET", "/1.0/loadbalancer/{}/haproxy"},
		{"PUT", "/1.0/loadbalancer/{}/start"},
		{"PUT", "/1.0/loadbalancer/{}/stop"},
		{"PUT", "/1.0/loadbalancer/{}/reload"},
		{"DELETE", "/1.0/listeners/{}"},
		{"PUT", "/1.0/loadbalancer/{}/certificates/x.pem"},
		{"GET", "/1.0/loadbalancer/{}/certificates/x.pem"},
		{"DELETE", "/1.0/loadbalancer/{}/certificates/x.pem"},
		{"PUT", "/1.0/loadbalancer/" + hostileLB + "/certificates/{}"},
		{"GET", "/1.0/loadbalancer/" + hostileLB + "/certificates/{}"},
		{"DELETE", "/1.0/loadbalancer/" + hostileLB + "/certificates/{}"},
		{"PUT", "/1.0/listeners/" + e.AmphoraID + "/{}/udp_listener"},
		{"GET", "/1.0/listeners/{}/udp_listener"},
		{"GET", "/1.0/interface/{}"},
		{"PUT", "/1.0/interface/{}/rules"},
		{"PUT", "/1.0/vrrp/{}"},
	}
	n := 0
	h.unchanged("traversal requests", func() {
		for _, r := range routes {
			for _, id := range ids {
				if (id == "certs" || id == "vrrp") && strings.HasSuffix(r.path, "/"+hostileLB+"/haproxy") {
					// Fine amphora ids: the upload would go through.
					continue
				}
				path := strings.ReplaceAll(r.path, "{}", id)
				var body []byte
				if r.method == "PUT" {
					body = []byte(h.cfg)
				}
				status, ctype, resp := e.Do(r.method, path, body)
				n++
				ok := status == 400 || status == 404 || status == 405 || (status == 200 && r.method == "DELETE")
				if !ok || ctype != "application/json" || !isErrorShape(resp) && status != 200 {
					t.Errorf("%s %s: %d %s %s", r.method, path, status, ctype, resp)
				}
			}
		}
	})
	t.Logf("%d traversal requests", n)
	// What the traversals aimed at is still served as before.
	if status, _, body := e.Do("GET", "/1.0/loadbalancer/"+hostileLB+"/certificates/x.pem", nil); status != 200 {
		t.Errorf("the load balancer's certificate after the traversals: %d %s", status, body)
	}
}

// TestHostileBodies: oversized (announced or not), slow, endless and
// truncated bodies are each answered 400 in JSON within the request
// budget, and change nothing; a slow uploader holds up no other mutation.
func TestHostileBodies(t *testing.T) {
	h := newHostileRig(t, hostileRead)
	e := h.e
	budget := hostileRead * time.Second
	uploads := []string{
		"/1.0/config", "/1.0/certificate", "/1.0/loadbalancer/" + e.AmphoraID + "/" + hostileLB + "/haproxy",
		"/1.0/loadbalancer/" + hostileLB + "/certificates/x.pem", "/1.0/vrrp/upload",
	}
	big := bytes.Repeat([]byte("A"), hostileLimit+1)
	h.unchanged("oversized bodies", func() {
		for _, path := range uploads {
			// Announced with Content-Length, and sent chunked.
			status, ctype, resp := e.Do("PUT", path, big)
			if status != 400 || ctype != "application/json" || !strings.Contains(string(resp), "Request body too large") {
				t.Errorf("PUT %s with %d bytes: %d %s %s", path, len(big), status, ctype, resp)
			}
			req, _ := http.NewRequest("PUT", e.URL(path), io.MultiReader(bytes.NewReader(big)))
			res, err := e.Client().Do(req)
			if err != nil {
				t.Fatalf("chunked PUT %s: %v", path, err)
			}
			answer, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 400 || !strings.Contains(string(answer), "Request body too large") {
				t.Errorf("chunked PUT %s with %d bytes: %d %s", path, len(big), res.StatusCode, answer)
			}
		}
	})

	for _, path := range uploads {
		h.unchanged("a slow body to "+path, func() {
			slow := h.raw()
			fmt.Fprintf(slow, "PUT %s HTTP/1.1\r\nHost: amp\r\nContent-Length: 1000\r\n\r\n0123456789", path)
			// Meanwhile another mutation goes through at once.
			start := time.Now()
			if status, _, body := e.Do("DELETE", "/1.0/listeners/unknown", nil); status != 200 || time.Since(start) > budget/2 {
				t.Errorf("a mutation behind a slow upload: %d %s after %v", status, body, time.Since(start))
			}
			resp, body, err := readAnswer(slow, budget+5*time.Second)
			if err != nil || resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "application/json" || !isErrorShape(body) {
				t.Errorf("slow body to %s: %v %v %s", path, resp, err, body)
			}
		})
	}

	h.unchanged("an endless body", func() {
		endless := h.raw()
		fmt.Fprintf(endless, "PUT /1.0/config HTTP/1.1\r\nHost: amp\r\nTransfer-Encoding: chunked\r\n\r\n")
		stop := make(chan struct{})
		var writer sync.WaitGroup
		writer.Add(1)
		go func() {
			defer writer.Done()
			chunk := []byte(fmt.Sprintf("%x\r\n%s\r\n", 4096, bytes.Repeat([]byte("B"), 4096)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				endless.SetWriteDeadline(time.Now().Add(time.Second))
				if _, err := endless.Write(chunk); err != nil && !isTimeoutErr(err) {
					return
				}
			}
		}()
		start := time.Now()
		resp, body, err := readAnswer(endless, budget+5*time.Second)
		close(stop)
		endless.Close()
		writer.Wait()
		if err != nil || resp.StatusCode != 400 || !strings.Contains(string(body), "Request body too large") {
			t.Errorf("endless body: %v %v %s after %v", resp, err, body, time.Since(start))
		}
	})

	h.unchanged("a body shorter than announced", func() {
		short := h.raw()
		fmt.Fprintf(short, "PUT /1.0/certificate HTTP/1.1\r\nHost: amp\r\nContent-Length: 1000\r\n\r\n0123456789")
		short.CloseWrite()
		resp, body, err := readAnswer(short, budget+5*time.Second)
		if err != nil || resp.StatusCode != 400 || !isErrorShape(body) {
			t.Errorf("truncated body: %v %v %s", resp, err, body)
		}
	})
}

func isTimeoutErr(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestHostileJSON: bodies of the JSON endpoints that are no JSON, the
// wrong JSON, or JSON with addresses that do not fit together are 400s
// in the spec's shapes (naming the field where the agent adds a check),
// and change nothing.
func TestHostileJSON(t *testing.T) {
	h := newHostileRig(t, hostileRead)
	e := h.e
	bad := []string{
		"", "{", "}", "[]", "null", "true", `"text"`, "0", "1e999", "{\"subnet_cidr\": 5}", "\xff\xfe{}",
		strings.Repeat("[", 100000) + strings.Repeat("]", 100000), `{"a":` + strings.Repeat(`{"a":`, 5000) + "1" + strings.Repeat("}", 5001),
		`{"mac_address": "fa:16:3e:00:00:01", "fixed_ips": "x"}`, `{"mac_address": ["x"]}`,
	}
	routes := []string{"POST /1.0/plug/vip/203.0.113.10", "POST /1.0/plug/network", "PUT /1.0/interface/203.0.113.10/rules"}
	h.unchanged("malformed JSON", func() {
		for _, route := range routes {
			method, path, _ := strings.Cut(route, " ")
			for _, body := range bad {
				status, ctype, resp := e.Do(method, path, []byte(body))
				// The rules route looks the address up first: 404.
				if (status != 400 && status != 404) || ctype != "application/json" || !isErrorShape(resp) {
					t.Errorf("%s %.40q: %d %s %s", route, body, status, ctype, resp)
				}
			}
		}
	})
	vip := func(extra string) string {
		return `{"subnet_cidr": "203.0.113.0/24", "gateway": "203.0.113.1", "mac_address": "fa:16:3e:00:00:01"` + extra + "}"
	}
	fields := []struct{ path, body, names string }{
		{"/1.0/plug/vip/198.51.100.10", vip(""), "is not in subnet"},
		{"/1.0/plug/vip/203.0.113.10", vip(`, "vrrp_ip": "2001:db8::4"`), "vrrp_ip"},
		{"/1.0/plug/vip/203.0.113.10", vip(`, "host_routes": [{"destination": "nowhere", "nexthop": "203.0.113.5"}]`), "host_routes[0].destination"},
		{"/1.0/plug/vip/203.0.113.10", vip(`, "host_routes": [{"destination": "198.51.100.0/24", "nexthop": "x"}]`), "host_routes[0].nexthop"},
		{"/1.0/plug/network", `{"mac_address": "fa:16:3e:00:00:02", "fixed_ips": [{"ip_address": "198.51.100.5", "subnet_cidr": "198.51.100.0/24",
			"host_routes": [{"destination": "10.0.0.0/8", "nexthop": "2001:db8::1"}]}]}`, "fixed_ips[0].host_routes[0].nexthop"},
	}
	h.unchanged("plug requests with mismatched addresses", func() {
		for _, f := range fields {
			status, _, resp := e.Do("POST", f.path, []byte(f.body))
			if status != 400 || !strings.Contains(string(resp), f.names) {
				t.Errorf("POST %s %s: %d %s (want 400 naming %s)", f.path, f.body, status, resp, f.names)
			}
		}
	})
}

// TestHostileHTTP: requests net/http cannot read (a broken request line,
// a header block over the 64 KiB limit, no Host, an unknown transfer
// encoding) get the spec's JSON error shape like every other error.
func TestHostileHTTP(t *testing.T) {
	h := newHostileRig(t, hostileRead)
	cases := []struct {
		name, request string
		status        int
	}{
		{"broken request line", "GARBAGE\r\n\r\n", 400},
		{"request line without version", "GET /\r\n\r\n", 400},
		{"no Host", "GET / HTTP/1.1\r\n\r\n", 400},
		{"header over the limit", "GET / HTTP/1.1\r\nHost: amp\r\nX-Big: " + strings.Repeat("x", 70<<10) + "\r\n\r\n", 431},
		{"unknown transfer encoding", "PUT /1.0/config HTTP/1.1\r\nHost: amp\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
		{"header without colon", "GET / HTTP/1.1\r\nHost: amp\r\nnonsense\r\n\r\n", 400},
		// The preface reaches the router as a request for "*".
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 404},
		{"HTTP/2.0 request", "GET / HTTP/2.0\r\nHost: amp\r\n\r\n", 505},
		{"unknown expectation", "PUT /1.0/config HTTP/1.1\r\nHost: amp\r\nExpect: magic\r\nContent-Length: 1\r\n\r\nx", 417},
		{"two lengths", "PUT /1.0/config HTTP/1.1\r\nHost: amp\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy", 400},
	}
	h.unchanged("unreadable requests", func() {
		for _, c := range cases {
			conn := h.raw()
			conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(conn, c.request)
			resp, body, err := readAnswer(conn, 10*time.Second)
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
				continue
			}
			var shape struct {
				Error    string `json:"error"`
				HTTPCode int    `json:"http_code"`
			}
			if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != "application/json" ||
				json.Unmarshal(body, &shape) != nil || shape.HTTPCode != c.status ||
				!strings.HasPrefix(shape.Error, fmt.Sprintf("%d %s: ", c.status, http.StatusText(c.status))) {
				t.Errorf("%s: %d %q %s", c.name, resp.StatusCode, resp.Header.Get("Content-Type"), body)
			}
		}
	})
}

// TestHostileConcurrency: 20 uploads of different configs and 20 of
// different certificate bodies to the same names at once, with deletes of
// reserved ids among them. Every stored file is exactly one of the
// uploads (never torn), the certificate's md5 matches its file, no
// temporary file stays, and nothing else changes.
func TestHostileConcurrency(t *testing.T) {
	h := newHostileRig(t, 60)
	e := h.e
	const n = 20
	configs, certBodies := make([]string, n), make([]string, n)
	for i := range configs {
		configs[i] = h.cfg + fmt.Sprintf("# generation %d\n%s", i, strings.Repeat("#\n", i*100))
		certBodies[i] = fmt.Sprintf("certificate %d\n%s", i, strings.Repeat("c", i*1000))
	}
	cfgPath := filepath.Join(h.base, hostileLB, "haproxy.cfg")
	certPath := filepath.Join(h.base, "certs", hostileLB, "x.pem")
	before := snapshot(t, e.Dir)
	var wg sync.WaitGroup
	errs := make(chan string, 3*n)
	for i := 0; i < n; i++ {
		wg.Add(3)
		go func(i int) {
			defer wg.Done()
			if status, _, body := e.Do("PUT", "/1.0/loadbalancer/"+e.AmphoraID+"/"+hostileLB+"/haproxy", []byte(configs[i])); status != 202 {
				errs <- fmt.Sprintf("upload %d: %d %s", i, status, body)
			}
		}(i)
		go func(i int) {
			defer wg.Done()
			if status, _, body := e.Do("PUT", "/1.0/loadbalancer/"+hostileLB+"/certificates/x.pem", []byte(certBodies[i])); status != 200 {
				errs <- fmt.Sprintf("certificate %d: %d %s", i, status, body)
			}
		}(i)
		go func(i int) {
			defer wg.Done()
			id := []string{"vrrp", "certs", "lvs", "unknown"}[i%4]
			if status, _, body := e.Do("DELETE", "/1.0/listeners/"+id, nil); status != 200 {
				errs <- fmt.Sprintf("delete %s: %d %s", id, status, body)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Error(msg)
	}
	stored, _ := os.ReadFile(cfgPath)
	if !slices.Contains(configs, string(stored)) {
		t.Errorf("stored config is none of the uploads (%d bytes)", len(stored))
	}
	cert, _ := os.ReadFile(certPath)
	if !slices.Contains(certBodies, string(cert)) {
		t.Errorf("stored certificate is none of the uploads (%d bytes)", len(cert))
	}
	if status, _, body := e.Do("GET", "/1.0/loadbalancer/"+hostileLB+"/certificates/x.pem", nil); status != 200 ||
		!strings.Contains(string(body), tiersutil.MD5Hex(cert)) {
		t.Errorf("certificate md5 after the race: %d %s", status, body)
	}
	// Only the two target files may differ.
	after := snapshot(t, e.Dir)
	for _, line := range strings.Split(snapshotDiff(before, after), "\n") {
		if line != "" && !strings.HasPrefix(line, "~ /lib/"+hostileLB+"/haproxy.cfg ") && !strings.HasPrefix(line, "~ /lib/certs/"+hostileLB+"/x.pem ") {
			t.Errorf("changed by the race: %s", line)
		}
	}
}

// TestReservedIDsChangeNothing sends the agent's own names under base_path
// as load balancer ids, over mutual TLS to the real binary: every upload
// is refused with a 400 in the spec's shape, every delete and action gets
// the unknown-id answer, and no file under base_path changes. A real
// delete afterwards removes only that load balancer's files.
func TestReservedIDsChangeNothing(t *testing.T) {
	e := testenv.New(t)
	e.Start()
	const lb = "5b6c3d0e-7f1a-4b2c-9d3e-0f1a2b3c4d5e"
	base := e.Path("lib")
	cfg := []byte(tiersutil.PlainLBConfig(base, lb, "127.0.0.1:8081", "127.0.0.1:8443"))
	if status, _, body := e.Do("PUT", "/1.0/loadbalancer/"+e.AmphoraID+"/"+lb+"/haproxy", cfg); status != 202 {
		t.Fatalf("upload %s: %d %s", lb, status, body)
	}
	if status, _, body := e.Do("PUT", "/1.0/loadbalancer/"+lb+"/certificates/x.pem", []byte("pem")); status != 200 {
		t.Fatalf("certificate upload: %d %s", status, body)
	}
	// Stand-ins for what VRRP, LVS, the network calls and the heartbeat
	// keep under base_path, and a folder that is no load balancer.
	for _, p := range []string{
		"vrrp/octavia-keepalived.conf", "vrrp/agent-state.json", "vrrp/check_script.sh",
		"vrrp/check_scripts/haproxy_check_script.sh", "lvs/octavia-keepalivedlvs-l1.conf",
		"plugged_interfaces", "nftables-vip.rules", "stats_counters.json", "stray/notes",
	} {
		path := filepath.Join(base, p)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("kept: "+p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := snapshot(t, base)

	reserved := []string{"vrrp", "lvs", "certs", "plugged_interfaces"}
	// Names with a dot never pass the id pattern; they are answered alike.
	dotted := []string{lb + ".sock", "stats_counters.json", "nftables-vip.rules", "haproxy-default-user-group.conf"}
	for _, id := range append(append([]string{}, reserved...), dotted...) {
		status, ctype, body := e.Do("PUT", "/1.0/loadbalancer/"+e.AmphoraID+"/"+id+"/haproxy", cfg)
		var answer struct{ Message, Details string }
		if err := json.Unmarshal(body, &answer); err != nil || status != 400 || ctype != "application/json" || answer.Message != "Invalid request" ||
			!strings.Contains(answer.Details, `"`+id+`"`) {
			t.Errorf("upload %s: %d %s %s", id, status, ctype, body)
		}
		if !strings.Contains(id, ".") && !strings.Contains(answer.Details, "is reserved") {
			t.Errorf("upload %s: %s does not say the id is reserved", id, body)
		}
		if status, _, body := e.Do("PUT", "/1.0/loadbalancer/"+id+"/certificates/x.pem", []byte("pem")); status != 400 {
			t.Errorf("certificate upload for %s: %d %s", id, status, body)
		}
		if status, _, body := e.Do("DELETE", "/1.0/listeners/"+id, nil); status != 200 || string(body) != `{"message":"OK"}` {
			t.Errorf("delete %s: %d %s", id, status, body)
		}
		notFound := `{"message":"Loadbalancer Not Found","details":"No loadbalancer with UUID: ` + id + `"}`
		for _, action := range []string{"start", "stop", "reload"} {
			if status, _, body := e.Do("PUT", "/1.0/loadbalancer/"+id+"/"+action, nil); status != 404 || string(body) != notFound {
				t.Errorf("%s %s: %d %s", action, id, status, body)
			}
		}
		if status, _, body := e.Do("GET", "/1.0/loadbalancer/"+id+"/haproxy", nil); status != 404 || string(body) != notFound {
			t.Errorf("config of %s: %d %s", id, status, body)
		}
	}
	for _, id := range []string{"stray", "unknown"} {
		if status, _, body := e.Do("DELETE", "/1.0/listeners/"+id, nil); status != 200 || string(body) != `{"message":"OK"}` {
			t.Errorf("delete %s: %d %s", id, status, body)
		}
	}
	if diff := snapshotDiff(before, snapshot(t, base)); diff != "" {
		t.Fatalf("base_path changed:\n%s", diff)
	}

	// The load balancer itself goes, with its certificates, and nothing else.
	if status, _, body := e.Do("DELETE", "/1.0/listeners/"+lb, nil); status != 200 {
		t.Fatalf("delete %s: %d %s", lb, status, body)
	}
	for _, p := range []string{filepath.Join(base, lb), filepath.Join(base, "certs", lb)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after delete: %v", p, err)
		}
	}
	// With vrrp/check_script.sh present VRRP is in use, so the HAProxy
	// check is refreshed without the deleted load balancer.
	check := "/vrrp/check_scripts/haproxy_check_script.sh"
	if got, err := os.ReadFile(filepath.Join(base, check)); err != nil || string(got) != "haproxy-vrrp-check ; exit $?" {
		t.Errorf("check script after the delete: %q %v", got, err)
	}
	var lines []string
	for _, l := range strings.Split(snapshotDiff(before, snapshot(t, base)), "\n") {
		if l != "" && !strings.HasPrefix(l, "- /"+lb) && !strings.HasPrefix(l, "- /certs/"+lb) && !strings.HasPrefix(l, "~ "+check+" ") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 0 {
		t.Fatalf("deleting %s changed more than its files:\n%s", lb, strings.Join(lines, "\n"))
	}
}

// controllerHandshake connects to the agent the way the controller does
// (Python's ssl with the controller's certificate, checking the server
// against the CA and the amphora id) and asks GET /1.0/info; it returns
// the status line, or Python's error.
func controllerHandshake(t *testing.T, e *testenv.Env) string {
	t.Helper()
	const script = `
import socket, ssl, sys
ca, client, port, host = sys.argv[1:5]
ctx = ssl.create_default_context(cafile=ca)
ctx.load_cert_chain(client)
try:
    with socket.create_connection(("127.0.0.1", int(port)), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=host) as s:
            s.sendall(b"GET /1.0/info HTTP/1.1\r\nHost: amphora\r\nConnection: close\r\n\r\n")
            print(s.makefile("rb").readline().decode().strip())
except Exception as err:
    print("error:", err)
`
	out, err := exec.Command("/usr/bin/python3", "-c", script, e.CAFile, e.ClientCert, fmt.Sprint(e.Port), e.AmphoraID).CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// A rotation to a chain no TLS client takes (300 copies of the
// certificate: 172 KB of PEM, a Certificate message over OpenSSL's
// 100 KiB) is refused, the old certificate stays in force, and the
// controller's Python client still connects. Without
// the check it was answered 202 and every handshake after it failed with
// EXCESSIVE_MESSAGE_SIZE.
func TestHostileCertificateChain(t *testing.T) {
	e := testenv.New(t)
	e.Start()
	if got := controllerHandshake(t, e); got != "HTTP/1.1 200 OK" {
		t.Fatalf("the controller before any rotation: %s", got)
	}
	before, err := os.ReadFile(e.ServerCert)
	if err != nil {
		t.Fatal(err)
	}
	serial := e.ServedCertificate().SerialNumber
	next, err := e.CA.Server(e.AmphoraID)
	if err != nil {
		t.Fatal(err)
	}
	chain := append(bytes.Repeat(next.CertPEM, 300), next.KeyPEM...)
	status, ctype, resp := e.Do("PUT", "/1.0/certificate", chain)
	if status != 400 || ctype != "application/json" || !strings.Contains(string(resp), `"message":"Invalid certificate"`) ||
		!strings.Contains(string(resp), "300 certificates") {
		t.Errorf("a chain of 300 copies (%d bytes): %d %s %s", len(chain), status, ctype, resp)
	}
	if now, _ := os.ReadFile(e.ServerCert); !bytes.Equal(now, before) {
		t.Error("the refused chain replaced the server certificate file")
	}
	if got := controllerHandshake(t, e); got != "HTTP/1.1 200 OK" {
		t.Errorf("the controller after the refused chain: %s", got)
	}
	if got := e.ServedCertificate().SerialNumber; got.Cmp(serial) != 0 {
		t.Errorf("serving serial %s after the refused chain, want the old %s", got, serial)
	}
	// A rotation as the controller sends it still goes through.
	if status, _, resp := e.Do("PUT", "/1.0/certificate", next.Combined()); status != 202 {
		t.Fatalf("a rotation as the controller sends it: %d %s", status, resp)
	}
	if got := controllerHandshake(t, e); got != "HTTP/1.1 200 OK" {
		t.Errorf("the controller after the rotation: %s", got)
	}
}

// An uploaded keepalived config that includes another file (the amphora's
// secrets: /etc/shadow, the listeners' keys) is refused, and neither the
// answer nor the agent's log quotes that file: keepalived -t names every
// line it does not understand, and an included file's lines are keywords
// to it. Also when the include is assembled from
// keepalived's parameter definitions, which no line-by-line look at the
// upload sees. The uploads the controller sends are still accepted.
func TestHostileKeepalivedInclude(t *testing.T) {
	e := testenv.New(t)
	e.Start()
	const marker = "MARKER-f0e1d2c3-do-not-echo"
	const includeLVS = "c3d4e5f6-0a1b-4c2d-8e3f-4a5b6c7d8e9f"
	secret := filepath.Join(t.TempDir(), "secret")
	// Unpaired braces in the secret made main refuse with keepalived's
	// output in the answer; paired ones stored it with the output logged.
	for _, content := range []string{marker + " hunter2\n}\n", marker + " hunter2\n"} {
		if err := os.WriteFile(secret, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		vrrp := (&vrrputil.Amp{Env: e, Priority: 100, Addr: "203.0.113.7"}).Config("203.0.113.8")
		lvs := lvsConfig(e, includeLVS)
		for _, up := range []struct{ name, path, body string }{
			{"VRRP, include", "/1.0/vrrp/upload", vrrp + "include " + secret + "\n"},
			{"VRRP, include in a block", "/1.0/vrrp/upload", strings.Replace(vrrp, "    nopreempt\n", "    nopreempt\n    include "+secret+"\n", 1)},
			{"VRRP, include built from definitions", "/1.0/vrrp/upload", "$A=inc\n$B=lude\n" + vrrp + "${A}${B} " + secret + "\n"},
			{"LVS, include", "/1.0/listeners/" + e.AmphoraID + "/" + includeLVS + "/udp_listener", lvs + "include " + secret + "\n"},
			{"LVS, includer with a condition", "/1.0/listeners/" + e.AmphoraID + "/" + includeLVS + "/udp_listener", "@^nohost includer " + secret + "\n" + lvs},
		} {
			status, _, resp := e.Do("PUT", up.path, []byte(up.body))
			if status != 400 || !strings.Contains(string(resp), `"message":"Invalid request"`) || strings.Contains(string(resp), marker) {
				t.Errorf("%s (%q): %d %s", up.name, content, status, resp)
			}
			if !strings.Contains(string(resp), "include") {
				t.Errorf("%s: the answer does not name the include: %s", up.name, resp)
			}
		}
	}
	if strings.Contains(e.Output(), marker) {
		t.Errorf("the agent's log quotes the included file:\n%s", e.Output())
	}
	for _, p := range []string{"vrrp/octavia-keepalived.conf", "lvs/octavia-keepalivedlvs-" + includeLVS + ".conf"} {
		if _, err := os.Stat(e.Path("lib", p)); !os.IsNotExist(err) {
			t.Errorf("%s stored: %v", p, err)
		}
	}
	// The controller's own uploads are accepted.
	vrrp := (&vrrputil.Amp{Env: e, Priority: 100, Addr: "203.0.113.7"}).Config("203.0.113.8")
	if status, _, resp := e.Do("PUT", "/1.0/vrrp/upload", []byte(vrrp)); status != 200 {
		t.Errorf("the controller's VRRP config: %d %s", status, resp)
	}
	if status, _, resp := e.Do("PUT", "/1.0/listeners/"+e.AmphoraID+"/"+includeLVS+"/udp_listener", []byte(lvsConfig(e, includeLVS))); status != 200 {
		t.Errorf("the controller's LVS config: %d %s", status, resp)
	}
}

// The status socket outlives a spell without file descriptors: the agent's limit is lowered to the three standard streams and
// a `status` connection and an API connection arrive, so that both
// accepts fail with EMFILE; once the limit is back, the waiting status
// connection is answered, the socket is the same one, `status` says
// running (exit 0), and the API serves.
func TestHostileStatusSocketSurvivesEMFILE(t *testing.T) {
	topo.RequireRoot(t) // to lower another process's limit
	e := testenv.New(t)
	e.Start()
	sock := filepath.Join(e.Path("lib"), status.SocketName)
	before, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	runStatusCmd(t, e)

	var limit unix.Rlimit
	if err := unix.Prlimit(e.Pid(), unix.RLIMIT_NOFILE, nil, &limit); err != nil {
		t.Fatal(err)
	}
	restore := sync.OnceFunc(func() {
		if err := unix.Prlimit(e.Pid(), unix.RLIMIT_NOFILE, &limit, nil); err != nil {
			t.Errorf("restoring the agent's open-file limit: %v", err)
		}
	})
	t.Cleanup(restore)
	if err := unix.Prlimit(e.Pid(), unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 3, Max: limit.Max}, nil); err != nil {
		t.Fatal(err)
	}
	asking, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer asking.Close()
	api, err := net.Dial("tcp", e.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	testenv.WaitFor(t, 10*time.Second, "both accepts failing with EMFILE", func() bool {
		return e.Count("accept unix", "too many open files") > 0 && e.Count("accept tcp", "too many open files") > 0
	})
	restore()

	asking.SetReadDeadline(time.Now().Add(10 * time.Second))
	var live status.Live
	if err := json.NewDecoder(asking).Decode(&live); err != nil || live.Pid != e.Pid() {
		t.Fatalf("the status connection made during EMFILE got %+v, %v\n%s", live, err, e.Output())
	}
	after, err := os.Stat(sock)
	if err != nil || !os.SameFile(before, after) {
		t.Fatalf("status socket after EMFILE: %v (same file: %v)", err, err == nil && os.SameFile(before, after))
	}
	if r := statusJSON(t, e); !r.Agent.Running || r.Agent.State != status.AgentRunning || r.Agent.Pid != e.Pid() {
		t.Fatalf("status after EMFILE: %+v", r.Agent)
	}
	testenv.WaitFor(t, 10*time.Second, "the API serving again", func() bool {
		code, _, _ := e.Do("GET", "/1.0/info", nil)
		return code == 200
	})
	t.Logf("failed accepts logged: status socket %d, API %d",
		e.Count("accept unix", "too many open files"), e.Count("accept tcp", "too many open files"))
}

// `status` run by a user who may not open the agent's socket says that
// the agent's state is unknown, and why, instead of taking the running
// agent for a stopped one; it exits with status 4, not 3.
func TestHostileStatusWithoutPermission(t *testing.T) {
	topo.RequireRoot(t) // to become nobody
	const nobody = 65534
	e := testenv.New(t)
	e.Start()
	// nobody needs to read the configuration and run the binary; the
	// socket stays root's (0600).
	cfg := e.Path("nobody.conf")
	if err := os.WriteFile(cfg, []byte(e.Config()), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := e.Path("amphora-agent")
	if data, err := os.ReadFile(testenv.Binary(t)); err != nil || os.WriteFile(bin, data, 0o755) != nil {
		t.Fatalf("copying the binary: %v", err)
	}
	run := func(args ...string) (string, int) {
		cmd := exec.Command(bin, append([]string{"status", "--config-file", cfg}, args...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, _ := cmd.Output()
		t.Logf("status %v as nobody: exit status %d\n%s%s", args, cmd.ProcessState.ExitCode(), out, stderr.String())
		return string(out), cmd.ProcessState.ExitCode()
	}
	text, code := run()
	headline, _, _ := strings.Cut(text, "\n")
	if code != 4 || !strings.Contains(headline, "STATE UNKNOWN") || !strings.Contains(headline, "permission denied") ||
		strings.Contains(text, "NOT RUNNING") {
		t.Errorf("status as nobody: exit status %d, headline %q", code, headline)
	}
	out, code := run("--json")
	var r status.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 4 || r.Agent.State != status.AgentUnknown ||
		!strings.Contains(r.Agent.StateReason, "permission denied") {
		t.Errorf("status --json as nobody: exit status %d, agent %+v (%v)", code, r.Agent, err)
	}
	// root still gets the answer.
	if r := statusJSON(t, e); r.Agent.State != status.AgentRunning {
		t.Errorf("status as root: %+v", r.Agent)
	}
}

// One agent per state folder. With agent A running a
// load balancer and sending heartbeats, agent B is started on the same
// configuration, once as it is (the same port) and once with another
// port: B exits with status 1 and one line naming the folder and A's pid;
// it changed nothing (A's files and status socket are the same, `status`
// answers), sent no heartbeat (every datagram the receiver got meanwhile
// is A's: never seq 0, always the listener) and started no HAProxy (one
// master). Then A restarts while HAProxy keeps running, which holds
// nothing of the lock: the new A takes the lock, adopts HAProxy and
// serves.
func TestHostileSecondAgentChangesNothing(t *testing.T) {
	_, hm, env, _ := startHBLoadBalancer(t, "two", 1)
	base := env.Path("lib")
	key := "insecure"
	hm.WaitFor(hbutil.Wait, key, "A's heartbeat with the listener", func(m health.Message) bool {
		_, ok := m.Listeners[hbutil.Listener]
		return ok && m.Seq > 0
	})
	sock := filepath.Join(base, status.SocketName)
	sockBefore, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	masters := haproxyMastersOf(t, base)
	if len(masters) != 1 {
		t.Fatalf("HAProxy masters before the second agent: %v", masters)
	}
	otherPort := env.Path("other-port.conf")
	if err := os.WriteFile(otherPort, []byte(fmt.Sprintf("[haproxy_amphora]\nbind_port = %d\n", haproxytest.FreePort(t))), 0o600); err != nil {
		t.Fatal(err)
	}
	filesBefore := snapshot(t, env.Dir)
	for _, tc := range []struct {
		name  string
		files []string
	}{
		{"same port", []string{env.ConfigPath}},
		{"other port", []string{env.ConfigPath, otherPort}},
	} {
		out, code := runSecondAgent(t, tc.files)
		t.Logf("second agent, %s: exit status %d, output %q", tc.name, code, headOf(out, 500))
		want := fmt.Sprintf("amphora-agent: another agent (pid %d) already runs on the state folder %s (it holds %s); not starting a second one\n",
			env.Pid(), base, filepath.Join(base, "amphora-agent.lock"))
		if code != 1 || out != want {
			t.Errorf("second agent, %s: exit status %d; want 1 and the output %q", tc.name, code, want)
		}
	}

	// Every heartbeat from B's start on is A's, up to one A sent after
	// B ended (it comes after anything B sent).
	r := statusJSON(t, env)
	if r.Agent.Pid != env.Pid() || len(r.LoadBalancers) != 1 || !r.LoadBalancers[0].Running {
		t.Errorf("status after the second agent: %+v", r.Agent)
	}
	for seq := uint64(0); seq <= r.Heartbeat.Seq; {
		d := hm.Next(time.Now().Add(hbutil.Wait))
		if d == nil {
			t.Fatalf("no heartbeat after seq %d within %v", seq, hbutil.Wait)
		}
		m, err := healthtest.Decode[health.Message](d, key)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := m.Listeners[hbutil.Listener]; m.Seq == 0 || !ok {
			t.Fatalf("a heartbeat that is not A's arrived: %+v", m)
		}
		seq = m.Seq
	}
	if got := haproxyMastersOf(t, base); !slices.Equal(got, masters) {
		t.Errorf("HAProxy masters after the second agent: %v, before %v", got, masters)
	}
	// HAProxy's output files grow on their own.
	for _, l := range strings.Split(snapshotDiff(filesBefore, snapshot(t, env.Dir)), "\n") {
		// "~ /path before => after", "+ /path what", "- /path what"
		if f := strings.Fields(l); len(f) > 1 && !strings.HasSuffix(f[1], ".log") {
			t.Errorf("the second agent changed a file: %s", l)
		}
	}
	if sockAfter, err := os.Stat(sock); err != nil || !os.SameFile(sockBefore, sockAfter) {
		t.Errorf("status socket after the second agent: %v", err)
	}

	// A restarts; HAProxy runs on and does not hold the lock file.
	env.Stop()
	for _, fd := range openFiles(masters[0]) {
		if strings.HasSuffix(fd, "amphora-agent.lock") {
			t.Fatalf("HAProxy %d holds the lock file: %v", masters[0], fd)
		}
	}
	env.Start()
	testenv.WaitFor(t, 10*time.Second, "the restarted agent adopting HAProxy", func() bool {
		return env.Count("adopted running HAProxy") >= 1
	})
	if got := haproxyMastersOf(t, base); !slices.Equal(got, masters) {
		t.Errorf("HAProxy masters after the restart: %v, before %v", got, masters)
	}
	if r := statusJSON(t, env); r.Agent.Pid != env.Pid() {
		t.Errorf("status after the restart: %+v", r.Agent)
	}
	if held, _ := os.ReadFile(filepath.Join(base, "amphora-agent.lock")); string(held) != fmt.Sprintf("%d\n", env.Pid()) {
		t.Errorf("lock file after the restart holds %q, want the new agent's pid %d", held, env.Pid())
	}
}

// runSecondAgent runs the agent with files and returns its output and
// exit status; one still running after 15 s is killed (with its process
// group) and reported.
func runSecondAgent(t *testing.T, files []string) (string, int) {
	t.Helper()
	var args []string
	for _, f := range files {
		args = append(args, "--config-file", f)
	}
	cmd := exec.Command(testenv.Binary(t), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET=", "WATCHDOG_USEC=", "WATCHDOG_PID=")
	var out testenv.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		t.Errorf("the second agent was still running after 15 s")
	}
	return out.String(), cmd.ProcessState.ExitCode()
}

// headOf is s cut to n bytes at most.
func headOf(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// haproxyMastersOf lists the HAProxy masters whose pid file is under
// base: HAProxy processes naming base whose parent is no HAProxy.
func haproxyMastersOf(t *testing.T, base string) []int {
	t.Helper()
	procs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var masters []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || !tiersutil.IsHAProxy(pid) {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		i := bytes.LastIndexByte(stat, ')')
		if !bytes.Contains(cmdline, []byte(base+"/")) || i < 0 {
			continue
		}
		// pid (comm) state ppid ...
		fields := strings.Fields(string(stat[i+1:]))
		if ppid, err := strconv.Atoi(fields[1]); err == nil && !tiersutil.IsHAProxy(ppid) {
			masters = append(masters, pid)
		}
	}
	slices.Sort(masters)
	return masters
}

// openFiles lists what pid's file descriptors point to.
func openFiles(pid int) []string {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, _ := os.ReadDir(dir)
	var targets []string
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil {
			targets = append(targets, target)
		}
	}
	return targets
}

// Bounds of the scrape floods.
const (
	// scrapeFloodThreads bounds the agent's OS threads during a flood;
	// idle it has about 8.
	scrapeFloodThreads = 20
	// scrapeFloodFDs bounds its open descriptors: the endpoint's
	// connections, one to the exporter per scrape in flight, and the
	// agent's own.
	scrapeFloodFDs = metrics.MaxConns + metrics.MaxScrapes + 64
	// scrapeFloodSettled is how close to its idle size the agent must
	// come back after a flood, and within how long: the runtime keeps
	// about 3 MB of a burst for good (its own structures, fragmented
	// spans), against 35 to 57 MB kept by the code before.
	scrapeFloodSettled   = 6 << 20
	scrapeFloodSettleFor = 30 * time.Second
)

// TestHostileScrapeFlood: 2,000 scrapes at once of the metrics endpoint
// while HAProxy's exporter answers, and 6,000 while it accepts and never
// answers, each from a client process of its own in the namespace (so
// that its sockets do not count against this process). The agent's
// threads and descriptors stay bounded, it comes back to about its idle
// size, every scrape gets an answer (200 or 503; 502 or 503 for the
// silent exporter) in bounded time, and the API and the heartbeats go on
// throughout.
func TestHostileScrapeFlood(t *testing.T) {
	for _, c := range []struct {
		name    string
		scrapes int
		silent  bool
		allowed []string
	}{
		{"answering exporter", 2000, false, []string{"200", "503"}},
		{"silent exporter", 6000, true, []string{"502", "503"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newMetricsRig(t)
			var silent atomic.Bool
			page := answerPage(t)
			r.exporter(func(conn net.Conn) {
				if silent.Load() {
					answerNothing(conn)
				} else {
					page(conn)
				}
			})
			testenv.WaitFor(t, 20*time.Second, "a page from the metrics endpoint", func() bool {
				code, err := r.scrape(10 * time.Second)
				return err == nil && code == 200
			})
			silent.Store(c.silent)
			idle, err := readProcFigures(r.e.Pid())
			if err != nil {
				t.Fatal(err)
			}

			sampler := sampleProc(r.e.Pid(), 0, nil)
			watch := r.watchService()
			res := r.flood(c.scrapes, 90*time.Second)
			watch.Stop(t, 3*time.Second, 3500*time.Millisecond)
			peak := sampler.Stop()
			var settled procFigures
			deadline := time.Now().Add(scrapeFloodSettleFor)
			for {
				settled, err = readProcFigures(r.e.Pid())
				if err != nil {
					t.Fatal(err)
				}
				if settled.RSS <= idle.RSS+scrapeFloodSettled || time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Logf("%d scrapes: %s", c.scrapes, res)
			t.Logf("agent idle: %s; peak during the flood: %s; after: %s", idle, peak, settled)

			total := 0
			for what, n := range res.Answers {
				total += n
				if !slices.Contains(c.allowed, what) {
					t.Errorf("%d scrapes answered %q (want only %v)", n, what, c.allowed)
				}
			}
			if total != c.scrapes {
				t.Errorf("%d answers to %d scrapes", total, c.scrapes)
			}
			if !c.silent && res.Answers["200"] < metrics.MaxScrapes {
				t.Errorf("only %d pages served", res.Answers["200"])
			}
			if peak.Threads > scrapeFloodThreads {
				t.Errorf("the agent reached %d OS threads (bound %d)", peak.Threads, scrapeFloodThreads)
			}
			if peak.FDs > scrapeFloodFDs {
				t.Errorf("the agent held %d descriptors (bound %d)", peak.FDs, scrapeFloodFDs)
			}
			if settled.RSS > idle.RSS+scrapeFloodSettled {
				t.Errorf("the agent kept %.1f MB after the flood, idle %.1f MB (margin %d MB)",
					float64(settled.RSS)/(1<<20), float64(idle.RSS)/(1<<20), scrapeFloodSettled>>20)
			}
			// The endpoint still serves.
			silent.Store(false)
			if code, err := r.scrape(10 * time.Second); err != nil || code != 200 {
				t.Errorf("a scrape after the flood: %d %v", code, err)
			}
		})
	}
}

// exporterAnswerRSS bounds the agent's resident size while it reads a
// bad exporter answer.
const exporterAnswerRSS = 100 << 20

// TestHostileExporterAnswer: HAProxy's exporter (a fake one in the
// namespace) answers with a 1 GiB line, or a 512 MiB header, streamed.
// The scrape is answered 502, the agent stays under 100 MB and stops
// reading long before the end. (Should the agent pass the bound, the
// stream stops there, so that a failing run does not take gigabytes.)
func TestHostileExporterAnswer(t *testing.T) {
	okHead := "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nConnection: close\r\n\r\n"
	for _, c := range []struct {
		name, start string
		size        int64
	}{
		{"a 1 GiB line", okHead + "haproxy_process_listeners{x=\"", 1 << 30},
		{"a 512 MiB header", "HTTP/1.1 200 OK\r\nX-Big: ", 512 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newMetricsRig(t)
			var bad atomic.Bool
			page := answerPage(t)
			abort := make(chan struct{})
			var abortOnce sync.Once
			sent := make(chan int64, 1)
			r.exporter(func(conn net.Conn) {
				if !bad.Load() {
					page(conn)
					return
				}
				conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
				if _, err := io.WriteString(conn, c.start); err != nil {
					sent <- 0
					return
				}
				sent <- metricstest.StreamLetter(conn, 'a', c.size, abort)
			})
			testenv.WaitFor(t, 20*time.Second, "a page from the metrics endpoint", func() bool {
				code, err := r.scrape(10 * time.Second)
				return err == nil && code == 200
			})
			idle, err := readProcFigures(r.e.Pid())
			if err != nil {
				t.Fatal(err)
			}
			bad.Store(true)
			sampler := sampleProc(r.e.Pid(), exporterAnswerRSS, func() { abortOnce.Do(func() { close(abort) }) })
			start := time.Now()
			code, err := r.scrape(2 * time.Minute)
			took := time.Since(start)
			peak := sampler.Stop()
			var n int64
			select {
			case n = <-sent:
			case <-time.After(time.Minute):
				t.Fatal("the exporter is still sending")
			}
			t.Logf("answer %d %v after %v; the exporter sent %.1f MB of %d MB; agent idle %s, peak %s",
				code, err, took.Round(time.Millisecond), float64(n)/(1<<20), c.size>>20, idle, peak)
			if err != nil || code != http.StatusBadGateway {
				t.Errorf("scrape answered %d %v, want 502", code, err)
			}
			if peak.RSS > exporterAnswerRSS {
				t.Errorf("the agent reached %.1f MB RSS (bound %d MB)", float64(peak.RSS)/(1<<20), exporterAnswerRSS>>20)
			}
			if n >= c.size {
				t.Errorf("the agent read the whole %d MB answer", c.size>>20)
			}
		})
	}
}
