//go:build system

package system_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/health"
	"github.com/amphora-agent/amphora-agent/agent/pidfile"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/hbutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/tiersutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/vrrputil"
	"github.com/amphora-agent/amphora-agent/haproxy/stats"
)

// heldConn is one client connection through the VIP kept open for the
// whole test, asked for a page every few milliseconds: it proves the
// worker that holds it was never ended.
type heldConn struct {
	answered atomic.Int64
	ended    chan struct{} // closed when the connection is no longer asked
	mu       sync.Mutex
	failed   error
}

// hold opens n held connections from lb's client namespace until ctx
// ends; wait returns once they stopped.
func hold(t *testing.T, ctx context.Context, lb *topo.LB, n int) (conns []*heldConn, wait func()) {
	t.Helper()
	var wg sync.WaitGroup
	for range n {
		c, err := lb.Client.DialContext(ctx, "tcp", net.JoinHostPort(lb.VIP, "80"))
		if err != nil {
			t.Fatal(err)
		}
		h := &heldConn{ended: make(chan struct{})}
		conns = append(conns, h)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(h.ended)
			defer c.Close()
			r := bufio.NewReader(c)
			for ctx.Err() == nil {
				c.SetDeadline(time.Now().Add(15 * time.Second))
				if err := h.ask(c, r); err != nil {
					h.mu.Lock()
					h.failed = fmt.Errorf("after %d answers: %w", h.answered.Load(), err)
					h.mu.Unlock()
					return
				}
				h.answered.Add(1)
				select {
				case <-ctx.Done():
				case <-time.After(50 * time.Millisecond):
				}
			}
		}()
	}
	return conns, wg.Wait
}

// ask sends one request on c and reads a member's answer.
func (h *heldConn) ask(c net.Conn, r *bufio.Reader) error {
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: vip\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(string(body), "member-") || resp.Close {
		return fmt.Errorf("status %d, body %q, closing %v", resp.StatusCode, body, resp.Close)
	}
	return nil
}

func (h *heldConn) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failed
}

// An agent restarted while its HAProxy master is stopped (SIGSTOP: the
// master answers nothing on its socket, its worker serves on) adopts that
// master, whether the agent ended with SIGTERM or kill -9: the master is
// never killed, the connections its worker holds stay open and served, no
// request fails, and once the master runs again the same master answers
// and the heartbeats carry the load balancer. Upstream's agent never
// touches HAProxy when it restarts.
func TestHAProxyAdoptedWhileItsMasterIsStopped(t *testing.T) {
	lb, hm, env, _ := startHBLoadBalancer(t, "adopt", 1)
	base := env.Path("lib")
	const key = "insecure"
	cfgPath := filepath.Join(base, hbutil.LB, "haproxy.cfg")
	hm.WaitFor(hbutil.Wait, key, "the listener OPEN", func(m health.Message) bool {
		return m.Listeners[hbutil.Listener].Status == "OPEN"
	})
	master, err := pidfile.Read(filepath.Join(base, hbutil.LB, hbutil.LB+".pid"))
	if err != nil {
		t.Fatal(err)
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	conns, waitConns := hold(t, ctx, lb, 4)
	// Beside them, a steady loop of requests on new connections.
	var ok, failed atomic.Int64
	var lastFail atomic.Value
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		c := lb.HTTPClient(false)
		for ctx.Err() == nil {
			if _, err := tiersutil.GetMember(c, lb.URL(80, "/"), "X-Unused"); err != nil {
				failed.Add(1)
				lastFail.Store(err.Error())
			} else {
				ok.Add(1)
			}
		}
	}()
	defer func() { stop(); <-loopDone; waitConns() }()
	testenv.WaitFor(t, 10*time.Second, "every held connection answered", func() bool {
		for _, c := range conns {
			if c.answered.Load() == 0 {
				return false
			}
		}
		return true
	})

	// The master is stopped once its start is over (it re-executes itself
	// after starting its worker): then it answers, and after the stop not.
	sock := filepath.Join(base, hbutil.LB, "master.sock")
	masterAnswers := func(wait time.Duration) bool {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		p, err := stats.ShowProc(ctx, sock)
		return err == nil && len(p.Workers) > 0
	}
	testenv.WaitFor(t, 10*time.Second, "the master answering", func() bool { return masterAnswers(2 * time.Second) })
	if err := syscall.Kill(master, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "the master stopped", func() bool { return procState(master) == 'T' })
	// Before the LB's removal at the end, which needs a master that runs.
	t.Cleanup(func() { syscall.Kill(master, syscall.SIGCONT) })
	if masterAnswers(time.Second) {
		t.Fatal("the stopped master answered")
	}
	stopped := time.Now()

	defer func() {
		if t.Failed() {
			out, _ := os.ReadFile(filepath.Join(base, hbutil.LB, "haproxy.log"))
			t.Logf("the last agent's output:\n%s\nHAProxy's:\n%s", env.Output(), out)
		}
	}()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		if err := env.Signal(sig); err != nil {
			t.Fatal(err)
		}
		select {
		case <-env.Exited():
		case <-time.After(15 * time.Second):
			t.Fatalf("the agent did not end on %v", sig)
		}
		// The agent's exit leaves the master as it was: were it in the
		// agent's session, its process group would be orphaned, and the
		// kernel would send it SIGHUP (a reload) and SIGCONT.
		if st := procState(master); st != 'T' {
			t.Fatalf("the master's state is %q after the agent ended on %v, want it still stopped", st, sig)
		}
		restarted := time.Now()
		env.Start()
		// An agent that made its adoption wait for the master's answer gave
		// up after the operation's 28 s and started another master: what
		// the new agent decides is awaited that long.
		testenv.WaitFor(t, 45*time.Second, "the new agent to adopt or replace HAProxy", func() bool {
			return env.Count("adopted running HAProxy") > 0 || env.Count("HAProxy started") > 0 || !haproxyRuns(master)
		})
		decided := time.Since(restarted)
		if env.Count("adopted running HAProxy", fmt.Sprintf(`"pid": %d`, master)) != 1 || !haproxyRuns(master) {
			// What the held connections saw of it, once they saw it.
			select {
			case <-conns[0].ended:
			case <-time.After(5 * time.Second):
			}
			t.Fatalf("after %v: the stopped master %d was not adopted (still running: %v); held connections: %s",
				sig, master, haproxyRuns(master), describeHeld(conns))
		}
		// The question to the master goes unanswered, and that is all.
		testenv.WaitFor(t, 20*time.Second, "the silence of the stopped master logged", func() bool {
			return env.Count("adopted HAProxy does not answer") > 0
		})
		if n := env.Count("ending a HAProxy"); n != 0 {
			t.Fatalf("after %v the agent ended %d HAProxy processes:\n%s", sig, n, env.Output())
		}
		t.Logf("agent restarted after %v: the stopped master adopted within %v of its start", sig,
			decided.Round(time.Millisecond))
	}
	// Heartbeats sent before the kill -9 may wait in the socket: drop
	// what is queued, so that what follows is the last agent's.
	for hm.Next(time.Now().Add(20*time.Millisecond)) != nil {
	}

	if err := syscall.Kill(master, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("master stopped for %v", time.Since(stopped).Round(time.Millisecond))
	testenv.WaitFor(t, 30*time.Second, "the adopted master answering", func() bool {
		return env.Count("adopted HAProxy answers now") > 0
	})
	m, _ := hm.WaitFor(hbutil.Wait, key, "the listener OPEN from the last agent", func(m health.Message) bool {
		return m.Listeners[hbutil.Listener].Status == "OPEN"
	})
	// Every held connection is served after the master runs again.
	after := make([]int64, len(conns))
	for i, c := range conns {
		after[i] = c.answered.Load()
	}
	testenv.WaitFor(t, 10*time.Second, "every held connection answered again", func() bool {
		for i, c := range conns {
			if c.err() != nil {
				t.Fatalf("held connections: %s", describeHeld(conns))
			}
			if c.answered.Load() <= after[i] {
				return false
			}
		}
		return true
	})
	stop()
	<-loopDone
	waitConns()

	for _, c := range conns {
		if c.err() != nil {
			t.Fatalf("held connections: %s", describeHeld(conns))
		}
	}
	if failed.Load() != 0 {
		t.Fatalf("%d of %d requests failed, the last: %v", failed.Load(), failed.Load()+ok.Load(), lastFail.Load())
	}
	if out, _ := os.ReadFile(filepath.Join(base, hbutil.LB, "haproxy.log")); bytes.Contains(out, []byte("Reloading")) {
		t.Fatalf("HAProxy reloaded:\n%s", out)
	}
	if got := mainsOf("haproxy", cfgPath); !slices.Equal(got, []int{master}) {
		t.Fatalf("HAProxy masters %v, want the adopted %d alone", got, master)
	}
	t.Logf("%d requests on new connections, none failed; held connections: %s; heartbeat seq %d carries the listener",
		ok.Load(), describeHeld(conns), m.Seq)
}

func describeHeld(conns []*heldConn) string {
	var parts []string
	for _, c := range conns {
		s := fmt.Sprintf("%d answers", c.answered.Load())
		if err := c.err(); err != nil {
			s = "failed " + err.Error()
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// haproxyRuns reports whether pid is an HAProxy process, and not a zombie.
func haproxyRuns(pid int) bool {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return err == nil && strings.TrimSpace(string(comm)) == "haproxy" && procState(pid) != 'Z'
}

// procState is pid's state letter in /proc (R, S, T, Z...), 0 if unknown.
func procState(pid int) byte {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return 0
	}
	return stat[i+2]
}

// The same for the VRRP keepalived: stopped (SIGSTOP) while the agent
// that started it ends, it stays as it is (no SIGHUP, which keepalived
// takes for a reload, no SIGCONT), and the next agent adopts it.
func TestKeepalivedAdoptedWhileStopped(t *testing.T) {
	topo.RequireRoot(t)
	if _, err := os.Stat("/usr/sbin/keepalived"); err != nil {
		t.Skip("keepalived is not installed (make test installs it)")
	}
	a := vrrputil.NewAmp(t, "ad", "203.0.113.6", 100)
	peer := topo.NewNamespace(t, "vrad")
	topo.Link(t, a.NS, "eth1", []string{a.Addr + "/24"}, peer, "eth1", []string{"203.0.113.7/24"})
	cfgPath, pid := a.StartKeepalived(t, "203.0.113.7")
	e := a.Env
	logPath := filepath.Join(a.Base(), "vrrp", "octavia-keepalived.log")
	before, _ := os.ReadFile(logPath)

	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	testenv.WaitFor(t, 5*time.Second, "keepalived stopped", func() bool { return procState(pid) == 'T' })
	if err := e.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.Exited():
	case <-time.After(15 * time.Second):
		t.Fatal("the agent did not end on SIGTERM")
	}
	if st := procState(pid); st != 'T' {
		t.Fatalf("keepalived's state is %q after the agent ended, want it still stopped", st)
	}
	e.Start()
	testenv.WaitFor(t, 10*time.Second, "the new agent to adopt keepalived", func() bool {
		return e.Count("adopted running keepalived", fmt.Sprintf(`"pid": %d`, pid)) > 0
	})
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if got := mainsOf("keepalived", cfgPath); !slices.Equal(got, []int{pid}) {
		t.Fatalf("keepalived main processes %v, want the adopted %d alone\n%s", got, pid, e.Output())
	}
	if after, _ := os.ReadFile(logPath); bytes.Contains(after[min(len(before), len(after)):], []byte("Reloading")) {
		t.Fatalf("keepalived reloaded:\n%s", after)
	}
}
