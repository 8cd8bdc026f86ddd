package certs

import (
	"path/filepath"
	"testing"
)

// FuzzValidateFilename: a certificate name that passes lands directly in
// the load balancer's folder.
func FuzzValidateFilename(f *testing.F) {
	for _, s := range []string{"a.pem", "4f2b7c5e-5a9e-4c1e-9d2a-0c6a1f3e8b7d.pem", "..", "../x.pem", "x.pem/..", "x.pem\x00", "test.bla", "..pem", "a\\b.pem"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if ValidateFilename(name) != nil {
			return
		}
		dir := "/var/lib/octavia/certs/lb1"
		if p := filepath.Join(dir, name); filepath.Dir(p) != dir || filepath.Base(p) != name {
			t.Fatalf("%q joins to %q", name, p)
		}
	})
}
