package netns

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/fault"
)

// undo is a stack of compensations run when a plug fails part-way.
type undo []func()

func (u *undo) push(fn func()) { *u = append(*u, fn) }

func (u undo) run() {
	for i := len(u) - 1; i >= 0; i-- {
		u[i]()
	}
}

// PlugVIP is POST /1.0/plug/vip/{vip}. It returns the 202 details text.
func (n *Network) PlugVIP(ctx context.Context, vip string, body []byte) (string, error) {
	req, err := DecodeVIPRequest(body)
	if err != nil {
		return "", err
	}
	vips, fixes, err := validateVIPs(vip, req)
	if err != nil {
		return "", err
	}
	n.warnFixes(fixes)
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

// warnFixes logs each host route destination the validation corrected:
// the subnet's owner should fix the route in Neutron.
func (n *Network) warnFixes(fixes []hostRouteFix) {
	for _, f := range fixes {
		n.log.Warn("host route destination has host bits set; applying its network instead",
			zap.String("field", f.Field), zap.String("sent", f.Sent), zap.Stringer("applied", f.Applied))
	}
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
		if err := putBack(path, old, readErr); err != nil {
			n.log.Error("rollback: cannot restore the interface file", zap.String("file", path), zap.Error(err))
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
	fixed, fixes, err := validateFixedIPs(req.FixedIPs)
	if err != nil {
		return "", err
	}
	n.warnFixes(fixes)
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
	vips, fixes, err := validateVIPs(info.VIP, &info.VIPRequest)
	if err != nil {
		return nil, "", err
	}
	n.warnFixes(fixes)
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
	if err := n.conf.upFrom(ctx, file, old); err != nil {
		n.log.Warn("update failed; restoring the previous configuration", zap.String("interface", file.Name), zap.Error(err))
		restore()
		if old != nil {
			if rerr := n.conf.upFrom(context.WithoutCancel(ctx), old, file); rerr != nil {
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
