package keepalived

import (
	"net/netip"
	"strings"
	"testing"
)

// FuzzVIPs: any listener config yields only valid addresses, each the
// first field of a line of the config.
func FuzzVIPs(f *testing.F) {
	f.Add([]byte("virtual_server_group ipv4-group {\n    203.0.113.10 53\n}\n\nvirtual_server_group ipv6-group {\n    2001:db8::10 53\n}\n\nvirtual_server group ipv4-group {\n    real_server 198.51.100.1 53 {\n    }\n}\n"))
	f.Add([]byte("virtual_server_group g {\n fe80::1%eth0 53\n ::ffff:203.0.113.1 1\n}\n203.0.113.9 1\n"))
	f.Fuzz(func(t *testing.T, cfg []byte) {
		// The addresses written as a line's first field.
		firsts := map[netip.Addr]bool{}
		for _, line := range strings.Split(string(cfg), "\n") {
			if fs := strings.Fields(line); len(fs) > 0 {
				if a, err := netip.ParseAddr(fs[0]); err == nil {
					firsts[a] = true
				}
			}
		}
		for _, a := range VIPs(cfg) {
			if !a.IsValid() || !firsts[a] {
				t.Fatalf("VIP %v does not stand in the config", a)
			}
		}
	})
}
