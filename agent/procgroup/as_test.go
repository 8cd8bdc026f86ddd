package procgroup

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// As and StartWithBinds: the command runs as the given user, sees the bind
// mounts, and nobody else does.
func TestAsWithBinds(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (mount namespaces, changing user)")
	}
	dir := t.TempDir()
	// t.TempDir makes both levels 0700; the user must reach the files.
	os.Chmod(filepath.Dir(dir), 0o755)
	os.Chmod(dir, 0o755)
	target, source := filepath.Join(dir, "target"), filepath.Join(dir, "source")
	if err := os.WriteFile(target, []byte("original\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(source, []byte("bound\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := Command(context.Background(), "sh", "-c", "id -u; id -G; cat "+target)
	As(cmd, &syscall.Credential{Uid: 65534, Gid: 65534})
	out, err := CombinedOutput(cmd, StartWithBinds([]Bind{{Source: source, Target: target}}))
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got := strings.Fields(string(out)); len(got) != 3 || got[0] != "65534" || got[1] != "65534" || got[2] != "bound" {
		t.Fatalf("output %q, want uid 65534, only group 65534, the bound content", out)
	}
	if data, _ := os.ReadFile(target); string(data) != "original\n" {
		t.Fatalf("the bind mount is visible outside the command: %q", data)
	}
	if !cmd.SysProcAttr.Setpgid {
		t.Fatal("As dropped the process group set-up")
	}
}
