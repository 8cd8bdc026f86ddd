package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/amphora-agent/amphora-agent/agent/procgroup"
)

// modprobeTimeout bounds loading a kernel module: a wedged modprobe must
// not hold every start of a service in the namespace.
const modprobeTimeout = 10 * time.Second

// RunDir is where named namespaces are bind-mounted, as `ip netns` does,
// so `ip netns exec` and upstream's tools find ours.
const RunDir = "/run/netns"

// Sysctl is one kernel setting applied inside the namespace.
type Sysctl struct{ Key, Value string }

// NamespaceSysctls are the settings the amphora applies inside the
// namespace: those of upstream's amphora-netns unit (forwarding, IPVS) and
// the per-namespace ones of the image's kernel tuning (sysctl --system runs
// inside the namespace there). Global settings of that tuning (fs.*, and
// net.* values only the initial namespace has) belong to the image, not to
// the agent.
var NamespaceSysctls = []Sysctl{
	{"net.ipv4.ip_forward", "1"},
	{"net.ipv6.conf.all.forwarding", "1"},
	{"net.ipv4.ip_nonlocal_bind", "1"},
	{"net.ipv6.ip_nonlocal_bind", "1"},
	{"net.ipv4.vs.conntrack", "1"},
	{"net.ipv4.vs.expire_nodest_conn", "1"},
	{"net.ipv4.vs.expire_quiescent_template", "1"},
	{"net.ipv4.tcp_max_tw_buckets", "5800000"},
	{"net.ipv4.tcp_max_syn_backlog", "100000"},
	{"net.ipv4.tcp_keepalive_time", "300"},
	{"net.ipv4.tcp_tw_reuse", "1"},
	{"net.core.somaxconn", "65534"},
	{"net.ipv4.tcp_synack_retries", "3"},
	{"net.netfilter.nf_conntrack_tcp_timeout_time_wait", "5"},
	{"net.netfilter.nf_conntrack_tcp_timeout_fin_wait", "5"},
	{"net.ipv4.tcp_mtu_probing", "1"},
	{"net.ipv4.tcp_fin_timeout", "5"},
	{"net.ipv4.tcp_rmem", "4096 87380 33554432"},
	{"net.ipv4.tcp_wmem", "4096 87380 33554432"},
	{"net.ipv4.ip_local_port_range", "1025 65534"},
	{"net.ipv4.ping_group_range", "0 2147483647"},
}

// HostSysctls are the connection-tracking sizes upstream's amphora-netns
// unit sets in the initial namespace (they are global: the namespace's
// conntrack table is sized there).
var HostSysctls = []Sysctl{
	{"net.netfilter.nf_conntrack_buckets", "125000"},
	{"net.netfilter.nf_conntrack_max", "125000"},
	{"net.netfilter.nf_conntrack_expect_max", "488"},
}

var (
	// ensureMu serializes creation within the process: two callers racing
	// on the same name must not both bind-mount it.
	ensureMu sync.Mutex
	// lacking remembers settings already reported as unavailable, so a
	// kernel without IPVS is logged once per process, not at every call.
	lacking sync.Map
)

// EnsureWith makes sure the named network namespace exists and is set up:
// it is created when missing, lo is up and NamespaceSysctls are applied.
// Settings the kernel does not offer in a namespace (no IPVS module, for
// one) are logged once and are not an error. It is idempotent and cheap
// enough to call before every start of a service in the namespace.
// Problems are logged to log (zap.L() when nil).
func EnsureWith(namespace string, log *zap.Logger) error {
	if log == nil {
		log = zap.L()
	}
	if err := validName(namespace); err != nil {
		return err
	}
	ensureMu.Lock()
	created, err := create(namespace)
	ensureMu.Unlock()
	if err != nil {
		return err
	}
	if created {
		log.Info("network namespace created", zap.String("namespace", namespace))
	}
	if err := loUp(namespace); err != nil {
		return err
	}
	// The IPVS module must be loaded before its per-namespace settings
	// exist (UDP/SCTP listeners need it); a kernel without it is logged.
	ctx, cancel := context.WithTimeout(context.Background(), modprobeTimeout)
	defer cancel()
	if out, err := procgroup.CombinedOutput(procgroup.Command(ctx, "modprobe", "ip_vs"), nil); err != nil {
		if _, seen := lacking.LoadOrStore("modprobe ip_vs", true); !seen {
			log.Warn("cannot load the ip_vs kernel module; UDP and SCTP listeners will not work",
				zap.Error(err), zap.String("output", strings.TrimSpace(string(out))))
		}
	}
	// The operator's own tuning first, as upstream's amphora-netns unit
	// loads it into a new namespace, so that the required values below
	// win where both set a key.
	if _, done := systemTuned.LoadOrStore(namespace, true); !done || created {
		loadSystemSysctls(namespace, log)
	}
	reportMissing(namespace, applyHere(HostSysctls), log)
	return applySysctls(namespace, NamespaceSysctls, log)
}

// systemSysctlsTimeout bounds `sysctl --system`: it reads a few files and
// writes /proc/sys, and a wedged one must not hold the agent's start.
const systemSysctlsTimeout = 30 * time.Second

// systemTuned holds the namespaces `sysctl --system` ran in since the
// agent started: once at start-up, and again only for a namespace this
// process had to create anew.
var systemTuned sync.Map

// loadSystemSysctls runs `sysctl --system` inside the namespace (the
// image's /etc/sysctl.d and the rest of its search path). A failure, or a
// key the namespace refuses, is logged and does not stop the agent, as
// upstream's unit ignores it.
func loadSystemSysctls(namespace string, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), systemSysctlsTimeout)
	defer cancel()
	cmd := procgroup.Command(ctx, "sysctl", "--system")
	out, err := procgroup.CombinedOutput(cmd, func(c *exec.Cmd) error { return StartIn(namespace, c) })
	if err != nil {
		log.Warn("sysctl --system in the namespace failed; the required settings are applied anyway",
			zap.String("namespace", namespace), zap.Error(err), zap.String("output", lastLines(out, 5)))
		return
	}
	log.Info("system sysctl settings loaded into the namespace", zap.String("namespace", namespace))
}

// lastLines is the end of a command's output, enough to say what failed.
func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

type sysctlMiss struct {
	key string
	err error
}

// applyHere applies settings in the calling thread's namespace (the
// agent's, the initial one) and returns those that failed.
func applyHere(settings []Sysctl) []sysctlMiss {
	var missing []sysctlMiss
	for _, s := range settings {
		if err := writeSysctl(s.Key, s.Value); err != nil {
			missing = append(missing, sysctlMiss{s.Key, err})
		}
	}
	return missing
}

// reportMissing logs each unavailable setting once per process.
func reportMissing(namespace string, missing []sysctlMiss, log *zap.Logger) {
	for _, m := range missing {
		if _, seen := lacking.LoadOrStore(m.key, true); !seen {
			log.Warn("kernel setting not available; continuing without it",
				zap.String("namespace", namespace), zap.String("sysctl", m.key), zap.Error(m.err))
		}
	}
}

func validName(namespace string) error {
	if namespace == "" || namespace == "." || namespace == ".." || strings.ContainsAny(namespace, "/\x00") {
		return fmt.Errorf("invalid network namespace name %q", namespace)
	}
	return nil
}

func isNamespaceMount(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}

// create bind-mounts a new network namespace at RunDir/namespace unless
// one is already there. It reports whether it made one.
func create(namespace string) (bool, error) {
	path := filepath.Join(RunDir, namespace)
	if isNamespaceMount(path) {
		return false, nil
	}
	if err := os.MkdirAll(RunDir, 0o755); err != nil {
		return false, err
	}
	if err := makeShared(RunDir); err != nil {
		return false, err
	}
	// A plain file without a namespace on it is left from a crash between
	// creating the mount point and mounting: reuse it.
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o444)
	if err != nil {
		return false, fmt.Errorf("create %s: %w", path, err)
	}
	f.Close()
	err = onThreadIn("", func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		if err := unix.Mount("/proc/thread-self/ns/net", path, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mount the namespace on %s: %w", path, err)
		}
		return nil
	})
	if err != nil {
		os.Remove(path)
		return false, fmt.Errorf("create network namespace %s: %w", namespace, err)
	}
	return true, nil
}

// makeShared makes dir a shared mount point, as `ip netns add` does, so
// namespaces mounted later are seen by every mount namespace (for
// instance services started with a private /tmp).
func makeShared(dir string) error {
	err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("make %s shared: %w", dir, err)
	}
	// Not a mount point yet: bind it onto itself first.
	if err := unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind-mount %s: %w", dir, err)
	}
	if err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s shared: %w", dir, err)
	}
	return nil
}

func loUp(namespace string) error {
	h, err := openHandle(namespace)
	if err != nil {
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("lo in %s: %w", namespace, err)
	}
	if lo.Attrs().Flags&1 == 0 { // net.FlagUp
		if err := h.LinkSetUp(lo); err != nil {
			return fmt.Errorf("set lo up in %s: %w", namespace, err)
		}
	}
	return nil
}

// applySysctls writes each setting from a thread inside the namespace
// (files under /proc/sys/net belong to the namespace of the thread that
// opens them). A setting the namespace lacks, or refuses, is reported
// once; the rest still apply.
func applySysctls(namespace string, settings []Sysctl, log *zap.Logger) error {
	var missing []sysctlMiss
	err := onThreadIn(namespace, func() error {
		missing = applyHere(settings)
		return nil
	})
	if err != nil {
		return err
	}
	reportMissing(namespace, missing, log)
	return nil
}

func sysctlPath(key string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
}

// writeSysctl sets key, skipping the write when the value is already in
// force (some settings refuse writes inside a namespace even when equal).
func writeSysctl(key, value string) error {
	p := sysctlPath(key)
	if cur, err := os.ReadFile(p); err == nil && strings.Join(strings.Fields(string(cur)), " ") == value {
		return nil
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Do runs fn on an OS thread inside the named namespace, for reads that
// follow the calling thread's namespace (/proc/thread-self/net/...).
func Do(namespace string, fn func() error) error { return onThreadIn(namespace, fn) }

// onThreadIn runs fn on a fresh OS thread that is first moved into the
// named namespace ("" leaves it where it is; fn may unshare it). The
// thread is moved back and released afterwards. Only if that fails does
// the goroutine exit with the thread still locked: the runtime then ends
// the thread rather than hand it, in another namespace, to other
// goroutines. Not every time: the main thread is never ended but wedged,
// still in the namespace, and /proc/<pid>/ns/net (what `ip link set ...
// netns <pid>` and /proc/self/ns/net name) is the main thread's, so a
// thread left inside would be taken for the process's own namespace.
func onThreadIn(namespace string, fn func() error) error {
	var target vnetns.NsHandle = -1
	if namespace != "" {
		h, err := vnetns.GetFromName(namespace)
		if err != nil {
			return fmt.Errorf("network namespace %s: %w", namespace, err)
		}
		target = h
		defer target.Close()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := vnetns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("current network namespace: %w", err)
			return
		}
		defer orig.Close()
		if target >= 0 {
			if err := unix.Setns(int(target), unix.CLONE_NEWNET); err != nil {
				// Still where it was: nothing to undo.
				runtime.UnlockOSThread()
				done <- fmt.Errorf("enter network namespace %s: %w", namespace, err)
				return
			}
		}
		err = fn()
		if unix.Setns(int(orig), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

// openHandle opens a netlink route handle inside the named namespace
// ("" is the agent's own).
func openHandle(namespace string) (*netlink.Handle, error) {
	if namespace == "" {
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return nil, fmt.Errorf("netlink: %w", err)
		}
		return h, nil
	}
	ns, err := vnetns.GetFromName(namespace)
	if err != nil {
		return nil, fmt.Errorf("network namespace %s: %w", namespace, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink in %s: %w", namespace, err)
	}
	return h, nil
}
