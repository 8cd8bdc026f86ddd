package procgroup

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// As and StartInView: the command runs as the given user, sees the bind
// mounts, and nobody else does.
func TestAsWithBinds(t *testing.T) {
	testkit.RequireRoot(t, "mount namespaces, changing user")
	dir := openTempDir(t)
	target, source := filepath.Join(dir, "target"), filepath.Join(dir, "source")
	if err := os.WriteFile(target, []byte("original\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(source, []byte("bound\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := Command(context.Background(), "sh", "-c", "id -u; id -G; cat "+target)
	As(cmd, &syscall.Credential{Uid: 65534, Gid: 65534})
	out, err := CombinedOutput(cmd, StartInView(View{Binds: []Bind{{Source: source, Target: target}}}))
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

// A cover hides a folder the user may not enter behind one holding only
// the way to the bind targets beneath it; on disk nothing is made or
// changed.
func TestStartInViewCovers(t *testing.T) {
	testkit.RequireRoot(t, "mount namespaces, changing user")
	dir := openTempDir(t)
	closed := filepath.Join(dir, "closed")
	file, folder := filepath.Join(closed, "a", "file"), filepath.Join(closed, "b", "folder")
	for _, d := range []string{filepath.Dir(file), folder} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for p, body := range map[string]string{file: "file\n", filepath.Join(folder, "in"): "in folder\n", filepath.Join(closed, "secret"): "secret\n"} {
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The folder itself open: a closed one would be of no use bound.
	os.Chmod(folder, 0o755)
	cred := &syscall.Credential{Uid: 65534, Gid: 65534}
	view := ViewFor(cred, []Bind{{Source: file, Target: file}, {Source: folder, Target: folder}})
	if len(view.Covers) != 1 || view.Covers[0] != closed {
		t.Fatalf("covers %v, want [%s]", view.Covers, closed)
	}
	cmd := Command(context.Background(), "sh", "-c", "cat "+file+" "+folder+"/in; ls -A "+closed+"; cat "+closed+"/secret 2>/dev/null || echo no-secret")
	As(cmd, cred)
	out, err := CombinedOutput(cmd, StartInView(view))
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if want := "file\nin folder\na\nb\nno-secret\n"; string(out) != want {
		t.Fatalf("output %q, want %q", out, want)
	}
	entries, _ := os.ReadDir(closed)
	if fi, err := os.Stat(closed); err != nil || fi.Mode().Perm() != 0o700 || len(entries) != 3 {
		t.Fatalf("on disk: %v %v, %d entries: changed", fi.Mode(), err, len(entries))
	}
}
