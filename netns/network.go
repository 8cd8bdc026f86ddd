package netns

import (
	"bytes"
	"errors"
	"io/fs"
	"net"
	"os"
	"strings"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/fsutil"
)

// ErrNoInterface is the 404 for a MAC no NIC has yet. The API answers it
// with upstream's body, {"details": "No suitable network interface
// found"}, which is what makes the controller retry the plug.
var ErrNoInterface = &fault.Error{Kind: fault.KindNotFound, Message: "No suitable network interface found"}

// Config is where the network state lives.
type Config struct {
	Namespace string
	// NetworkDir holds the interface files (agent_server_network_dir).
	NetworkDir string
	// PluggedFile lists "<mac> <name>" per plugged port, for restore.
	PluggedFile string
	// NftablesFile is the VIP rules file.
	NftablesFile string
	// PCIRescanFile is written with "1" when a MAC is not found yet.
	PCIRescanFile string
	// MasqueradeScript is the LVS masquerade script interface files name.
	MasqueradeScript string
	// ActiveStandby reports the topology in force at the time of a call.
	ActiveStandby func() bool
}

// Network plugs ports into the namespace and configures them.
type Network struct {
	cfg    Config
	kernel Kernel
	log    *zap.Logger
	conf   *configurator
	rules  *nftRules
}

// NewNetwork builds a Network; a nil kernel is the real one.
func NewNetwork(cfg Config, kernel Kernel, log *zap.Logger) *Network {
	if log == nil {
		log = zap.NewNop()
	}
	if kernel == nil {
		kernel = SystemKernel{Log: log}
	}
	if cfg.ActiveStandby == nil {
		cfg.ActiveStandby = func() bool { return false }
	}
	n := &Network{cfg: cfg, kernel: kernel, log: log}
	n.rules = &nftRules{ns: cfg.Namespace, file: cfg.NftablesFile, kernel: kernel}
	n.conf = &configurator{ns: cfg.Namespace, kernel: kernel, log: log, rules: n.rules, wait: sleepCtx}
	return n
}

func normMAC(s string) (net.HardwareAddr, error) {
	mac, err := net.ParseMAC(strings.TrimSpace(s))
	if err != nil {
		return nil, err
	}
	return mac, nil
}

func linkByMAC(h Handle, mac net.HardwareAddr) (Link, bool, error) {
	links, err := h.Links()
	if err != nil {
		return Link{}, false, err
	}
	for _, l := range links {
		if bytes.Equal(l.MAC, mac) {
			return l, true, nil
		}
	}
	return Link{}, false, nil
}

// inNamespace finds the link with mac inside the namespace.
func (n *Network) inNamespace(mac net.HardwareAddr) (Link, bool, error) {
	h, err := n.kernel.Open(n.cfg.Namespace)
	if err != nil {
		return Link{}, false, fault.Internalf("open namespace %s: %w", n.cfg.Namespace, err)
	}
	defer h.Close()
	l, ok, err := linkByMAC(h, mac)
	if err != nil {
		return Link{}, false, fault.Internalf("list links in %s: %w", n.cfg.Namespace, err)
	}
	return l, ok, nil
}

// inHost finds the link with mac in the agent's namespace; when there is
// none it asks the kernel to rescan the PCI bus (the hot-plug may not
// have been noticed) and answers the 404 the controller retries on.
func (n *Network) inHost(mac net.HardwareAddr) (Link, error) {
	h, err := n.kernel.Open("")
	if err != nil {
		return Link{}, fault.Internalf("netlink: %w", err)
	}
	defer h.Close()
	l, ok, err := linkByMAC(h, mac)
	if err != nil {
		return Link{}, fault.Internalf("list links: %w", err)
	}
	if ok {
		return l, nil
	}
	n.log.Info("no interface with this MAC yet; rescanning the PCI bus", zap.Stringer("mac", mac))
	n.pciRescan()
	return Link{}, ErrNoInterface
}

// pciRescan writes "1" to the rescan file if it exists. It is a sysfs
// trigger, not a file the agent owns, so it is written in place.
func (n *Network) pciRescan() {
	if n.cfg.PCIRescanFile == "" {
		return
	}
	f, err := os.OpenFile(n.cfg.PCIRescanFile, os.O_WRONLY, 0)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			n.log.Warn("cannot trigger a PCI rescan", zap.Error(err))
		}
		return
	}
	defer f.Close()
	if _, err := f.WriteString("1"); err != nil {
		n.log.Warn("cannot trigger a PCI rescan", zap.Error(err))
	}
}

// putBack undoes a rewrite of path: old goes back when the file was there
// before (readErr is that first read's error), else the file goes.
func putBack(path string, old []byte, readErr error) error {
	if readErr == nil {
		return fsutil.WriteFile(path, old, 0o644)
	}
	return os.Remove(path)
}
