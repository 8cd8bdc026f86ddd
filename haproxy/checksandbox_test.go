package haproxy

import (
	"os"
	"path/filepath"
	"testing"
)

// Copies a killed agent left behind (they hold keys) are removed when the
// next agent makes its sandbox; certificate folders are kept.
func TestCheckSandboxRemovesStaleCopies(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the sandbox is only made for an agent running as root")
	}
	dir := t.TempDir()
	stale, lb := filepath.Join(dir, checkPrefix+"123", "lb1"), filepath.Join(dir, "lb1")
	for _, d := range []string{stale, lb} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "a.pem"), []byte("key"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sb, err := NewCheckSandbox(dir)
	if err != nil || sb == nil || sb.Cred.Uid == 0 {
		t.Fatalf("sandbox %+v, %v", sb, err)
	}
	if _, err := os.Stat(filepath.Dir(stale)); !os.IsNotExist(err) {
		t.Errorf("stale copies still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(lb, "a.pem")); err != nil {
		t.Errorf("a load balancer's certificate went: %v", err)
	}
}
