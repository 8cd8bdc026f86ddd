package cloud

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
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/vm"
)

// AmphoraVMs makes the compute driver boot real amphora VMs.
type AmphoraVMs struct {
	// Image is what an operator uploads: the agent baked in.
	Image    vm.Image
	MemoryMB int
	// Variants maps an image tag (an Octavia flavor's amp_image_tag) to
	// another image, as Glance would find one by its tag; servers built
	// with any other tag boot Image.
	Variants map[string]vm.Image
	// ClockOffset is each VM's clock's distance from the host's
	// (vm.Options.ClockOffset): negative for an amphora lagging the
	// controller.
	ClockOffset time.Duration
}

// image is what Nova would boot for the server's image tag.
func (o AmphoraVMs) image(tag string) vm.Image {
	if img, ok := o.Variants[tag]; ok {
		return img
	}
	return o.Image
}

// vmHypervisor boots each server as an amphora VM (internal/vm): the
// management NIC a tap on br-mgmt with the address the fabric gave its
// port, handed out by the controller's dnsmasq as Neutron's DHCP agent
// would; NICs attached later are taps hot-plugged through QMP onto their
// network's bridge.
type vmHypervisor struct {
	c    *ControlPlane
	opts AmphoraVMs

	mu   sync.Mutex
	vms  map[string]*vm.VM
	taps map[string][]string // server id → its taps
}

func (h *vmHypervisor) Boot(s *Server) error {
	if len(s.Ports) == 0 {
		return fmt.Errorf("server %s has no port", s.ID)
	}
	mgmt := s.Ports[0]
	if err := h.c.addDHCPHost(mgmt.MACAddress, mgmt.FixedIPs[0].IPAddress); err != nil {
		return err
	}
	tap := topo.UniqueName("aam")
	if err := h.c.ip("-n", h.c.NS.Name, "tuntap", "add", "dev", tap, "mode", "tap"); err != nil {
		return err
	}
	h.remember(s.ID, tap)
	if err := h.c.bridgePort(tap, "br-mgmt"); err != nil {
		return err
	}
	// Nova writes openstack/latest/user_data only when the create call
	// carried user data (Octavia's ComputeCreate always sends a
	// cloud-config).
	var userData []byte
	if s.UserData != "" {
		userData = []byte(s.UserData)
	}
	img := h.opts.image(s.ImageTag)
	v, err := startOffTest(h.c.t, func(t testing.TB) *vm.VM {
		return vm.Start(t, img, vm.Options{Name: s.Name, Files: s.Files, UserData: userData,
			InstanceID: s.ID, NetworkData: s.NetworkData, MemoryMB: h.opts.MemoryMB, ManagementTap: tap, ManagementMAC: mgmt.MACAddress,
			ClockOffset: h.opts.ClockOffset})
	})
	if err != nil {
		return fmt.Errorf("server %s: %v", s.ID, err)
	}
	h.mu.Lock()
	h.vms[s.ID] = v
	h.mu.Unlock()
	return nil
}

// bootTB is the test as vm.Start sees it on the fabric's boot goroutine,
// where t.Fatal would end only that goroutine and leave the fabric
// waiting: while booting, a fatal failure fails the test (Errorf is safe
// off its goroutine), is kept for Boot to return as the server's fault,
// and ends the boot goroutine. Afterwards the VM's failures (MustExec from
// the test) reach the test as they always do.
type bootTB struct {
	testing.TB
	mu      sync.Mutex
	booting bool
	err     error
}

func (b *bootTB) Fatal(args ...any)                 { b.fail(fmt.Sprint(args...)) }
func (b *bootTB) Fatalf(format string, args ...any) { b.fail(fmt.Sprintf(format, args...)) }
func (b *bootTB) FailNow()                          { b.fail("FailNow during a VM boot") }

func (b *bootTB) fail(msg string) {
	b.mu.Lock()
	booting := b.booting
	if booting {
		b.err = errors.New(msg)
	}
	b.mu.Unlock()
	if !booting {
		b.TB.Helper()
		b.TB.Fatal(msg)
	}
	b.TB.Errorf("booting a VM off the test's goroutine: %s", msg)
	runtime.Goexit()
}

// startOffTest runs start (vm.Start) on a goroutine of its own with a
// bootTB and returns its VM, or the failure that ended it.
func startOffTest(t testing.TB, start func(testing.TB) *vm.VM) (*vm.VM, error) {
	b := &bootTB{TB: t, booting: true}
	var v *vm.VM
	done := make(chan struct{})
	go func() {
		defer close(done)
		v = start(b)
	}()
	<-done
	b.mu.Lock()
	defer b.mu.Unlock()
	b.booting = false
	if b.err != nil {
		return nil, b.err
	}
	if v == nil {
		return nil, errors.New("the VM did not start")
	}
	return v, nil
}

func (h *vmHypervisor) remember(id, tap string) {
	h.mu.Lock()
	h.taps[id] = append(h.taps[id], tap)
	h.mu.Unlock()
}

// Attach hot-plugs a NIC with the port's MAC, as Nova attaches a port:
// the tap is made in the test process's namespace, where QEMU finds it by
// name, and then moved onto the network's bridge.
func (h *vmHypervisor) Attach(s *Server, p *Port, bridge string) error {
	h.mu.Lock()
	v := h.vms[s.ID]
	h.mu.Unlock()
	if v == nil {
		return fmt.Errorf("server %s has no VM", s.ID)
	}
	if bridge == "" {
		return fmt.Errorf("network %s has no bridge: %w", p.NetworkID, errNotModelled)
	}
	tap := topo.UniqueName("aan")
	if err := h.c.ip("tuntap", "add", "dev", tap, "mode", "tap"); err != nil {
		return err
	}
	if err := v.HotplugNIC(tap, p.MACAddress); err != nil {
		h.c.ip("link", "delete", tap)
		return err
	}
	if err := h.c.ip("link", "set", tap, "netns", h.c.NS.Name); err != nil {
		return err
	}
	h.remember(s.ID, tap)
	return h.c.bridgePort(tap, bridge)
}

// Detach unplugs the port's NIC from the VM (its tap goes with the VM).
func (h *vmHypervisor) Detach(s *Server, p *Port) error {
	h.mu.Lock()
	v := h.vms[s.ID]
	h.mu.Unlock()
	if v == nil {
		return fmt.Errorf("server %s has no VM", s.ID)
	}
	return v.UnplugNIC(p.MACAddress)
}

// Delete powers the VM off and removes its taps (the VM's folder goes
// with the test).
// journalKeepLimit bounds the journal's copy before a VM is deleted.
const journalKeepLimit = 20 * time.Second

func (h *vmHypervisor) Delete(s *Server) error {
	h.mu.Lock()
	v, taps := h.vms[s.ID], h.taps[s.ID]
	delete(h.vms, s.ID)
	delete(h.taps, s.ID)
	h.mu.Unlock()
	if v != nil {
		// Octavia deletes an amphora during a failover while the test
		// still checks traffic: its journal is kept for a failure found
		// later, within a bound that holds the flow back little.
		ctx, cancel := context.WithTimeout(context.Background(), journalKeepLimit)
		if err := v.KeepJournal(ctx); err != nil {
			h.c.t.Logf("cloud: amphora %s: journal not kept before its deletion: %v", s.Name, err)
		}
		cancel()
		v.PowerOff()
	}
	for _, tap := range taps {
		h.c.ip("-n", h.c.NS.Name, "link", "delete", tap)
	}
	return nil
}

// VMs lists the running amphora VMs by server id.
func (c *ControlPlane) VMs() map[string]*vm.VM {
	h, ok := c.Fabric.hypervisor.(*vmHypervisor)
	out := map[string]*vm.VM{}
	if !ok {
		return out
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, v := range h.vms {
		out[id] = v
	}
	return out
}

// ip runs iproute2 and returns its error with its output.
func (c *ControlPlane) ip(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// bridgePort puts tap (in the controller's namespace) on bridge, up.
func (c *ControlPlane) bridgePort(tap, bridge string) error {
	if err := c.ip("-n", c.NS.Name, "link", "set", tap, "master", bridge); err != nil {
		return err
	}
	return c.ip("-n", c.NS.Name, "link", "set", tap, "up")
}

// startDHCP runs dnsmasq on br-mgmt as Neutron's DHCP agent does: static
// leases only (one per management port, added by addDHCPHost), no DNS,
// no router.
func (c *ControlPlane) startDHCP() {
	hosts := c.path("dhcp-hosts")
	if err := os.WriteFile(hosts, nil, 0o600); err != nil {
		c.t.Fatal(err)
	}
	log := c.path("logs", "dnsmasq.out")
	s := c.startService("dnsmasq", log, nil, "dnsmasq", "--no-daemon", "--conf-file=/dev/null", "--port=0",
		"--interface=br-mgmt", "--bind-interfaces", "--dhcp-range=198.51.100.0,static,255.255.255.128,1h",
		"--dhcp-hostsfile="+hosts, "--dhcp-leasefile="+c.path("dhcp-leases"), "--pid-file="+c.path("dnsmasq.pid"),
		"--dhcp-option=3", "--dhcp-option=6", "--log-dhcp", "--log-facility=-", "--user=root")
	c.waitReady(s, 30*time.Second, func(s *Service) error { return s.logHas("DHCP, static leases only") })
	c.dhcp = s
}

// addDHCPHost gives mac the address ip and has dnsmasq read its hosts
// file again (SIGHUP).
func (c *ControlPlane) addDHCPHost(mac, ip string) error {
	if c.dhcp == nil {
		return fmt.Errorf("no DHCP server: %w", errNotModelled)
	}
	c.dhcpMu.Lock()
	defer c.dhcpMu.Unlock()
	f, err := os.OpenFile(filepath.Join(c.Dir, "dhcp-hosts"), os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%s,%s\n", mac, ip)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return c.dhcp.cmd.Process.Signal(syscall.SIGHUP)
}
