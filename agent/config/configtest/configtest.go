// Package configtest loads agent configurations for unit tests and keeps
// them in their sandbox: an option left at its default names a real place
// on the machine (/var/lib/octavia, /etc/octavia, /sys), and a test that
// exercised it would write there.
package configtest

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/amphora-agent/amphora-agent/agent/config"
)

// Commands are path options the agent only runs, never writes; a test
// may leave them at the machine's binaries.
var Commands = map[string]bool{"HAProxyCmd": true, "KeepalivedCmd": true, "LVSMasqueradeScript": true}

// PathFields names the fields of config.Config that hold a path: those
// whose default is an absolute path. Finding them from the defaults means
// a path option added later is guarded without anyone listing it here.
func PathFields() []string {
	def, _, err := config.Load(nil)
	if err != nil {
		panic(err)
	}
	v := reflect.ValueOf(def).Elem()
	var names []string
	for i := 0; i < v.NumField(); i++ {
		if f := v.Field(i); f.Kind() == reflect.String && strings.HasPrefix(f.String(), "/") {
			names = append(names, v.Type().Field(i).Name)
		}
	}
	return names
}

// Outside returns, as "Field = value", the paths of cfg the agent may
// write that are not inside dir.
func Outside(cfg *config.Config, dir string) []string {
	v := reflect.ValueOf(cfg).Elem()
	var out []string
	for _, name := range PathFields() {
		if Commands[name] {
			continue
		}
		p := v.FieldByName(name).String()
		if rel, err := filepath.Rel(dir, p); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			out = append(out, name+" = "+p)
		}
	}
	return out
}

// Load loads text as the only configuration file and fails t unless every
// path the agent may write lies inside dir.
func Load(t testing.TB, dir, text string) *config.Config {
	t.Helper()
	cfg, _, err := config.Load([]config.Source{{Name: "test.conf", Data: []byte(text)}})
	if err != nil {
		t.Fatal(err)
	}
	if out := Outside(cfg, dir); len(out) > 0 {
		t.Fatalf("the test's configuration leaves paths outside its folder %s; set them in the config:\n%s", dir, strings.Join(out, "\n"))
	}
	return cfg
}
