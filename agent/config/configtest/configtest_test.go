package configtest

import (
	"slices"
	"strings"
	"testing"

	"github.com/amphora-agent/amphora-agent/agent/config"
)

// The guard fails a configuration that sets only some of the paths, such
// as the one that once wrote /var/lib/octavia/haproxy-default-user-group.conf.
func TestOutsideNamesEveryDefaultPath(t *testing.T) {
	dir := t.TempDir()
	cfg, _, err := config.Load([]config.Source{{Name: "t.conf", Data: []byte("[haproxy_amphora]\nbase_path = " + dir + "/lib\n")}})
	if err != nil {
		t.Fatal(err)
	}
	out := Outside(cfg, dir)
	for _, want := range []string{
		"HAProxyUserGroupFile = /var/lib/octavia/haproxy-default-user-group.conf",
		"BaseCertDir = /var/lib/octavia/certs",
		"ServerCert = /etc/octavia/certs/server.pem",
		"NetworkDir = /etc/octavia/interfaces",
		"PCIRescanFile = /sys/bus/pci/rescan",
	} {
		if !slices.Contains(out, want) {
			t.Errorf("Outside = %q, missing %q", out, want)
		}
	}
	if slices.ContainsFunc(out, func(s string) bool { return strings.HasPrefix(s, "BasePath") || strings.HasPrefix(s, "HAProxyCmd") }) {
		t.Errorf("Outside = %q: base_path is inside, haproxy_cmd is only run", out)
	}
	// A sibling folder whose name starts like dir is still outside.
	cfg.BasePath = dir + "-other/lib"
	if !slices.Contains(Outside(cfg, dir), "BasePath = "+dir+"-other/lib") {
		t.Error("a sibling folder counted as inside")
	}
}
