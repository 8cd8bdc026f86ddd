package tiers_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMasqueradeScriptTakesInterfaceNamesOnly runs lvs-masquerade.sh with
// a stand-in nft that records what it is asked. A name the kernel would
// not give an interface, or one with a character nft reads specially
// ("e*" is a wildcard there; a newline starts another command, which
// could delete other interfaces' rules), is refused with exit status 2
// before nft runs; real names reach nft.
func TestMasqueradeScriptTakesInterfaceNamesOnly(t *testing.T) {
	// The test runs a copy: reading the script here lets go test's cache
	// know the result depends on it.
	text, err := os.ReadFile("../packaging/lvs-masquerade.sh")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	script := filepath.Join(bin, "lvs-masquerade.sh")
	if err := os.WriteFile(script, text, 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(bin, "nft.log")
	fake := "#!/bin/sh\n{ echo \"nft $*\"; [ \"$*\" != '-f -' ] || cat; } >>" + log + "\ncase $* in *list*) exit 1 ;; esac\n"
	if err := os.WriteFile(filepath.Join(bin, "nft"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	shells := []string{"/bin/sh"}
	if bash, err := exec.LookPath("bash"); err == nil {
		// bash matches ranges by the locale's collation unless told not to.
		shells = append(shells, bash)
	}
	run := func(shell string, args ...string) (int, string, string) {
		t.Helper()
		os.Remove(log)
		cmd := exec.Command(shell, append([]string{script}, args...)...)
		cmd.Env = []string{"PATH=" + bin + ":/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "LC_ALL=C.UTF-8"}
		out, err := cmd.CombinedOutput()
		status := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			status = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		calls, _ := os.ReadFile(log)
		return status, string(out), string(calls)
	}
	bad := []string{
		"e*", "eth?", "eth[12]", "{eth1,eth2}", "eth1\ndelete table ip octavia-ipv4", "eth1\n",
		`eth1"`, "eth 1", "eth1\t", "", ".", "..", "a/b", "eth1:0", "$iface", "@eth1", "eth1\\",
		"0123456789abcdef", "éth1",
	}
	for _, shell := range shells {
		for _, name := range bad {
			for _, action := range []string{"add", "delete"} {
				status, out, calls := run(shell, action, "ipv4", name)
				if status != 2 || !strings.Contains(out, "invalid interface name") || calls != "" {
					t.Errorf("%s: %s ipv4 %q: exit %d, output %q, nft asked:\n%s\nwant exit 2, nft not run", shell, action, name, status, out, calls)
				}
			}
		}
		for _, name := range []string{"eth1", "eth1.100", "ens3f0", "vlan_1-a", "0123456789abcde"} {
			status, out, calls := run(shell, "add", "ipv6", name, "sriov")
			if status != 0 || !strings.Contains(calls, `oifname "`+name+`" meta l4proto udp masquerade`) {
				t.Errorf("%s: add ipv6 %q: exit %d, output %q, nft asked:\n%s", shell, name, status, out, calls)
			}
		}
	}
}
