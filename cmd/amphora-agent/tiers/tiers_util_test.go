//go:build system || interop || vm

// Helpers the system and interop tiers share: the namespaces and NICs an
// agent runs with, the HAProxy masters a test must stop, and requests to
// the members behind a VIP.
package tiers_test

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/pidfile"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
)

// newLBEnv builds a client/amphora/members topology with two members and
// an agent, not started yet, whose network namespace is the amphora's. It
// returns the namespace's name.
func newLBEnv(t *testing.T) (string, *topo.LB, *testenv.Env) {
	topo.RequireRoot(t)
	ns := topo.UniqueName("amp")
	lb := topo.LBTopology(t, topo.LBOptions{AmphoraName: ns, Members: 2})
	env := testenv.New(t)
	env.Extra = "[amphora_agent]\nnetwork_namespace = " + ns + "\n"
	return ns, lb, env
}

// haproxyMasters finds and finally kills the HAProxy masters behind a
// load balancer's pid file: HAProxy outlives the agent by design.
type haproxyMasters struct {
	pidPath string
	mu      sync.Mutex
	seen    map[int]bool
}

// watchHAProxy tracks the masters behind pidPath and kills them when the
// test ends.
func watchHAProxy(t *testing.T, pidPath string) *haproxyMasters {
	h := &haproxyMasters{pidPath: pidPath, seen: map[int]bool{}}
	t.Cleanup(h.kill)
	return h
}

// master is the current master's pid, 0 without a pid file.
func (h *haproxyMasters) master() int {
	pid, err := pidfile.Read(h.pidPath)
	if err != nil {
		return 0
	}
	h.mu.Lock()
	h.seen[pid] = true
	h.mu.Unlock()
	return pid
}

// kill kills the process group of every master seen that still runs.
func (h *haproxyMasters) kill() {
	h.master()
	h.mu.Lock()
	defer h.mu.Unlock()
	for pid := range h.seen {
		if isHAProxy(pid) {
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
}

func isHAProxy(pid int) bool {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return err == nil && strings.TrimSpace(string(comm)) == "haproxy"
}

// getMember sends one GET to url, which a member must answer (200, body
// "member-..."), and returns the response header named header.
func getMember(c *http.Client, url, header string) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.HasPrefix(string(body), "member-") {
		return "", fmt.Errorf("status %d body %q", resp.StatusCode, body)
	}
	return resp.Header.Get(header), nil
}

func md5Hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}

// netTopology is an agent, not started yet, with its own namespace, a
// client network to plug as the VIP port and a member network to plug as
// a member port. The NICs are veth ends hot-plugged in the default
// namespace.
type netTopology struct {
	env    *testenv.Env
	amp    *topo.Namespace
	client *topo.Namespace
	member *topo.Namespace
	vipNIC *topo.Veth // A: the hot-plugged NIC (agent side), B: client eth0
	memNIC *topo.Veth // A: the hot-plugged NIC, B: member eth0
}

func newNetTopology(t *testing.T) netTopology {
	t.Helper()
	topo.RequireRoot(t)
	n := netTopology{env: testenv.New(t)}
	// The agent creates the namespace; the test deletes it.
	n.amp = topo.AdoptNamespace(t, topo.UniqueName("amp"))
	n.client = topo.NewNamespace(t, "cli")
	n.member = topo.NewNamespace(t, "mem")
	n.vipNIC = topo.HotplugNIC(t, n.client, "eth0", []string{"203.0.113.100/24", "2001:db8:1::100/64"}, "")
	n.memNIC = topo.HotplugNIC(t, n.member, "eth0", []string{netMember + "/24"}, "")
	return n
}

// ip runs ip(8) in the agent's namespace. A failure shows the agent's
// output: what the agent did to the namespace explains most of them.
func (n *netTopology) ip(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"-n", n.amp.Name}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip -n %s %s: %v\n%s\nagent output:\n%s", n.amp.Name, strings.Join(args, " "), err, out, n.env.Output())
	}
	return string(out)
}

// The addresses netTopology and the tests plug.
const (
	netVIP      = "203.0.113.10"
	netVIP6     = "2001:db8:1::10"
	netVRRP     = "203.0.113.4"
	netMemberIP = "198.51.100.20"
	netMember   = "198.51.100.2"
)

// plainLBConfig is a small load balancer config: its stats socket where
// the agent's layout puts it, one HTTP frontend with binds, one member.
func plainLBConfig(base, lb, member string, binds ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "global\n    maxconn 100\n    stats socket %s/%s.sock mode 0666 level user\n", base, lb)
	b.WriteString("defaults\n    mode http\n    timeout connect 5s\n    timeout client 10s\n    timeout server 10s\nfrontend L1\n")
	for _, bind := range binds {
		fmt.Fprintf(&b, "    bind %s\n", bind)
	}
	fmt.Fprintf(&b, "    default_backend members\nbackend members\n    server member-1 %s\n", member)
	return b.String()
}

// call sends one request to the agent's API and fails the test unless it
// answers wantStatus with a JSON body, which it returns.
func (r *netTopology) call(t *testing.T, method, path, body string, wantStatus int) string {
	t.Helper()
	status, ctype, out := r.env.Do(method, path, []byte(body))
	if status != wantStatus || ctype != "application/json" {
		t.Fatalf("%s %s = %d %s %s, want %d application/json\nagent output:\n%s", method, path, status, ctype, out, wantStatus, r.env.Output())
	}
	return string(out)
}

// loadBalancer has the agent run a load balancer on the plugged VIP: port
// 80 (both families) and 8080, which the firewall leaves closed, to the
// member. HAProxy outlives the agent; the returned watcher kills it.
func (r *netTopology) loadBalancer(t *testing.T) *haproxyMasters {
	t.Helper()
	const lb = "7c0ffee0-0000-4000-8000-00000000b001"
	base := r.env.Path("lib")
	text := plainLBConfig(base, lb, netMember+":80", netVIP+":80", netVIP6+":80", netVIP+":8080")
	hap := watchHAProxy(t, filepath.Join(base, lb, lb+".pid"))
	r.call(t, "PUT", "/1.0/loadbalancer/"+r.env.AmphoraID+"/"+lb+"/haproxy", text, 202)
	r.call(t, "PUT", "/1.0/loadbalancer/"+lb+"/start", "", 202)
	return hap
}

// get sends GET url from the client namespace until it answers 200, for
// at most 15 s, and returns the body.
func (r *netTopology) get(t *testing.T, url string) string {
	t.Helper()
	c := r.client.HTTPClient(false)
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := c.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return string(body)
			}
			err = fmt.Errorf("status %d: %s", resp.StatusCode, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s from the client: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
