package netns

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
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

// undo is a stack of compensations run when a plug fails part-way.
type undo []func()

func (u *undo) push(fn func()) { *u = append(*u, fn) }

func (u undo) run() {
	for i := len(u) - 1; i >= 0; i-- {
		u[i]()
	}
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

// PlugVIP is POST /1.0/plug/vip/{vip}. It returns the 202 details text.
func (n *Network) PlugVIP(ctx context.Context, vip string, body []byte) (string, error) {
	req, err := DecodeVIPRequest(body)
	if err != nil {
		return "", err
	}
	vips, err := validateVIPs(vip, req)
	if err != nil {
		return "", err
	}
	vrrp, vrrpLen, err := validateVRRP(req, vips[0].subnet)
	if err != nil {
		return "", err
	}
	mac, err := n.prepare(req.MACAddress)
	if err != nil {
		return "", err
	}
	if _, ok, err := n.inNamespace(mac); err != nil {
		return "", err
	} else if ok {
		return "", fault.Conflict("Interface already exists")
	}
	host, err := n.inHost(mac)
	if err != nil {
		return "", err
	}
	as := n.cfg.ActiveStandby()
	file := renderVIPFile(vipFileInput{
		name: VIPInterface, mtu: deref(req.MTU), vips: vips, vrrp: vrrp, vrrpPrefixlen: vrrpLen,
		activeStandby: as, sriov: derefBool(req.IsSRIOV), masquerade: n.cfg.MasqueradeScript,
	})
	if err := n.plugNew(ctx, host, mac, file); err != nil {
		return "", fault.Internal("Error plugging VIP", err.Error(), err)
	}
	addrs := make([]string, 0, len(vips))
	var adv []netip.Addr
	for _, v := range vips {
		addrs = append(addrs, v.addr.StringExpanded())
		adv = append(adv, v.addr)
	}
	if !as {
		n.advertise(ctx, adv)
	}
	return fmt.Sprintf("VIPs plugged on interface %s: %s", VIPInterface, strings.Join(addrs, ", ")), nil
}

func deref(p *int) int {
	if p == nil || *p < 0 {
		return 0
	}
	return *p
}

func derefBool(p *bool) bool { return p != nil && *p }

// plugNew writes the interface file and the plugged-interfaces line, moves
// the host link into the namespace under file.Name and brings it up. Any
// failure undoes every step taken, so the controller's retry starts from
// scratch instead of meeting a half-configured "Interface already exists".
func (n *Network) plugNew(ctx context.Context, host Link, mac net.HardwareAddr, file *InterfaceFile) (err error) {
	var u undo
	defer func() {
		if err != nil {
			n.log.Warn("plug failed; rolling back", zap.String("interface", file.Name), zap.Stringer("mac", mac), zap.Error(err))
			u.run()
		}
	}()
	restoreFile, err := n.replaceInterfaceFile(file)
	if err != nil {
		return err
	}
	u.push(restoreFile)
	restorePlugged, err := n.addPlugged(mac, file.Name)
	if err != nil {
		return err
	}
	u.push(restorePlugged)

	h, err := n.kernel.Open("")
	if err != nil {
		return err
	}
	err = h.Move(host.Index, n.cfg.Namespace, file.Name)
	h.Close()
	if err != nil {
		return fmt.Errorf("move %s into %s as %s: %w", host.Name, n.cfg.Namespace, file.Name, err)
	}
	n.log.Info("interface moved into the namespace", zap.String("from", host.Name), zap.String("to", file.Name),
		zap.Stringer("mac", mac), zap.String("namespace", n.cfg.Namespace))
	u.push(func() { n.moveBack(context.WithoutCancel(ctx), mac, file, host) })

	if err := n.conf.up(ctx, file); err != nil {
		return fmt.Errorf("interface up %s: %w", file.Name, err)
	}
	return nil
}

// moveBack undoes a move: the configuration is taken down (rules are the
// namespace's, not the link's, so they must go explicitly) and the link
// returns to the agent's namespace under its old name and MTU.
func (n *Network) moveBack(ctx context.Context, mac net.HardwareAddr, file *InterfaceFile, orig Link) {
	if err := n.conf.down(ctx, file); err != nil {
		n.log.Warn("rollback: interface down", zap.String("interface", file.Name), zap.Error(err))
	}
	h, err := n.kernel.Open(n.cfg.Namespace)
	if err != nil {
		n.log.Error("rollback: cannot open the namespace", zap.Error(err))
		return
	}
	defer h.Close()
	l, ok, err := linkByMAC(h, mac)
	if err != nil || !ok {
		n.log.Error("rollback: link not found in the namespace", zap.Stringer("mac", mac), zap.Error(err))
		return
	}
	if err := h.Move(l.Index, "", orig.Name); err != nil {
		n.log.Error("rollback: cannot move the link back", zap.String("interface", file.Name), zap.Error(err))
		return
	}
	host, err := n.kernel.Open("")
	if err != nil {
		return
	}
	defer host.Close()
	if l, ok, err := linkByMAC(host, mac); err == nil && ok && l.MTU != orig.MTU && orig.MTU > 0 {
		if err := host.SetMTU(l.Index, orig.MTU); err != nil {
			n.log.Warn("rollback: cannot restore the MTU", zap.String("interface", orig.Name), zap.Error(err))
		}
	}
}

// replaceInterfaceFile writes file and returns how to put back what was
// there before.
func (n *Network) replaceInterfaceFile(file *InterfaceFile) (func(), error) {
	path := interfaceFilePath(n.cfg.NetworkDir, file.Name)
	old, readErr := os.ReadFile(path)
	if err := WriteInterfaceFile(n.cfg.NetworkDir, file); err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return func() {
		var err error
		if readErr == nil {
			err = fsutil.WriteFile(path, old, 0o644)
		} else {
			err = os.Remove(path)
		}
		if err != nil {
			n.log.Error("rollback: cannot restore the interface file", zap.String("file", path), zap.Error(err))
		}
	}, nil
}

// Plugged is one line of the plugged-interfaces file.
type Plugged struct {
	MAC  net.HardwareAddr
	Name string
}

// ReadPlugged reads the plugged-interfaces file ("<mac> <name>" lines); a
// missing file lists nothing. Malformed lines are skipped.
func ReadPlugged(path string) ([]Plugged, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Plugged
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		mac, err := normMAC(f[0])
		if err != nil {
			continue
		}
		out = append(out, Plugged{MAC: mac, Name: f[1]})
	}
	return out, nil
}

// addPlugged appends "<mac> <name>" unless the MAC is listed already, and
// returns how to put back the previous content.
func (n *Network) addPlugged(mac net.HardwareAddr, name string) (func(), error) {
	path := n.cfg.PluggedFile
	old, readErr := os.ReadFile(path)
	if readErr != nil && !errors.Is(readErr, fs.ErrNotExist) {
		return nil, readErr
	}
	list, err := ReadPlugged(path)
	if err != nil {
		return nil, err
	}
	for _, p := range list {
		if bytes.Equal(p.MAC, mac) {
			return func() {}, nil
		}
	}
	data := old
	if len(data) > 0 && data[len(data)-1] != '\n' {
		data = append(data, '\n')
	}
	data = append(data, []byte(mac.String()+" "+name+"\n")...)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if err := fsutil.WriteFile(path, data, 0o644); err != nil {
		return nil, err
	}
	return func() {
		var err error
		if readErr == nil {
			err = fsutil.WriteFile(path, old, 0o644)
		} else {
			err = os.Remove(path)
		}
		if err != nil {
			n.log.Error("rollback: cannot restore the plugged interfaces file", zap.Error(err))
		}
	}, nil
}

// prepare parses the port's MAC and makes sure the namespace exists, the
// first steps of both plugs. Upstream finds no link for a malformed MAC,
// so that is answered like a NIC not there yet (rescan and the 404).
func (n *Network) prepare(macAddress string) (net.HardwareAddr, error) {
	mac, err := normMAC(macAddress)
	if err != nil {
		n.pciRescan()
		return nil, ErrNoInterface
	}
	return mac, n.ensureNamespace()
}

func (n *Network) ensureNamespace() error {
	if err := n.kernel.EnsureNamespace(n.cfg.Namespace); err != nil {
		return fault.Internalf("network namespace %s: %w", n.cfg.Namespace, err)
	}
	return nil
}

func (n *Network) advertise(ctx context.Context, addrs []netip.Addr) {
	if len(addrs) == 0 {
		return
	}
	if adv, ok := n.kernel.(interface {
		Advertise(ctx context.Context, namespace string, addrs []netip.Addr) error
	}); ok {
		if err := adv.Advertise(ctx, n.cfg.Namespace, addrs); err != nil {
			n.log.Debug("address advertisement failed", zap.Error(err))
		}
	}
}

// Advertise implements the optional advertiser of a Kernel.
func (k SystemKernel) Advertise(ctx context.Context, namespace string, addrs []netip.Addr) error {
	return AdvertiseWith(ctx, namespace, addrs, k.Log)
}

// PlugNetwork is POST /1.0/plug/network. It returns the 202 details text.
func (n *Network) PlugNetwork(ctx context.Context, body []byte) (string, error) {
	req, err := DecodeNetworkRequest(body)
	if err != nil {
		return "", err
	}
	fixed, err := validateFixedIPs(req.FixedIPs)
	if err != nil {
		return "", err
	}
	mac, err := n.prepare(req.MACAddress)
	if err != nil {
		return "", err
	}
	var adv []netip.Addr
	for _, f := range fixed {
		adv = append(adv, f.addr)
	}
	sriov := derefBool(req.IsSRIOV)

	existing, ok, err := n.inNamespace(mac)
	if err != nil {
		return "", err
	}
	if ok {
		file, message, err := n.updatedFile(existing.Name, req, fixed, sriov)
		if err != nil {
			return "", err
		}
		if err := n.update(ctx, file); err != nil {
			return "", fault.Internal(message, err.Error(), err)
		}
		n.advertise(ctx, adv)
		return "Updated existing interface " + existing.Name, nil
	}

	host, err := n.inHost(mac)
	if err != nil {
		return "", err
	}
	name, err := n.nextName()
	if err != nil {
		return "", err
	}
	n.log.Info("plugging network port", zap.String("interface", host.Name), zap.String("name", name), zap.Stringer("mac", mac))
	file := renderPortFile(name, deref(req.MTU), fixed, sriov, n.cfg.MasqueradeScript)
	if err := n.plugNew(ctx, host, mac, file); err != nil {
		return "", fault.Internal("Error plugging network", err.Error(), err)
	}
	n.advertise(ctx, adv)
	return "Plugged on interface " + name, nil
}

// updatedFile renders the new file of a port already in the namespace:
// the VIP port's when vip_net_info comes along (a subnet added to the VIP
// port), a member port's otherwise.
func (n *Network) updatedFile(name string, req *NetworkRequest, fixed []fixedIPSpec, sriov bool) (*InterfaceFile, string, error) {
	if req.VIPNetInfo == nil {
		return renderPortFile(name, deref(req.MTU), fixed, sriov, n.cfg.MasqueradeScript), "Error plugging network", nil
	}
	info := req.VIPNetInfo
	vips, err := validateVIPs(info.VIP, &info.VIPRequest)
	if err != nil {
		return nil, "", err
	}
	vrrp, vrrpLen, err := validateVRRP(&info.VIPRequest, vips[0].subnet)
	if err != nil {
		return nil, "", err
	}
	return renderVIPFile(vipFileInput{
		name: name, mtu: deref(req.MTU), vips: vips, vrrp: vrrp, vrrpPrefixlen: vrrpLen, fixedIPs: fixed,
		activeStandby: n.cfg.ActiveStandby(), sriov: sriov, masquerade: n.cfg.MasqueradeScript,
	}), "Error plugging vip", nil
}

// update rewrites the file of a plugged interface and applies it; when that
// fails the old file is put back and applied again.
func (n *Network) update(ctx context.Context, file *InterfaceFile) error {
	old, _ := ReadInterfaceFile(n.cfg.NetworkDir, file.Name)
	restore, err := n.replaceInterfaceFile(file)
	if err != nil {
		return err
	}
	if err := n.conf.up(ctx, file); err != nil {
		n.log.Warn("update failed; restoring the previous configuration", zap.String("interface", file.Name), zap.Error(err))
		restore()
		if old != nil {
			if rerr := n.conf.up(context.WithoutCancel(ctx), old); rerr != nil {
				n.log.Error("cannot re-apply the previous configuration", zap.String("interface", file.Name), zap.Error(rerr))
			}
		}
		return err
	}
	return nil
}

// nextName is the first ethN, N >= 2, not used in the namespace.
func (n *Network) nextName() (string, error) {
	h, err := n.kernel.Open(n.cfg.Namespace)
	if err != nil {
		return "", fault.Internalf("open namespace: %w", err)
	}
	defer h.Close()
	links, err := h.Links()
	if err != nil {
		return "", fault.Internalf("list links: %w", err)
	}
	used := map[string]bool{}
	for _, l := range links {
		used[l.Name] = true
	}
	for i := 2; ; i++ {
		if name := fmt.Sprintf("eth%d", i); !used[name] {
			return name, nil
		}
	}
}

// InterfaceFor is GET /1.0/interface/{ip}: the interface inside the
// namespace (and only there) that carries ip, from live kernel state.
func (n *Network) InterfaceFor(ip string) (string, error) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return "", fault.Invalid("Invalid IP address")
	}
	a = a.Unmap()
	notFound := fault.NotFound("Error interface not found for IP address")
	if a.Zone() != "" {
		// Upstream parses a scoped address but never finds it: kernel
		// addresses carry no zone.
		return "", notFound
	}
	h, err := n.kernel.Open(n.cfg.Namespace)
	if err != nil {
		// No namespace yet: nothing can hold the address.
		return "", notFound
	}
	defer h.Close()
	links, err := h.Links()
	if err != nil {
		return "", fault.Internalf("list links: %w", err)
	}
	for _, l := range links {
		addrs, err := h.Addrs(l.Index)
		if err != nil {
			return "", fault.Internalf("list addresses: %w", err)
		}
		for _, x := range addrs {
			if x.Prefix.Addr() == a {
				return l.Name, nil
			}
		}
	}
	return "", notFound
}

// SetRules is PUT /1.0/interface/{ip}/rules.
func (n *Network) SetRules(ctx context.Context, ip string, body []byte) error {
	if _, err := n.InterfaceFor(ip); err != nil {
		return err
	}
	rules, err := DecodeFirewallRules(body)
	if err != nil {
		return err
	}
	if err := n.rules.apply(ctx, rules); err != nil {
		return fault.Internalf("apply nftables rules: %w", err)
	}
	return nil
}

// WriteLoFile writes lo.json, as upstream's agent does at start-up.
func (n *Network) WriteLoFile() error { return WriteInterfaceFile(n.cfg.NetworkDir, LoFile()) }

// Restore brings the data plane back after a reboot or an agent restart:
// the namespace is ensured, every port of the plugged-interfaces file that
// is back in the agent's namespace is moved into it under its recorded
// name, and every interface file is applied (`interface up all`). Ports
// that are gone are logged; one failing interface does not stop the
// others. What the upstream image did with its amphora-netns unit.
func (n *Network) Restore(ctx context.Context) error {
	if err := n.WriteLoFile(); err != nil {
		n.log.Warn("cannot write lo.json", zap.Error(err))
	}
	if err := n.kernel.EnsureNamespace(n.cfg.Namespace); err != nil {
		return fmt.Errorf("network namespace %s: %w", n.cfg.Namespace, err)
	}
	plugged, err := ReadPlugged(n.cfg.PluggedFile)
	if err != nil {
		return err
	}
	var errs []error
	if len(plugged) > 0 {
		if err := n.movePlugged(plugged); err != nil {
			errs = append(errs, err)
		}
	}
	// The VIP firewall comes back before the interfaces do, so the VIP is
	// never reachable unfiltered. Upstream reloaded it only for SR-IOV
	// ports; any rules the controller set are restored here.
	if _, err := os.Stat(n.cfg.NftablesFile); err == nil {
		if err := n.rules.ensureBase(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := n.Interfaces(ctx, "up", "all"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (n *Network) movePlugged(plugged []Plugged) error {
	host, err := n.kernel.Open("")
	if err != nil {
		return err
	}
	defer host.Close()
	inside, err := n.kernel.Open(n.cfg.Namespace)
	if err != nil {
		return err
	}
	defer inside.Close()
	var errs []error
	for _, p := range plugged {
		if _, ok, err := linkByMAC(inside, p.MAC); err != nil {
			errs = append(errs, err)
			continue
		} else if ok {
			continue
		}
		l, ok, err := linkByMAC(host, p.MAC)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			n.log.Warn("plugged interface not present; not restored", zap.Stringer("mac", p.MAC), zap.String("name", p.Name))
			continue
		}
		if err := host.Move(l.Index, n.cfg.Namespace, p.Name); err != nil {
			errs = append(errs, fmt.Errorf("move %s into %s as %s: %w", l.Name, n.cfg.Namespace, p.Name, err))
			continue
		}
		n.log.Info("plugged interface restored into the namespace", zap.String("from", l.Name), zap.String("name", p.Name), zap.Stringer("mac", p.MAC))
	}
	return errors.Join(errs...)
}

// Interfaces is `interface up|down <name|all>`: it applies (or takes
// down) the named interface file, or all of them.
func (n *Network) Interfaces(ctx context.Context, action, name string) error {
	var fn func(context.Context, *InterfaceFile) error
	switch action {
	case "up":
		fn = n.conf.up
	case "down":
		fn = n.conf.down
	default:
		return fmt.Errorf("unknown action %q", action)
	}
	var files []*InterfaceFile
	var errs []error
	if name == "all" {
		all, err := ReadInterfaceFiles(n.cfg.NetworkDir)
		if err != nil {
			errs = append(errs, err)
		}
		files = all
	} else {
		f, err := ReadInterfaceFile(n.cfg.NetworkDir, name)
		if err != nil {
			return fmt.Errorf("could not find interface %q: %w", name, err)
		}
		files = []*InterfaceFile{f}
	}
	for _, f := range files {
		if err := fn(ctx, f); err != nil {
			errs = append(errs, fmt.Errorf("action %s on interface %s: %w", action, f.Name, err))
		}
	}
	return errors.Join(errs...)
}
