// Package vm boots amphora VMs under QEMU for the VM test tier: the base
// image from ../../../packaging/image/build.sh through its boot loader, a qcow2 overlay
// per VM, the agent's package on a disk labelled amphora-pkg, the
// controller's files and user data on a config drive (ISO 9660 labelled
// config-2, as Nova makes it), the management NIC on QEMU user networking
// with the API port forwarded to host loopback, QMP for hot-plug and
// power, and qemu-guest-agent to run commands inside.
package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Options describe one VM.
type Options struct {
	Name string
	// Package is the agent's .deb, installed at first boot.
	Package string
	// InstanceID is the Nova instance uuid on the config drive.
	InstanceID string
	// The config drive, as Nova writes it from the server's create call:
	// Files (target path → content: personality files, listed in
	// meta_data.json), UserData (openstack/latest/user_data), the
	// server's name, the hostname Nova derives from it and the key
	// pair (public_keys).
	Files      map[string][]byte
	UserData   []byte
	ServerName string
	Hostname   string
	KeyName    string
	PublicKey  string
	// NetworkData, when set, is the config drive's
	// openstack/latest/network_data.json (the server's ports as Nova
	// describes them).
	NetworkData []byte
	MemoryMB    int
	// ManagementSlot is the management NIC's PCI slot (default 3).
	ManagementSlot int
	// ManagementTap, when set, backs the management NIC (in
	// ManagementSlot, MAC ManagementMAC) with that tap device instead of QEMU user
	// networking: the cloud tier puts it on the controller's management
	// bridge, where the VM gets its address by DHCP. APIPort is then 0.
	ManagementTap string
	ManagementMAC string
	// ClockOffset sets the guest's clock this far from the host's at
	// each boot (negative: behind), through the emulated RTC the guest
	// kernel reads its time from.
	ClockOffset time.Duration
}

// VM is one running amphora VM.
type VM struct {
	Name    string
	Dir     string
	APIPort int // host loopback port forwarded to the VM's 9443
	t       testing.TB
	img     Image
	opts    Options

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	qmp  *jsonConn
	qga  *jsonConn
	nics []nic
	// nicSeq numbers hot-plugged NICs.
	nicSeq int
}

// nic is a hot-plugged NIC; it stays attached across power cycles, as
// Nova keeps a server's ports in its domain.
type nic struct{ id, tap, mac string }

// ManagementIPv6Net is the prefix QEMU's router advertisements give the
// management NIC (QEMU's own default, fec0::/64, is site-local).
const ManagementIPv6Net = "2001:db8:c0::/64"

// GatewayIP is the host as the VM sees it on the management network
// (QEMU user networking); UDP sent there reaches host loopback.
const GatewayIP = "192.0.2.2"

// Start boots a VM and returns once QEMU runs (not once the guest is up:
// see WaitGuest). The VM is powered off and its files removed in
// t.Cleanup.
func Start(t testing.TB, img Image, o Options) *VM {
	t.Helper()
	dir, err := os.MkdirTemp("", "aa-vm-")
	if err != nil {
		t.Fatal(err)
	}
	if o.MemoryMB == 0 {
		o.MemoryMB = MemoryMB()
	}
	v := &VM{Name: o.Name, Dir: dir, t: t, img: img, opts: o}
	t.Cleanup(func() {
		v.PowerOff()
		if t.Failed() {
			t.Logf("VM %s console (last lines):\n%s", v.Name, tail(v.Console(), 40))
			if j := v.KeptJournal(); j != "" {
				t.Logf("VM %s journal, kept before it was deleted (last lines):\n%s", v.Name, tail(j, 80))
			}
			// AMPHORA_VM_KEEP_FAILED=1 keeps a failed VM's folder (its
			// whole console, QEMU's log, the disks) for a post-mortem.
			if os.Getenv("AMPHORA_VM_KEEP_FAILED") != "" {
				t.Logf("VM %s: folder kept in %s", v.Name, dir)
				return
			}
		}
		os.RemoveAll(dir)
	})
	run := func(name string, args ...string) {
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	run("qemu-img", "create", "-q", "-f", "qcow2", "-b", img.Base, "-F", "qcow2", v.path("disk.qcow2"))
	v.configDrive(o, run)
	pkgDir := v.path("pkg")
	if err := os.MkdirAll(pkgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if o.Package != "" {
		data, err := os.ReadFile(o.Package)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(pkgDir, "amphora-agent.deb"), data, 0o644)
	}
	run("xorriso", "-as", "mkisofs", "-quiet", "-V", "amphora-pkg", "-J", "-r", "-o", v.path("pkg.iso"), pkgDir)
	if o.ManagementTap == "" {
		v.APIPort = freePort(t)
	}
	v.boot()
	return v
}

func (v *VM) path(name string) string { return filepath.Join(v.Dir, name) }

// configDrive writes the drive as Nova does: openstack/latest/meta_data.json
// names the instance and its key and lists each file's target path and its
// content under openstack/content/; the user data sits beside it.
func (v *VM) configDrive(o Options, run func(string, ...string)) {
	root := v.path("config-drive")
	content := filepath.Join(root, "openstack", "content")
	latest := filepath.Join(root, "openstack", "latest")
	for _, d := range []string{content, latest} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			v.t.Fatal(err)
		}
	}
	type file struct {
		Path        string `json:"path"`
		ContentPath string `json:"content_path"`
	}
	type key struct {
		Name string `json:"name"`
		Type string `json:"type"`
		Data string `json:"data"`
	}
	md := struct {
		UUID       string            `json:"uuid"`
		Name       string            `json:"name"`
		Hostname   string            `json:"hostname,omitempty"`
		LaunchIdx  int               `json:"launch_index"`
		Zone       string            `json:"availability_zone"`
		PublicKeys map[string]string `json:"public_keys,omitempty"`
		Keys       []key             `json:"keys,omitempty"`
		Files      []file            `json:"files,omitempty"`
	}{UUID: o.InstanceID, Name: o.ServerName, Hostname: o.Hostname, Zone: "nova"}
	if md.Name == "" {
		md.Name = o.Name
	}
	if o.KeyName != "" {
		md.PublicKeys = map[string]string{o.KeyName: o.PublicKey}
		md.Keys = []key{{Name: o.KeyName, Type: "ssh", Data: o.PublicKey}}
	}
	i := 0
	for target, data := range o.Files {
		name := fmt.Sprintf("%04d", i)
		i++
		if err := os.WriteFile(filepath.Join(content, name), data, 0o644); err != nil {
			v.t.Fatal(err)
		}
		md.Files = append(md.Files, file{Path: target, ContentPath: "/content/" + name})
	}
	data, _ := json.Marshal(md)
	if err := os.WriteFile(filepath.Join(latest, "meta_data.json"), data, 0o644); err != nil {
		v.t.Fatal(err)
	}
	if o.UserData != nil {
		if err := os.WriteFile(filepath.Join(latest, "user_data"), o.UserData, 0o644); err != nil {
			v.t.Fatal(err)
		}
	}
	if o.NetworkData != nil {
		if err := os.WriteFile(filepath.Join(latest, "network_data.json"), o.NetworkData, 0o644); err != nil {
			v.t.Fatal(err)
		}
	}
	run("xorriso", "-as", "mkisofs", "-quiet", "-V", "config-2", "-J", "-r", "-o", v.path("config-drive.iso"), root)
}

// boot starts QEMU on the VM's disks (the overlay keeps its state across
// boots).
func (v *VM) boot() {
	t := v.t
	for _, s := range []string{"qmp.sock", "qga.sock"} {
		os.Remove(v.path(s))
	}
	slot := v.opts.ManagementSlot
	if slot == 0 {
		slot = 3
	}
	var taps []*os.File
	openFD := func(tap string) int {
		f, err := openTap(tap)
		if err != nil {
			t.Fatalf("VM %s: %v", v.Name, err)
		}
		taps = append(taps, f)
		return 2 + len(taps) // ExtraFiles start at fd 3
	}
	defer func() {
		for _, f := range taps {
			f.Close()
		}
	}()
	args := []string{
		"-name", v.Name, "-M", "pc", "-accel", Accel(v.img), "-m", strconv.Itoa(v.opts.MemoryMB), "-smp", "1",
		"-nographic", "-monitor", "none",
		// Appended, not truncated: after a power cycle the console still
		// shows the boots before it.
		"-chardev", "file,id=console,append=on,path=" + v.path("console.log"), "-serial", "chardev:console",
	}
	if off := v.opts.ClockOffset; off != 0 {
		args = append(args, "-rtc", "base="+time.Now().Add(off).UTC().Format("2006-01-02T15:04:05"))
		// Under KVM the guest would take the host's time from kvmclock
		// instead of the RTC.
		if Accel(v.img) == "kvm" {
			args = append(args, "-cpu", "qemu64,-kvmclock")
		}
	}
	// The management NIC is the first NIC, in whichever slot; the image's
	// network config takes the first NIC. It comes before the disks,
	// which take the free slots QEMU finds first.
	if v.opts.ManagementTap != "" {
		args = append(args, "-netdev", fmt.Sprintf("tap,id=mgmt,fd=%d", openFD(v.opts.ManagementTap)),
			"-device", fmt.Sprintf("virtio-net-pci,netdev=mgmt,mac=%s,addr=%x", v.opts.ManagementMAC, slot))
	} else {
		args = append(args, "-netdev", fmt.Sprintf("user,id=mgmt,net=192.0.2.0/24,ipv6-net=%s,hostfwd=tcp:127.0.0.1:%d-:9443", ManagementIPv6Net, v.APIPort),
			"-device", fmt.Sprintf("virtio-net-pci,netdev=mgmt,mac=52:54:00:c0:00:02,addr=%x", slot))
	}
	args = append(args,
		// The BIOS boots the disk through its boot loader, as Nova does.
		"-drive", "file="+v.path("disk.qcow2")+",if=none,id=root,format=qcow2,cache=unsafe",
		"-device", "virtio-blk-pci,drive=root,bootindex=0",
		"-drive", "file="+v.path("config-drive.iso")+",if=virtio,format=raw,readonly=on",
		"-drive", "file="+v.path("pkg.iso")+",if=virtio,format=raw,readonly=on",
		"-chardev", "socket,id=qga,path="+v.path("qga.sock")+",server=on,wait=off",
		"-device", "virtio-serial", "-device", "virtserialport,chardev=qga,name=org.qemu.guest_agent.0",
		"-qmp", "unix:"+v.path("qmp.sock")+",server=on,wait=off")
	// NICs hot-plugged before a power-off are there at the next boot.
	v.mu.Lock()
	nics := v.nics
	v.mu.Unlock()
	for _, n := range nics {
		args = append(args, "-netdev", fmt.Sprintf("tap,id=%s,fd=%d", n.id, openFD(n.tap)),
			"-device", fmt.Sprintf("virtio-net-pci,netdev=%s,mac=%s,id=%s-dev", n.id, n.mac, n.id))
	}
	cmd := exec.Command("qemu-system-x86_64", args...)
	cmd.ExtraFiles = taps
	log, err := os.Create(v.path("qemu.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	log.Close()
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	v.mu.Lock()
	v.cmd, v.done, v.qmp, v.qga = cmd, done, nil, nil
	v.mu.Unlock()
	qmp, err := dialJSON(v.path("qmp.sock"), 10*time.Second)
	if err != nil {
		t.Fatalf("QMP: %v\n%s", err, v.qemuLog())
	}
	qmp.readLine() // greeting
	if _, err := qmp.call("qmp_capabilities", nil); err != nil {
		<-done
		t.Fatalf("QMP: %v\n%s", err, v.qemuLog())
	}
	v.mu.Lock()
	v.qmp = qmp
	v.mu.Unlock()
}

func (v *VM) qemuLog() string {
	data, _ := os.ReadFile(v.path("qemu.log"))
	return string(data)
}

// Console is what the VM printed on its serial console.
func (v *VM) Console() string {
	data, _ := os.ReadFile(v.path("console.log"))
	return string(data)
}

// KeepJournal saves the guest's journal of this boot (its last lines)
// in the VM's folder, for a VM about to be deleted while its test goes
// on: a failure found later can then still be read against what the
// amphora logged. A VM that does not run or does not answer within ctx
// keeps nothing.
func (v *VM) KeepJournal(ctx context.Context) error {
	if !v.Running() {
		return errors.New("the VM does not run")
	}
	_, out, err := v.Exec(ctx, "journalctl -b --no-pager -o short-precise -n 2000")
	if err != nil {
		return err
	}
	return os.WriteFile(v.path("journal.log"), []byte(out), 0o644)
}

// KeptJournal is what KeepJournal saved, "" if nothing.
func (v *VM) KeptJournal() string {
	data, _ := os.ReadFile(v.path("journal.log"))
	return string(data)
}

// DefaultMemoryMB is a VM's memory when neither Options.MemoryMB nor
// AMPHORA_VM_MEMORY_MB says otherwise.
const DefaultMemoryMB = 768

// MemoryMB is a VM's memory when Options.MemoryMB is zero:
// AMPHORA_VM_MEMORY_MB (the Makefile's VM_MEMORY, for runs with smaller
// guests, such as 512) or DefaultMemoryMB.
func MemoryMB() int {
	if n, err := strconv.Atoi(os.Getenv("AMPHORA_VM_MEMORY_MB")); err == nil && n > 0 {
		return n
	}
	return DefaultMemoryMB
}

// HostRSSKiB is what QEMU holds in the host's memory (its VmRSS), 0 when
// it does not run.
func (v *VM) HostRSSKiB() int {
	v.mu.Lock()
	cmd := v.cmd
	v.mu.Unlock()
	if cmd == nil || cmd.Process == nil || !v.Running() {
		return 0
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kib, _ := strconv.Atoi(f[1])
			return kib
		}
	}
	return 0
}

// Running reports whether QEMU still runs.
func (v *VM) Running() bool {
	v.mu.Lock()
	done := v.done
	v.mu.Unlock()
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// PowerOff pulls the plug (QMP quit; kill if that does not work).
func (v *VM) PowerOff() {
	v.mu.Lock()
	cmd, done, qmp := v.cmd, v.done, v.qmp
	v.mu.Unlock()
	if cmd == nil {
		return
	}
	if qmp != nil {
		qmp.call("quit", nil)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// PowerOn boots the VM again after PowerOff, on the same disks.
func (v *VM) PowerOn() { v.boot() }

// QMP runs a QEMU monitor command.
func (v *VM) QMP(command string, args any) (json.RawMessage, error) {
	v.mu.Lock()
	qmp := v.qmp
	v.mu.Unlock()
	if qmp == nil {
		return nil, errors.New("no QMP connection")
	}
	return qmp.call(command, args)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
