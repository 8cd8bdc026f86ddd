package keepalived

import (
	"os"
	"path/filepath"
	"testing"
)

func TestUpdateHAProxyCheck(t *testing.T) {
	base := t.TempDir()
	c := CheckScripts{Layout: VRRPLayout{Base: base}}
	sock := func(lb string) string { return filepath.Join("/var/lib/octavia", lb+".sock") }
	read := func() string {
		data, err := os.ReadFile(c.HAProxyScriptPath())
		if os.IsNotExist(err) {
			return "<absent>"
		}
		return string(data)
	}
	cases := []struct {
		name           string
		lbs, lvs       []string
		excluded, want string
	}{
		{"two LBs", []string{"lb2", "lb1"}, nil, "", "haproxy-vrrp-check /var/lib/octavia/lb1.sock /var/lib/octavia/lb2.sock; exit $?"},
		{"stop excludes", []string{"lb1", "lb2"}, nil, "lb2", "haproxy-vrrp-check /var/lib/octavia/lb1.sock; exit $?"},
		{"nothing to serve", nil, nil, "", "exit 1"},
		{"only LVS listeners", nil, []string{"u1"}, "", "<absent>"},
	}
	for _, tc := range cases {
		if err := c.UpdateHAProxyCheck(tc.lbs, tc.excluded, tc.lvs, sock); err != nil {
			t.Fatal(err)
		}
		if got := read(); got != tc.want {
			t.Errorf("%s: script %q, want %q", tc.name, got, tc.want)
		}
	}
	if c.VRRPInUse() {
		t.Fatal("VRRP reported in use without check_script.sh")
	}
}
