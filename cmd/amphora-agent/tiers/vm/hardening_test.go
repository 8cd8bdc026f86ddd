//go:build vm

package vm_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// unitCapabilities is the agent unit's CapabilityBoundingSet with each
// capability's number (linux/capability.h): what the agent, HAProxy,
// keepalived and the tools they run may ever hold.
var unitCapabilities = map[string]uint{
	"cap_chown":            0,
	"cap_dac_override":     1,
	"cap_fowner":           3,
	"cap_kill":             5,
	"cap_setgid":           6,
	"cap_setuid":           7,
	"cap_net_bind_service": 10,
	"cap_net_admin":        12,
	"cap_net_raw":          13,
	"cap_sys_module":       16,
	"cap_sys_admin":        21,
	"cap_sys_resource":     24,
}

// checkHardening checks, on a VM serving a load balancer with UDP and SCTP
// listeners, that the unit's sandbox is in force for the agent and every
// daemon it started, without a mount namespace of the unit's own, and
// that nothing in the unit's journal was refused a permission.
func checkHardening(t *testing.T, a *amphora) {
	props := a.unitShow("CapabilityBoundingSet", "NoNewPrivileges", "RestrictNamespaces", "SystemCallArchitectures", "RequiresMountsFor")
	var names []string
	var mask uint64
	for name, bit := range unitCapabilities {
		names = append(names, name)
		mask |= 1 << bit
	}
	if got := strings.Fields(props["CapabilityBoundingSet"]); !equalSets(got, names) {
		t.Errorf("unit CapabilityBoundingSet %v, want %v", got, names)
	}
	if props["NoNewPrivileges"] != "yes" || props["SystemCallArchitectures"] != "native" ||
		!equalSets(strings.Fields(props["RestrictNamespaces"]), []string{"mnt", "net"}) {
		t.Errorf("unit sandbox: %v", props)
	}
	if !strings.Contains(props["RequiresMountsFor"], "/var/lib/octavia/certs") {
		t.Errorf("unit RequiresMountsFor=%q lacks the certificate folder", props["RequiresMountsFor"])
	}
	if fs := strings.TrimSpace(a.MustExec("findmnt -n -o FSTYPE /var/lib/octavia/certs")); fs != "tmpfs" {
		t.Errorf("/var/lib/octavia/certs is on %q, want tmpfs", fs)
	}
	// The image leaves manual pages out, so Documentation= is not checked.
	if out := a.MustExec("systemd-analyze verify --man=no amphora-agent.service amphora-config-drive.service var-lib-octavia-certs.mount 2>&1 || true"); strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify on the package's units:\n%s", out)
	}

	// The kernel's view of each process: bounding set, no_new_privs and a
	// seccomp filter, inherited by HAProxy and keepalived.
	pids := map[string]string{"agent": a.mainPID()}
	for _, name := range []string{"haproxy", "keepalived"} {
		for _, pid := range strings.Fields(a.MustExec("pgrep -x " + name + " || true")) {
			pids[name+" "+pid] = pid
		}
	}
	if len(pids) < 3 {
		t.Fatalf("want the agent, HAProxy and keepalived running, found %v", pids)
	}
	wantStatus := map[string]string{"CapBnd": fmt.Sprintf("%016x", mask), "NoNewPrivs": "1", "Seccomp": "2"}
	for who, pid := range pids {
		status := a.MustExec("cat /proc/" + pid + "/status")
		for field, want := range wantStatus {
			if got := statusField(status, field); got != want {
				t.Errorf("%s (pid %s): %s %s, want %s", who, pid, field, got, want)
			}
		}
	}

	// The agent shares the host's mount namespace, so the namespace it
	// mounted under /run/netns is the host's too.
	agentNS := strings.TrimSpace(a.MustExec("readlink /proc/" + pids["agent"] + "/ns/mnt"))
	if hostNS := strings.TrimSpace(a.MustExec("readlink /proc/1/ns/mnt")); agentNS != hostNS {
		t.Errorf("agent mount namespace %s, PID 1's %s", agentNS, hostNS)
	}
	if list := a.MustExec("ip netns list"); !strings.Contains(list, "amphora-haproxy") {
		t.Errorf("the host does not see the agent's namespace: %q", list)
	}

	// Certificate rotation writes /etc/octavia/certs under the sandbox.
	next, err := a.env.CA.Server(a.env.AmphoraID)
	if err != nil {
		t.Fatal(err)
	}
	if status, _, body := a.env.Do("PUT", "/1.0/certificate", next.Combined()); status != 202 {
		t.Fatalf("PUT /1.0/certificate: %d %s", status, body)
	}
	leaf, err := next.Leaf()
	if err != nil {
		t.Fatal(err)
	}
	if got := a.env.ServedCertificate().SerialNumber; got.Cmp(leaf.SerialNumber) != 0 {
		t.Errorf("serving serial %s after the rotation, want %s", got, leaf.SerialNumber)
	}

	// A refused system call answers EPERM (SystemCallErrorNumber) and a
	// missing capability EPERM or EACCES: either shows up in the unit's
	// journal, which holds the agent's, HAProxy's and keepalived's lines.
	refused := a.MustExec(`journalctl -b -u amphora-agent.service -o cat --no-pager | grep -i -e 'not permitted' -e 'permission denied' -e 'bad system call' || true`)
	if strings.TrimSpace(refused) != "" {
		t.Errorf("refusals in the unit's journal:\n%s", refused)
	}
	// For the reader: what the daemons found amiss, refused or not.
	t.Logf("warnings in the unit's journal:\n%s", a.MustExec(`journalctl -b -u amphora-agent.service -o cat --no-pager | grep -i -e unable -e cannot -e "can't" -e warning | sort | uniq -c | sort -rn | head -20 || true`))
	t.Logf("sandbox in force for %d processes: CapBnd %016x, NoNewPrivs, seccomp", len(pids), mask)
}

// statusField is a field of /proc/<pid>/status.
func statusField(status, field string) string {
	for _, line := range strings.Split(status, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == field {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func equalSets(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
