package keepalived

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// The role is the last state keepalived logged in its current run:
// earlier runs (before a "Starting Keepalived" line) and a stopped
// keepalived say nothing; the part moved to <log>.1 by the size cap counts.
func TestRole(t *testing.T) {
	for _, c := range []struct {
		name, old, cur, want string
	}{
		{"nothing logged", "", "", ""},
		{"master", "", "Starting Keepalived v2\n(vi) Entering BACKUP STATE (init)\n(vi) Entering MASTER STATE\n", "MASTER"},
		{"fault after master", "", "Starting Keepalived v2\n(vi) Entering MASTER STATE\n(vi) Entering FAULT STATE\n", "FAULT"},
		{"capped: state in .1", "Starting Keepalived v2\n(vi) Entering BACKUP STATE (init)\n", "noise\n", "BACKUP"},
		{"previous run forgotten", "Starting Keepalived v2\n(vi) Entering MASTER STATE\n", "Starting Keepalived v2\n", ""},
		{"stopped", "", "Starting Keepalived v2\n(vi) Entering MASTER STATE\nStopped Keepalived v2\n", ""},
	} {
		dir := t.TempDir()
		log := filepath.Join(dir, "k.log")
		if c.old != "" {
			os.WriteFile(log+".1", []byte(c.old), 0o600)
		}
		os.WriteFile(log, []byte(c.cur), 0o600)
		if got := Role(log); got != c.want {
			t.Errorf("%s: role %q, want %q", c.name, got, c.want)
		}
	}
}

func TestVRRPVIPs(t *testing.T) {
	cfg := "vrrp_instance x {\n    virtual_ipaddress {\n        203.0.113.10\n    }\n    virtual_ipaddress_excluded {\n        2001:db8:1::10/128\n    }\n" +
		"    virtual_routes {\n        203.0.113.0/24 dev eth1 src 203.0.113.10 scope link table 1\n    }\n}\n"
	var got []string
	for _, a := range VRRPVIPs([]byte(cfg)) {
		got = append(got, a.String())
	}
	if want := []string{"203.0.113.10", "2001:db8:1::10"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("VIPs %v, want %v", got, want)
	}
}
