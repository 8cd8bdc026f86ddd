package topo

import (
	"net"
	"strings"
	"testing"
)

func TestUniqueName(t *testing.T) {
	seen := map[string]bool{}
	for _, prefix := range []string{"", "a", "amp", "a-very-long-prefix-indeed"} {
		for range 50 {
			n := UniqueName(prefix)
			if len(n) > ifNameMax {
				t.Fatalf("UniqueName(%q) = %q: longer than %d", prefix, n, ifNameMax)
			}
			if !strings.Contains(n, Tag()) {
				t.Fatalf("UniqueName(%q) = %q: lacks tag %q", prefix, n, Tag())
			}
			if seen[n] {
				t.Fatalf("UniqueName returned %q twice", n)
			}
			seen[n] = true
		}
	}
	if len(Tag()) != 7 {
		t.Fatalf("Tag() = %q, want 7 characters", Tag())
	}
}

func TestUniqueMAC(t *testing.T) {
	hw, err := net.ParseMAC(UniqueMAC())
	if err != nil {
		t.Fatal(err)
	}
	if hw[0]&1 != 0 || hw[0]&2 == 0 {
		t.Fatalf("%s is not a locally administered unicast MAC", hw)
	}
}

func TestSysctlPath(t *testing.T) {
	for key, want := range map[string]string{
		"net.ipv4.ip_forward":             "/proc/sys/net/ipv4/ip_forward",
		"net/ipv4/conf/eth1.10/rp_filter": "/proc/sys/net/ipv4/conf/eth1.10/rp_filter",
	} {
		if got := sysctlPath(key); got != want {
			t.Errorf("sysctlPath(%q) = %q, want %q", key, got, want)
		}
	}
}
