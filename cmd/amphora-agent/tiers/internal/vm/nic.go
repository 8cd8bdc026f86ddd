package vm

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

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
