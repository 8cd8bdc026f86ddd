// Package tiersutil holds what the system, interop and soak tiers share:
// an LB topology with an agent in the amphora's namespace, the HAProxy
// masters a test must stop, requests to the members behind a VIP, and an
// agent with hot-plugged NICs (NetTopology).
package tiersutil

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

// NewLBEnv builds a client/amphora/members topology with two members and
// an agent, not started yet, whose network namespace is the amphora's. It
// returns the namespace's name.
func NewLBEnv(t *testing.T) (string, *topo.LB, *testenv.Env) {
	topo.RequireRoot(t)
	ns := topo.UniqueName("amp")
	lb := topo.LBTopology(t, topo.LBOptions{AmphoraName: ns, Members: 2})
	env := testenv.New(t)
	env.Extra = "[amphora_agent]\nnetwork_namespace = " + ns + "\n"
	return ns, lb, env
}

// HAProxyMasters finds and finally kills the HAProxy masters behind a
// load balancer's pid file: HAProxy outlives the agent by design.
type HAProxyMasters struct {
	PidPath string
	mu      sync.Mutex
	seen    map[int]bool
}

// WatchHAProxy tracks the masters behind pidPath and kills them when the
// test ends.
func WatchHAProxy(t *testing.T, pidPath string) *HAProxyMasters {
	h := &HAProxyMasters{PidPath: pidPath, seen: map[int]bool{}}
	t.Cleanup(h.Kill)
	return h
}

func IsHAProxy(pid int) bool {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return err == nil && strings.TrimSpace(string(comm)) == "haproxy"
}

// GetMember sends one GET to url, which a member must answer (200, body
// "member-..."), and returns the response header named header.
func GetMember(c *http.Client, url, header string) (string, error) {
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

func MD5Hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}

// NetTopology is an agent, not started yet, with its own namespace, a
// client network to plug as the VIP port and a member network to plug as
// a member port. The NICs are veth ends hot-plugged in the default
// namespace.
type NetTopology struct {
	Env    *testenv.Env
	Amp    *topo.Namespace
	Client *topo.Namespace
	Member *topo.Namespace
	VIPNIC *topo.Veth // A: the hot-plugged NIC (agent side), B: client eth0
	MemNIC *topo.Veth // A: the hot-plugged NIC, B: member eth0
}

func NewNetTopology(t *testing.T) NetTopology {
	t.Helper()
	topo.RequireRoot(t)
	n := NetTopology{Env: testenv.New(t)}
	// The agent creates the namespace; the test deletes it.
	n.Amp = topo.AdoptNamespace(t, topo.UniqueName("amp"))
	n.Client = topo.NewNamespace(t, "cli")
	n.Member = topo.NewNamespace(t, "mem")
	n.VIPNIC = topo.HotplugNIC(t, n.Client, "eth0", []string{"203.0.113.100/24", "2001:db8:1::100/64"}, "")
	n.MemNIC = topo.HotplugNIC(t, n.Member, "eth0", []string{NetMember + "/24"}, "")
	return n
}

// The addresses NetTopology and the tests plug.
const (
	NetVIP      = "203.0.113.10"
	NetVIP6     = "2001:db8:1::10"
	NetVRRP     = "203.0.113.4"
	NetMemberIP = "198.51.100.20"
	NetMember   = "198.51.100.2"
)

// PlainLBConfig is a small load balancer config: its stats socket where
// the agent's layout puts it, one HTTP frontend with binds, one member.
func PlainLBConfig(base, lb, member string, binds ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "global\n    maxconn 100\n    stats socket %s/%s.sock mode 0666 level user\n", base, lb)
	b.WriteString("defaults\n    mode http\n    timeout connect 5s\n    timeout client 10s\n    timeout server 10s\nfrontend L1\n")
	for _, bind := range binds {
		fmt.Fprintf(&b, "    bind %s\n", bind)
	}
	fmt.Fprintf(&b, "    default_backend members\nbackend members\n    server member-1 %s\n", member)
	return b.String()
}

// Master is the current master's pid, 0 without a pid file.
func (h *HAProxyMasters) Master() int {
	pid, err := pidfile.Read(h.PidPath)
	if err != nil {
		return 0
	}
	h.mu.Lock()
	h.seen[pid] = true
	h.mu.Unlock()
	return pid
}

// Kill kills the process group of every master seen that still runs.
func (h *HAProxyMasters) Kill() {
	h.Master()
	h.mu.Lock()
	defer h.mu.Unlock()
	for pid := range h.seen {
		if IsHAProxy(pid) {
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
}

// IP runs ip(8) in the agent's namespace. A failure shows the agent's
// output: what the agent did to the namespace explains most of them.
func (n *NetTopology) IP(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"-n", n.Amp.Name}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip -n %s %s: %v\n%s\nagent output:\n%s", n.Amp.Name, strings.Join(args, " "), err, out, n.Env.Output())
	}
	return string(out)
}

// Call sends one request to the agent's API and fails the test unless it
// answers wantStatus with a JSON body, which it returns.
func (r *NetTopology) Call(t *testing.T, method, path, body string, wantStatus int) string {
	t.Helper()
	status, ctype, out := r.Env.Do(method, path, []byte(body))
	if status != wantStatus || ctype != "application/json" {
		t.Fatalf("%s %s = %d %s %s, want %d application/json\nagent output:\n%s", method, path, status, ctype, out, wantStatus, r.Env.Output())
	}
	return string(out)
}

// LoadBalancer has the agent run a load balancer on the plugged VIP: port
// 80 (both families) and 8080, which the firewall leaves closed, to the
// member. HAProxy outlives the agent; the returned watcher kills it.
func (r *NetTopology) LoadBalancer(t *testing.T) *HAProxyMasters {
	t.Helper()
	const lb = "7c0ffee0-0000-4000-8000-00000000b001"
	base := r.Env.Path("lib")
	text := PlainLBConfig(base, lb, NetMember+":80", NetVIP+":80", NetVIP6+":80", NetVIP+":8080")
	hap := WatchHAProxy(t, filepath.Join(base, lb, lb+".pid"))
	r.Call(t, "PUT", "/1.0/loadbalancer/"+r.Env.AmphoraID+"/"+lb+"/haproxy", text, 202)
	r.Call(t, "PUT", "/1.0/loadbalancer/"+lb+"/start", "", 202)
	return hap
}

// Get sends GET url from the client namespace until it answers 200, for
// at most 15 s, and returns the body.
func (r *NetTopology) Get(t *testing.T, url string) string {
	t.Helper()
	c := r.Client.HTTPClient(false)
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
