// Package vm boots amphora VMs under QEMU for the VM test tier: the base
// image from ../../../packaging/image/build.sh through its boot loader, a qcow2 overlay
// per VM, the agent's package on a disk labelled amphora-pkg, the
// controller's files and user data on a config drive (ISO 9660 labelled
// config-2, as Nova makes it), the management NIC on QEMU user networking
// with the API port forwarded to host loopback, QMP for hot-plug and
// power, and qemu-guest-agent to run commands inside.
package vm

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Image is a built base image.
type Image struct {
	Dir    string
	Base   string // base.qcow2
	Kernel string // vmlinuz (the accelerator probe boots it)
	Initrd string // initrd.img
	Info   string // size and build time
}

type builtImage struct {
	once sync.Once
	img  Image
	err  error
}

var (
	imagesMu sync.Mutex
	images   = map[string]*builtImage{}
)

// BuildImage builds the base image once per test process (the script
// itself caches it by its inputs across runs).
func BuildImage(t testing.TB) Image {
	t.Helper()
	return BuildImageVariant(t, "")
}

// BuildImageVariant builds the image variant of build.sh
// (AMPHORA_IMAGE_VARIANT; "" is the base image), once per test process.
func BuildImageVariant(t testing.TB, variant string) Image {
	t.Helper()
	imagesMu.Lock()
	b := images[variant]
	if b == nil {
		b = &builtImage{}
		images[variant] = b
	}
	imagesMu.Unlock()
	b.once.Do(func() { b.img, b.err = buildImage(variant) })
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.img
}

func buildImage(variant string) (Image, error) {
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "..", "packaging", "image", "build.sh")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, script)
	cmd.Env = append(os.Environ(), "AMPHORA_IMAGE_VARIANT="+variant)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Image{}, fmt.Errorf("building the image %q: %v\n%s", variant, err, stderr.String())
	}
	dir := strings.TrimSpace(string(out))
	info, _ := os.ReadFile(filepath.Join(dir, "build-info.txt"))
	return Image{Dir: dir, Base: filepath.Join(dir, "base.qcow2"), Kernel: filepath.Join(dir, "vmlinuz"),
		Initrd: filepath.Join(dir, "initrd.img"), Info: strings.TrimSpace(string(info))}, nil
}

var (
	accelOnce sync.Once
	accel     string
)

// Accel is "kvm" when /dev/kvm runs a guest here, "tcg" otherwise. The
// probe boots the kernel without a root disk: under KVM it panics and
// QEMU exits within seconds; a KVM that hangs (as on some hosts) is
// killed and TCG used.
func Accel(img Image) string {
	accelOnce.Do(func() {
		accel = "tcg"
		if _, err := os.Stat("/dev/kvm"); err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "qemu-system-x86_64", "-accel", "kvm", "-M", "pc", "-m", "256",
			"-nographic", "-no-reboot", "-kernel", img.Kernel, "-append", "console=ttyS0 panic=-1 root=/dev/nonexistent")
		cmd.WaitDelay = time.Second
		// Only the panic counts: QEMU's exit status says nothing here.
		out, _ := cmd.CombinedOutput()
		if ctx.Err() == nil && strings.Contains(string(out), "Kernel panic") {
			accel = "kvm"
		}
	})
	return accel
}

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
		o.MemoryMB = DefaultMemoryMB
	}
	v := &VM{Name: o.Name, Dir: dir, t: t, img: img, opts: o}
	t.Cleanup(func() {
		v.PowerOff()
		if t.Failed() {
			t.Logf("VM %s console (last lines):\n%s", v.Name, tail(v.Console(), 40))
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

// DefaultMemoryMB is a VM's memory when Options.MemoryMB is zero.
const DefaultMemoryMB = 768

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

// HotplugNIC adds a virtio NIC with mac backed by the host tap device
// tap (which must exist), as Nova attaches a port.
func (v *VM) HotplugNIC(tap, mac string) error {
	v.mu.Lock()
	// Ids are never reused: a NIC unplugged earlier may still be
	// leaving the guest.
	v.nicSeq++
	id := fmt.Sprintf("nic%d", v.nicSeq)
	v.mu.Unlock()
	if _, err := v.QMP("netdev_add", map[string]any{"type": "tap", "id": id, "ifname": tap, "script": "no", "downscript": "no"}); err != nil {
		return err
	}
	if _, err := v.QMP("device_add", map[string]any{"driver": "virtio-net-pci", "netdev": id, "mac": mac, "id": id + "-dev"}); err != nil {
		return err
	}
	v.mu.Lock()
	v.nics = append(v.nics, nic{id: id, tap: tap, mac: mac})
	v.mu.Unlock()
	return nil
}

// UnplugNIC removes the hot-plugged NIC with mac, as Nova detaches a
// port: the guest is asked to release the device (ACPI), then its
// backend goes.
func (v *VM) UnplugNIC(mac string) error {
	v.mu.Lock()
	var found *nic
	for i := range v.nics {
		if v.nics[i].mac == mac {
			found = &v.nics[i]
		}
	}
	v.mu.Unlock()
	if found == nil {
		return fmt.Errorf("VM %s has no hot-plugged NIC %s", v.Name, mac)
	}
	id := found.id
	if _, err := v.QMP("device_del", map[string]any{"id": id + "-dev"}); err != nil {
		return err
	}
	// netdev_del is retried while QEMU refuses it: the device may still
	// be leaving the guest.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := v.QMP("netdev_del", map[string]any{"id": id})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("VM %s: removing NIC %s: %v", v.Name, mac, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	v.mu.Lock()
	for i := range v.nics {
		if v.nics[i].id == id {
			v.nics = append(v.nics[:i], v.nics[i+1:]...)
			break
		}
	}
	v.mu.Unlock()
	return nil
}

// openTap opens the tap device name wherever it is: tests move their taps
// into namespaces, where QEMU cannot find them by name, so QEMU gets the
// open device instead.
func openTap(name string) (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	res := make(chan result, 1)
	go func() {
		// The thread switches namespaces and is never handed back: the
		// runtime retires it with this goroutine.
		runtime.LockOSThread()
		f, err := openTapLocked(name)
		res <- result{f, err}
	}()
	r := <-res
	return r.f, r.err
}

func openTapLocked(name string) (*os.File, error) {
	names, _ := filepath.Glob("/run/netns/*")
	for _, where := range append([]string{""}, names...) {
		if where != "" {
			h, err := netns.GetFromPath(where)
			if err != nil {
				continue
			}
			err = netns.Set(h)
			h.Close()
			if err != nil {
				return nil, err
			}
		}
		if _, err := net.InterfaceByName(name); err != nil {
			continue
		}
		f, err := os.OpenFile("/dev/net/tun", os.O_RDWR, 0)
		if err != nil {
			return nil, err
		}
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			f.Close()
			return nil, err
		}
		ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
		if err := unix.IoctlIfreq(int(f.Fd()), unix.TUNSETIFF, ifr); err != nil {
			f.Close()
			return nil, fmt.Errorf("attaching tap %s: %w", name, err)
		}
		return f, nil
	}
	return nil, fmt.Errorf("tap %s not found in any namespace", name)
}

func (v *VM) guest() (*jsonConn, error) {
	v.mu.Lock()
	qga := v.qga
	v.mu.Unlock()
	if qga != nil {
		return qga, nil
	}
	qga, err := dialJSON(v.path("qga.sock"), 2*time.Second)
	if err != nil {
		return nil, err
	}
	// The guest agent may have half-read input from an earlier client:
	// a sync with a fresh id resynchronizes the stream.
	id := time.Now().UnixNano() & 0x7fffffff
	qga.conn.SetDeadline(time.Now().Add(3 * time.Second))
	if err := qga.send("guest-sync", map[string]any{"id": id}); err != nil {
		qga.conn.Close()
		return nil, err
	}
	for {
		line, err := qga.readLine()
		if err != nil {
			qga.conn.Close()
			return nil, err
		}
		var r struct {
			Return int64 `json:"return"`
		}
		if json.Unmarshal(line, &r) == nil && r.Return == id {
			break
		}
	}
	qga.conn.SetDeadline(time.Time{})
	v.mu.Lock()
	v.qga = qga
	v.mu.Unlock()
	return qga, nil
}

func (v *VM) dropGuest() {
	v.mu.Lock()
	if v.qga != nil {
		v.qga.conn.Close()
		v.qga = nil
	}
	v.mu.Unlock()
}

// Exec runs a shell command in the VM and returns its exit code and
// output (stdout then stderr).
func (v *VM) Exec(ctx context.Context, script string) (int, string, error) {
	qga, err := v.guest()
	if err != nil {
		return -1, "", err
	}
	raw, err := qga.call("guest-exec", map[string]any{"path": "/bin/sh", "arg": []string{"-c", script}, "capture-output": true})
	if err != nil {
		v.dropGuest()
		return -1, "", err
	}
	var started struct {
		PID int `json:"pid"`
	}
	json.Unmarshal(raw, &started)
	for {
		raw, err := qga.call("guest-exec-status", map[string]any{"pid": started.PID})
		if err != nil {
			v.dropGuest()
			return -1, "", err
		}
		var st struct {
			Exited   bool   `json:"exited"`
			ExitCode int    `json:"exitcode"`
			Out      string `json:"out-data"`
			Err      string `json:"err-data"`
		}
		json.Unmarshal(raw, &st)
		if st.Exited {
			out, _ := base64.StdEncoding.DecodeString(st.Out)
			errOut, _ := base64.StdEncoding.DecodeString(st.Err)
			return st.ExitCode, string(out) + string(errOut), nil
		}
		select {
		case <-ctx.Done():
			return -1, "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// MustExec runs script and fails the test unless it exits 0.
func (v *VM) MustExec(script string) string {
	v.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code, out, err := v.Exec(ctx, script)
	if err != nil || code != 0 {
		v.t.Fatalf("in VM %s: %q: exit %d, %v\n%s", v.Name, script, code, err, out)
	}
	return out
}

// WaitGuest waits until the guest agent answers (the VM booted).
func (v *VM) WaitGuest(timeout time.Duration) {
	v.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		code, _, err := v.Exec(ctx, "true")
		cancel()
		if err == nil && code == 0 {
			return
		}
		if !v.Running() {
			v.t.Fatalf("VM %s stopped while booting:\n%s\n%s", v.Name, v.qemuLog(), tail(v.Console(), 40))
		}
		if time.Now().After(deadline) {
			v.t.Fatalf("VM %s: no guest agent after %v (last: %v)\n%s", v.Name, timeout, err, tail(v.Console(), 40))
		}
		v.dropGuest()
		time.Sleep(time.Second)
	}
}

// WaitFor polls script in the VM until it exits 0.
func (v *VM) WaitFor(timeout time.Duration, what, script string) string {
	v.t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		code, out, err := v.Exec(ctx, script)
		cancel()
		if err == nil && code == 0 {
			return out
		}
		last = fmt.Sprintf("exit %d, %v: %s", code, err, out)
		if err != nil {
			v.dropGuest()
		}
		if time.Now().After(deadline) {
			v.t.Fatalf("VM %s: %s: not within %v; last: %s", v.Name, what, timeout, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
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

// jsonConn speaks the line-delimited JSON of QMP and the guest agent.
type jsonConn struct {
	mu   sync.Mutex
	conn net.Conn
	r    *bufio.Reader
}

func dialJSON(path string, timeout time.Duration) (*jsonConn, error) {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.Dial("unix", path)
		if err == nil {
			return &jsonConn{conn: c, r: bufio.NewReaderSize(c, 1<<20)}, nil
		}
		if time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *jsonConn) send(command string, args any) error {
	m := map[string]any{"execute": command}
	if args != nil {
		m["arguments"] = args
	}
	data, _ := json.Marshal(m)
	_, err := c.conn.Write(append(data, '\n'))
	return err
}

func (c *jsonConn) readLine() ([]byte, error) { return c.r.ReadBytes('\n') }

// call sends one command and returns its "return", skipping QMP events.
func (c *jsonConn) call(command string, args any) (json.RawMessage, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conn.SetDeadline(time.Now().Add(30 * time.Second))
	defer c.conn.SetDeadline(time.Time{})
	if err := c.send(command, args); err != nil {
		return nil, err
	}
	for {
		line, err := c.readLine()
		if err != nil {
			return nil, err
		}
		var r struct {
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Desc string `json:"desc"`
			} `json:"error"`
			Event string `json:"event"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("%s: %w: %q", command, err, line)
		}
		switch {
		case r.Event != "":
			continue
		case r.Error != nil:
			return nil, fmt.Errorf("%s: %s", command, r.Error.Desc)
		default:
			return r.Return, nil
		}
	}
}
