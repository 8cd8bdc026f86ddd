package haproxy

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
	"github.com/amphora-agent/amphora-agent/certs/devpki"
)

// Copies a killed agent left behind (they hold keys) are removed when the
// next agent makes its sandbox; certificate folders are kept.
func TestCheckSandboxRemovesStaleCopies(t *testing.T) {
	testkit.RequireRoot(t, "the sandbox is only made for an agent running as root")
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
	sb, err := NewCheckSandbox(dir, filepath.Dir(dir))
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

// With base_path under folders only root may enter (t.TempDir makes two
// such levels), the unprivileged check still reads the staged config, the
// user/group file, this load balancer's certificate and an error file and
// a lua script under base_path. It sees nothing else of those folders:
// not a file outside base_path the config names, not another load
// balancer's config (0600) or key; and no mode on disk changes.
func TestCheckSandboxUnderClosedParent(t *testing.T) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy is not installed (make test installs it)")
	}
	testkit.RequireRoot(t, "the sandbox is only made for an agent running as root")
	dir := t.TempDir()
	st := realStore(t, bin, dir)
	base, certs := st.Layout.Base, filepath.Join(st.Layout.Base, "certs")
	sb, err := NewCheckSandbox(certs, base)
	if err != nil || sb == nil {
		t.Fatalf("sandbox %+v, %v", sb, err)
	}
	st.Sandbox = sb
	_, srv, err := devpki.Listener("www.example.org")
	if err != nil {
		t.Fatal(err)
	}
	cert, otherKey := filepath.Join(certs, "lb1", "www.pem"), filepath.Join(certs, "lb2", "www.pem")
	errPage, script := filepath.Join(base, "errors", "503.http"), filepath.Join(base, "probe.lua")
	outside, otherCfg := filepath.Join(dir, "outside.txt"), filepath.Join(base, "lb2", "haproxy.cfg")
	probed := []string{cert, errPage, outside, otherCfg, otherKey}
	var lua strings.Builder
	for _, p := range probed {
		fmt.Fprintf(&lua, "do local f = io.open(%q, \"r\"); print(%q .. (f and \" readable\" or \" unreadable\")); if f then f:close() end end\n", p, p)
	}
	fmt.Fprintf(&lua, "local ls = io.popen(\"ls -A %s\"); print(\"listing: \" .. ls:read(\"a\"):gsub(\"\\n\", \" \")); ls:close()\n", dir)
	files := []struct {
		path string
		body []byte
		mode os.FileMode
	}{
		{cert, srv.Combined(), 0o600},
		{otherKey, srv.Combined(), 0o600},
		{otherCfg, []byte("global\n"), 0o600},
		{outside, []byte("not the check's\n"), 0o644},
		{errPage, []byte("HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\n\r\nno member\n"), 0o644},
		{script, []byte(lua.String()), 0o644},
	}
	for _, f := range files {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f.path, f.body, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{certs, filepath.Dir(cert), filepath.Dir(otherKey)} {
		os.Chmod(d, 0o700)
	}
	// The paths in the comment are named too: the check must not see them
	// for that.
	cfg := "# " + outside + " " + otherCfg + " " + otherKey + "\nglobal\n    lua-load " + script + "\n" +
		"defaults\n    mode http\n    timeout connect 1s\n    timeout client 1s\n    timeout server 1s\n" +
		"frontend L1\n    bind 127.0.0.1:8443 ssl crt " + cert + "\n    errorfile 503 " + errPage + "\n    http-request return status 200\n"
	staged := st.Layout.StagedPath("lb1")
	testkit.WriteFile(t, staged, cfg)
	before := modes(t, dir)

	out, err := st.check(context.Background(), "lb1", staged, PeerName("AMP1"))
	if err != nil {
		t.Fatalf("check: %v\n%s", err, out)
	}
	for _, want := range []string{cert + " readable", errPage + " readable", outside + " unreadable",
		otherCfg + " unreadable", otherKey + " unreadable", "listing: lib user-group.conf \n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the check's lua script did not print %q:\n%s", want, out)
		}
	}
	if after := modes(t, dir); !reflect.DeepEqual(after, before) {
		t.Errorf("modes changed:\n%v\nwant\n%v", after, before)
	}
}

// modes lists every path from dir's parent down with its mode and owner.
func modes(t *testing.T, dir string) []string {
	t.Helper()
	var got []string
	err := filepath.WalkDir(filepath.Dir(dir), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		got = append(got, fmt.Sprintf("%s %v %d:%d", p, fi.Mode(), st.Uid, st.Gid))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}
