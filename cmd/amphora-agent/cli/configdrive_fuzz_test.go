package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// FuzzDrivePath: a path from the config drive's metadata that passes
// stays strictly inside the root it is joined to.
func FuzzDrivePath(f *testing.F) {
	for _, s := range []string{"/etc/octavia/amphora-agent.conf", "/", "/../etc/x", "etc/x", "/a/./b", "//a", "/a/b/", "/a\x00b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got, err := drivePath(p)
		if err != nil {
			return
		}
		root := "/target"
		j := filepath.Join(root, got)
		rel, err := filepath.Rel(root, j)
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || j != root+got {
			t.Fatalf("%q joins to %q", p, j)
		}
		// The kernel would refuse these only when the file is written.
		if strings.IndexByte(got, 0) >= 0 || len(got) > maxDrivePath {
			t.Fatalf("%q passes", p)
		}
	})
}
