package topo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// RequireRoot skips the test unless it runs as root: namespaces, veths and
// sysctls need CAP_NET_ADMIN/CAP_SYS_ADMIN. CI runs these tests as root
// under `go test -tags system`.
func RequireRoot(t testing.TB) {
	t.Helper()
	testkit.RequireRoot(t, "topo creates network namespaces and veth pairs (run `go test -tags system` as root)")
}

// Namespace is a named network namespace (/run/netns/Name) that the test
// removes in its cleanup.
type Namespace struct {
	Name string

	mu      sync.Mutex
	closers []func() // idle-connection closers of this namespace's HTTP clients
}

// origin is the network namespace the test process started in, captured
// before any code of this package could move a thread.
var origin = func() netns.NsHandle {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	h, err := netns.Get()
	if err != nil {
		return netns.None()
	}
	return h
}()

// handle opens the namespace; the caller closes it.
func (n *Namespace) handle() (netns.NsHandle, error) {
	if n == nil {
		if !origin.IsOpen() {
			return netns.None(), errors.New("topo: the process's own network namespace could not be opened at start-up")
		}
		fd, err := unix.FcntlInt(uintptr(origin), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return netns.None(), fmt.Errorf("dup namespace handle: %w", err)
		}
		return netns.NsHandle(fd), nil
	}
	h, err := netns.GetFromName(n.Name)
	if err != nil {
		return netns.None(), fmt.Errorf("open network namespace %s: %w", n.Name, err)
	}
	return h, nil
}

// netlink returns a netlink handle bound to the namespace; the caller
// closes it.
func (n *Namespace) netlink() (*netlink.Handle, error) {
	ns, err := n.handle()
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink handle in %s: %w", n.String(), err)
	}
	return h, nil
}

// String is the namespace name, or "default" for nil.
func (n *Namespace) String() string {
	if n == nil {
		return "default"
	}
	return n.Name
}

// NewNamespace creates a namespace named UniqueName(prefix), brings its
// loopback up and deletes it in t.Cleanup.
func NewNamespace(t testing.TB, prefix string) *Namespace {
	t.Helper()
	return NewNamespaceNamed(t, UniqueName(prefix))
}

// NewNamespaceNamed creates a namespace with exactly this name (fails if it
// exists), brings its loopback up and deletes it in t.Cleanup. Use a name
// from UniqueName so parallel test processes do not collide.
func NewNamespaceNamed(t testing.TB, name string) *Namespace {
	t.Helper()
	RequireRoot(t)
	if err := validName(name); err != nil {
		t.Fatal(err)
	}
	if err := ipNetnsAdd(name); err != nil {
		t.Fatal(err)
	}
	n := &Namespace{Name: name}
	t.Cleanup(func() { n.destroy(t) })
	h, err := n.netlink()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		t.Fatalf("bring lo up in %s: %v", name, err)
	}
	return n
}

// AdoptNamespace returns a handle on a namespace that someone else creates
// (typically the agent under test, which runs `ip netns add`); it need not
// exist yet. The test still deletes it in t.Cleanup, killing processes left
// inside (e.g. an HAProxy the agent started).
func AdoptNamespace(t testing.TB, name string) *Namespace {
	t.Helper()
	RequireRoot(t)
	if err := validName(name); err != nil {
		t.Fatal(err)
	}
	n := &Namespace{Name: name}
	t.Cleanup(func() { n.destroy(t) })
	return n
}

// Exists reports whether the namespace currently exists.
func (n *Namespace) Exists() bool {
	if n == nil {
		return true
	}
	_, err := os.Stat(filepath.Join(netnsDir, n.Name))
	return err == nil
}

func validName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/ \t\n") {
		return fmt.Errorf("topo: invalid namespace name %q", name)
	}
	return nil
}

// ipNetnsAdd runs `ip netns add`. The first call on a machine turns
// /run/netns into a shared mount point; two processes doing that at once
// stack mounts and hide namespaces, so creations are serialised across
// processes with a lock file.
func ipNetnsAdd(name string) error {
	lock, err := os.OpenFile("/run/amphora-topo.lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("open lock file: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	defer unix.Flock(int(lock.Fd()), unix.LOCK_UN) //nolint:errcheck // closing releases it too
	out, err := exec.Command("ip", "netns", "add", name).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip netns add %s: %v: %s", name, err, bytes.TrimSpace(out))
	}
	return nil
}

// destroy closes what the namespace's clients hold, kills processes left
// inside, and deletes the namespace.
func (n *Namespace) destroy(t testing.TB) {
	n.mu.Lock()
	closers := n.closers
	n.closers = nil
	n.mu.Unlock()
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
	if !n.Exists() {
		return
	}
	if t.Failed() {
		n.logState(t)
	}
	n.killProcesses(t)
	if err := netns.DeleteNamed(n.Name); err != nil && !errors.Is(err, os.ErrNotExist) {
		// Fall back to iproute2, which does the same unmount and unlink.
		if out, err2 := exec.Command("ip", "netns", "del", n.Name).CombinedOutput(); err2 != nil {
			t.Errorf("topo: delete namespace %s: %v; ip netns del: %v: %s", n.Name, err, err2, bytes.TrimSpace(out))
		}
	}
}

// logState logs addresses, links and routes of a namespace of a failed test.
func (n *Namespace) logState(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var b strings.Builder
	for _, args := range [][]string{{"-d", "link"}, {"addr"}, {"route"}, {"-6", "route"}} {
		out, err := n.Exec(ctx, "ip", args...)
		fmt.Fprintf(&b, "$ ip %s\n%s", strings.Join(args, " "), out)
		if err != nil {
			fmt.Fprintf(&b, "(%v)\n", err)
		}
	}
	t.Logf("topo: state of namespace %s at cleanup of failed test:\n%s", n.Name, b.String())
}

// killProcesses SIGKILLs processes whose network namespace is this one
// (never the test process itself) and waits briefly for them to go: they
// would keep the namespace, its links and their peers alive.
func (n *Namespace) killProcesses(t testing.TB) {
	ns, err := n.handle()
	if err != nil {
		return
	}
	var st unix.Stat_t
	err = unix.Fstat(int(ns), &st)
	ns.Close()
	if err != nil {
		return
	}
	procs, _ := os.ReadDir("/proc")
	var killed []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		var pst unix.Stat_t
		if unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &pst) != nil {
			continue
		}
		if pst.Dev == st.Dev && pst.Ino == st.Ino {
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			t.Logf("topo: killing process %d (%s) left in namespace %s", pid, bytes.TrimSpace(comm), n.Name)
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed = append(killed, pid)
			}
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	for _, pid := range killed {
		for time.Now().Before(deadline) {
			// A killed child of the test process stays a zombie until its
			// parent waits; a zombie no longer holds the namespace.
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil || zombie(stat) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func zombie(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

// errGoexit reports that fn ended its goroutine, e.g. by t.FailNow.
var errGoexit = errors.New("topo: fn called runtime.Goexit (t.Fatal/t.FailNow?) inside Run; return an error instead")

// Run runs fn on a fresh goroutine whose OS thread is locked and switched
// into the namespace (the default one for nil), and returns fn's error.
// Sockets created in fn belong to the namespace for their whole life and may
// be used from any goroutine afterwards. The thread is switched back when fn
// returns; if that fails the thread is discarded rather than reused. A panic
// in fn is re-raised in the caller. fn must not call t.Fatal.
func (n *Namespace) Run(fn func() error) error {
	target, err := n.handle()
	if err != nil {
		return err
	}
	defer target.Close()

	type result struct {
		err    error
		goexit bool
		panic  any
		stack  []byte
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("topo: current namespace: %w", err)}
			return
		}
		defer orig.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("topo: enter namespace %s: %w", n.String(), err)}
			return
		}
		res := result{goexit: true}
		defer func() {
			if p := recover(); p != nil {
				res = result{panic: p, stack: debug.Stack()}
			}
			if err := netns.Set(orig); err == nil {
				runtime.UnlockOSThread()
			} else if res.err == nil && res.panic == nil {
				// Still locked: the runtime ends the thread with the goroutine.
				res.err = fmt.Errorf("topo: leave namespace %s: %w", n.String(), err)
			}
			ch <- res
		}()
		res.err = fn()
		res.goexit = false
	}()
	r := <-ch
	switch {
	case r.panic != nil:
		panic(fmt.Sprintf("topo: panic in namespace %s: %v\n\n%s", n.String(), r.panic, r.stack))
	case r.goexit:
		return errGoexit
	}
	return r.err
}

// Command returns a command that runs inside the namespace through
// `ip netns exec` (which execs the program, so the process is the program
// itself and Process.Kill reaches it). For nil it runs directly.
func (n *Namespace) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	if n == nil {
		return exec.CommandContext(ctx, name, args...)
	}
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Exec runs a command inside the namespace and returns its standard output;
// on failure the error carries the exit status and standard error.
func (n *Namespace) Exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := n.Command(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s in namespace %s: %w: %s", name, strings.Join(args, " "), n.String(), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// sysctlPath maps "net.ipv4.ip_forward" (or "net/ipv4/ip_forward", needed
// when a component such as an interface name contains a dot) to its file.
func sysctlPath(key string) string {
	if !strings.Contains(key, "/") {
		key = strings.ReplaceAll(key, ".", "/")
	}
	return filepath.Join("/proc/sys", key)
}

// Sysctl writes a sysctl inside the namespace (net.* keys are per
// namespace; /proc/sys is resolved by the writing thread's namespace).
func (n *Namespace) Sysctl(t testing.TB, key, value string) {
	t.Helper()
	err := n.Run(func() error {
		return os.WriteFile(sysctlPath(key), []byte(value), 0o644)
	})
	if err != nil {
		t.Fatalf("sysctl %s=%s in namespace %s: %v", key, value, n.String(), err)
	}
}

// ReadSysctl reads a sysctl inside the namespace, without the trailing
// newline.
func (n *Namespace) ReadSysctl(t testing.TB, key string) string {
	t.Helper()
	var v []byte
	err := n.Run(func() error {
		var err error
		v, err = os.ReadFile(sysctlPath(key))
		return err
	})
	if err != nil {
		t.Fatalf("read sysctl %s in namespace %s: %v", key, n.String(), err)
	}
	return strings.TrimSpace(string(v))
}

// AddRoute adds (or replaces) a route inside the namespace. dst is a CIDR or
// "default"; via is a gateway address (its family picks the family of
// "default"), or an interface name for a directly connected route.
func (n *Namespace) AddRoute(t testing.TB, dst, via string) {
	t.Helper()
	h, err := n.netlink()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	r := &netlink.Route{}
	gw := net.ParseIP(via)
	if gw != nil {
		r.Gw = gw
	} else {
		l, err := h.LinkByName(via)
		if err != nil {
			t.Fatalf("route %s via %s in %s: no such gateway address or interface: %v", dst, via, n.String(), err)
		}
		r.LinkIndex = l.Attrs().Index
		r.Scope = netlink.SCOPE_LINK
	}
	if dst == "default" {
		if gw == nil {
			t.Fatalf("route default via %s in %s: a default route needs a gateway address", via, n.String())
		}
		if gw.To4() != nil {
			_, r.Dst, _ = net.ParseCIDR("0.0.0.0/0")
		} else {
			_, r.Dst, _ = net.ParseCIDR("::/0")
		}
	} else {
		_, r.Dst, err = net.ParseCIDR(dst)
		if err != nil {
			t.Fatalf("route %s: %v", dst, err)
		}
	}
	if err := h.RouteReplace(r); err != nil {
		t.Fatalf("route %s via %s in %s: %v", dst, via, n.String(), err)
	}
}

// DialContext connects from inside the namespace.
func (n *Namespace) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.Run(func() error {
		d := net.Dialer{Timeout: 5 * time.Second}
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Listen opens a stream listener inside the namespace; the caller closes it.
func (n *Namespace) Listen(network, addr string) (net.Listener, error) {
	var l net.Listener
	err := n.Run(func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// ListenPacket opens a packet socket (e.g. "udp") inside the namespace; the
// caller closes it.
func (n *Namespace) ListenPacket(network, addr string) (net.PacketConn, error) {
	var c net.PacketConn
	err := n.Run(func() error {
		var err error
		c, err = net.ListenPacket(network, addr)
		return err
	})
	return c, err
}

// onDestroy registers f to run when the namespace is deleted.
func (n *Namespace) onDestroy(f func()) {
	if n == nil {
		return
	}
	n.mu.Lock()
	n.closers = append(n.closers, f)
	n.mu.Unlock()
}

// NeighborMAC is the link-layer address the namespace's neighbour table
// holds for ip ("" when it holds none, or no valid one): which host a
// client there sends to, e.g. the VRRP holder of a VIP.
func (n *Namespace) NeighborMAC(ip net.IP) (string, error) {
	h, err := n.netlink()
	if err != nil {
		return "", err
	}
	defer h.Close()
	family := netlink.FAMILY_V4
	if ip.To4() == nil {
		family = netlink.FAMILY_V6
	}
	neighs, err := h.NeighList(0, family)
	if err != nil {
		return "", fmt.Errorf("neighbours in %s: %w", n.String(), err)
	}
	for _, nb := range neighs {
		if nb.IP.Equal(ip) && nb.HardwareAddr != nil && nb.State&(netlink.NUD_INCOMPLETE|netlink.NUD_FAILED) == 0 {
			return nb.HardwareAddr.String(), nil
		}
	}
	return "", nil
}
