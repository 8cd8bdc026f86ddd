package configtest

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/amphora-agent/amphora-agent/agent/config"
)

// Every option of the table with an absolute default is a path field the
// guard checks, and only those: the guard cannot miss a path option.
func TestPathFieldsAreThePathOptions(t *testing.T) {
	var want int
	for _, o := range config.Options() {
		if strings.HasPrefix(o.Default, "/") {
			want++
		}
	}
	got := PathFields()
	if len(got) != want || want < 10 {
		t.Fatalf("path fields %v (%d); the option table has %d options with an absolute default", got, len(got), want)
	}
	typ := reflect.TypeOf(config.Config{})
	for name := range Commands {
		if _, ok := typ.FieldByName(name); !ok || !slices.Contains(got, name) {
			t.Errorf("command %s is not a path field of config.Config", name)
		}
	}
}

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
