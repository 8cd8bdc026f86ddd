//go:build vm

package vm_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/ctrlutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/vm"
)

// TestVMCloudInit: the image boots as Nova boots it (the BIOS, the disk's
// boot loader) and cloud-init applies what Octavia's ComputeCreate task
// asked Nova for, in both user_data_config_drive modes: the files (the
// agent's config and certificates, rsyslog's config), runcmd, the
// timezone, and from the metadata the hostname and the SSH key. The
// management NIC sits in a PCI slot other than the harness's default and
// gets its addresses by DHCPv4 and router advertisements.
func TestVMCloudInit(t *testing.T) {
	ctrlutil.RequireOctavia(t)
	modes := []struct {
		name string
		c    vmCreate
	}{
		{"config-drive-files", vmCreate{UserDataConfigDrive: false, Timezone: "America/Denver", ManagementSlot: 9}},
		{"user-data-config-drive", vmCreate{UserDataConfigDrive: true, Timezone: "Asia/Tokyo", ManagementSlot: 17}},
	}
	// Both VMs boot together: a boot is mostly waiting on an emulated CPU.
	amps := make([]*amphora, len(modes))
	for i, m := range modes {
		amps[i] = createAmphora(t, "amp-ci-"+strconv.Itoa(i), "SINGLE", m.c)
	}
	for _, a := range amps {
		a.ready(t)
	}
	for i, m := range modes {
		a, c := amps[i], m.c
		t.Run(m.name, func(t *testing.T) {
			checkBootLoader(t, a)
			checkOctaviaFiles(t, a, c)
			checkRuncmd(t, a, c)
			checkMetadata(t, a, c)
			checkManagementNIC(t, a, c)
		})
	}
}

// checkBootLoader: GRUB loaded the kernel (it passes BOOT_IMAGE, QEMU's
// -kernel does not) from a partitioned disk, found by its label.
func checkBootLoader(t *testing.T, a *amphora) {
	t.Helper()
	cmdline := a.MustExec("cat /proc/cmdline")
	if !strings.Contains(cmdline, "BOOT_IMAGE=/vmlinuz") || !strings.Contains(cmdline, "root=LABEL=amphora") {
		t.Fatalf("not booted by the boot loader: /proc/cmdline %q", cmdline)
	}
	if src := strings.TrimSpace(a.MustExec("findmnt -n -o SOURCE /")); src != "/dev/vda1" {
		t.Fatalf("root file system on %q, want the disk's first partition /dev/vda1", src)
	}
	// As long as the agent's own: the boot to an active agent, and where
	// systemd says the time went.
	t.Logf("%s: %s", a.Name, strings.TrimSpace(a.MustExec("systemd-analyze time | head -n 1; systemd-analyze blame --no-pager | head -n 8")))
}

// checkOctaviaFiles: every file Octavia rendered is on the amphora with
// the bytes it rendered, written by cloud-init (from meta_data.json's files
// or the user data's write_files), not by the package's own writer.
func checkOctaviaFiles(t *testing.T, a *amphora, c vmCreate) {
	t.Helper()
	want := a.build.ConfigDriveFiles
	if c.UserDataConfigDrive {
		if want != nil {
			t.Fatalf("user_data_config_drive: Octavia still sent config drive files %v", keys(want))
		}
		want = a.build.UserDataFiles
		for path := range want {
			if !strings.Contains(a.build.UserData, "path: "+path) {
				t.Fatalf("user data lacks write_files for %s:\n%s", path, a.build.UserData)
			}
		}
	}
	for _, path := range []string{"/etc/octavia/amphora-agent.conf", "/etc/octavia/certs/server.pem",
		"/etc/octavia/certs/client_ca.pem", "/etc/rsyslog.d/10-rsyslog.conf"} {
		content, ok := want[path]
		if !ok {
			t.Fatalf("Octavia rendered no %s: %v", path, keys(want))
		}
		got := strings.Fields(a.MustExec("sha256sum " + path))[0]
		// write_files content is a YAML block: cloud-init gives it back
		// with one newline at the end.
		sums := map[string]bool{sha(content): true, sha(strings.TrimRight(content, "\n") + "\n"): true}
		if !sums[got] {
			t.Fatalf("%s on the amphora differs from what Octavia rendered:\n%s\nwant:\n%s", path, a.MustExec("cat "+path), content)
		}
	}
	t.Logf("%s: written by cloud-init:\n%s", a.Name, a.MustExec("stat -c '%a %U:%G %n' /etc/octavia/amphora-agent.conf /etc/octavia/certs/*.pem"))
	if agentConf := a.MustExec("cat /etc/octavia/amphora-agent.conf"); !strings.Contains(agentConf, "amphora_id = "+a.env.AmphoraID) {
		t.Fatalf("amphora-agent.conf is not this amphora's:\n%s", agentConf)
	}
	if r := strings.TrimSpace(a.MustExec("systemctl show -p ConditionResult --value amphora-config-drive.service")); r != "no" {
		t.Fatalf("amphora-config-drive ran beside cloud-init (ConditionResult=%s)", r)
	}
}

// checkRuncmd: the user data's runcmd ran. Octavia's runs `systemctl
// restart rsyslog`, and `service amphora-agent restart` when the files
// came in the user data: the agent is then stopped and started again
// while cloud-init's last stage runs, and only then.
func checkRuncmd(t *testing.T, a *amphora, c vmCreate) {
	t.Helper()
	script := a.MustExec("cat /var/lib/cloud/instance/scripts/runcmd")
	if !strings.Contains(script, "restart rsyslog") {
		t.Fatalf("cloud-init's runcmd script lacks Octavia's commands:\n%s", script)
	}
	out := a.MustExec("grep -h rsyslog /var/log/cloud-init-output.log || true; systemctl show -p ActiveEnterTimestampMonotonic rsyslog.service")
	t.Logf("runcmd's rsyslog restart: %s", strings.TrimSpace(out))
	final := monotonicSeconds(t, a.MustExec("systemctl show -p ExecMainStartTimestampMonotonic --value cloud-final.service"), 1e6)
	journal := a.MustExec("journalctl -b -u amphora-agent.service -o short-monotonic --no-pager")
	var stopsInFinal int
	for _, line := range strings.Split(journal, "\n") {
		stamp, rest, ok := strings.Cut(strings.TrimPrefix(line, "["), "]")
		if !ok || !strings.Contains(rest, "Stopping") {
			continue
		}
		if monotonicSeconds(t, stamp, 1) >= final {
			stopsInFinal++
		}
	}
	active := monotonicSeconds(t, a.unitShow("ActiveEnterTimestampMonotonic")["ActiveEnterTimestampMonotonic"], 1e6)
	switch {
	case c.UserDataConfigDrive && (stopsInFinal == 0 || active < final):
		t.Fatalf("runcmd did not restart the agent (cloud-final started at %.1f s, agent active at %.1f s):\n%s", final, active, journal)
	case !c.UserDataConfigDrive && stopsInFinal != 0:
		t.Fatalf("the agent was stopped during cloud-final, where nothing should restart it:\n%s", journal)
	}
}

// monotonicSeconds parses a monotonic time given in units per second.
func monotonicSeconds(t *testing.T, s string, perSecond float64) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		t.Fatalf("monotonic time %q: %v", s, err)
	}
	return v / perSecond
}

// checkMetadata: the timezone from the user data, the hostname and the
// SSH key from meta_data.json.
func checkMetadata(t *testing.T, a *amphora, c vmCreate) {
	t.Helper()
	if tz := strings.TrimSpace(a.MustExec("readlink /etc/localtime; cat /etc/timezone")); !strings.HasSuffix(tz, c.Timezone) ||
		!strings.Contains(tz, "zoneinfo/"+c.Timezone) {
		t.Fatalf("timezone: %q, want %s", tz, c.Timezone)
	}
	host := strings.TrimSpace(a.MustExec("hostname"))
	if host != a.build.Name {
		t.Fatalf("hostname %q, want %q (meta_data.json)", host, a.build.Name)
	}
	// keepalived looks the name up at every start: it must resolve
	// without DNS.
	if out := a.MustExec("getent hosts " + host); !strings.Contains(out, host) {
		t.Fatalf("the hostname does not resolve: %q", out)
	}
	keys := a.MustExec("cat /root/.ssh/authorized_keys")
	found := false
	for _, line := range strings.Split(keys, "\n") {
		found = found || strings.TrimSpace(line) == a.publicKey
	}
	if !found {
		t.Fatalf("root's authorized_keys lacks the key pair %s (usable, without options):\n%s", vmKeyName, keys)
	}
	if st := strings.TrimSpace(a.MustExec("systemctl is-active systemd-timesyncd.service")); st != "active" {
		t.Fatalf("time sync: systemd-timesyncd is %s", st)
	}
}

// checkManagementNIC: the NIC in slot c.ManagementSlot is eth0, with an
// address from QEMU's DHCP server and one from its router advertisements
// (vm.ManagementIPv6Net), and the controller reaches the agent through it.
func checkManagementNIC(t *testing.T, a *amphora, c vmCreate) {
	t.Helper()
	slot := fmt.Sprintf("0000:00:%02x.0", c.ManagementSlot)
	if dev := strings.TrimSpace(a.MustExec("basename $(readlink -f /sys/class/net/eth0/device/..)")); dev != slot {
		t.Fatalf("eth0 is PCI %s, want the management NIC in %s", dev, slot)
	}
	a.WaitFor(time.Minute, "DHCPv4 and SLAAC addresses on eth0",
		"ip -4 addr show dev eth0 | grep -q 'inet 192.0.2.' && ip -6 addr show dev eth0 scope global | grep -q 'inet6 "+strings.TrimSuffix(vm.ManagementIPv6Net, ":/64")+"'")
	t.Logf("%s: %s", a.Name, strings.TrimSpace(a.MustExec("ip -br addr show dev eth0")))
	status, _, body := a.env.Do("GET", "/1.0/info", nil)
	var info map[string]any
	if status != 200 || json.Unmarshal(body, &info) != nil {
		t.Fatalf("GET /1.0/info through the management NIC: %d %s", status, body)
	}
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
