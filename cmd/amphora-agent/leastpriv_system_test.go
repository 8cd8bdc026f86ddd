//go:build system

package main

import (
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/amphora-agent/amphora-agent/certs/devpki"
)

// `haproxy -c` runs the uploaded config's lua-load scripts; it must do so
// as the haproxy user, not root. A config whose TLS certificates are 0600
// root files still validates, and the files stay as they were.
func TestHAProxyCheckRunsWithoutRoot(t *testing.T) {
	f := newLBFixture(t)
	f.env.Start()
	want := "65534"
	if u, err := user.Lookup("haproxy"); err == nil {
		want = u.Uid
	}

	// A folder the unprivileged check can read the script from and write
	// its answer to.
	dir, err := os.MkdirTemp("", "aa-lua-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	uidFile, script := filepath.Join(dir, "uid"), filepath.Join(dir, "whoami.lua")
	if err := os.WriteFile(script, []byte(`os.execute("id -u > `+uidFile+`")`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	withLua := strings.Replace(f.config(1), "global\n", "global\n    lua-load "+script+"\n", 1)
	if status, body := f.upload(withLua); status != 202 {
		t.Fatalf("upload with lua-load: %d %s", status, body)
	}
	got, err := os.ReadFile(uidFile)
	if err != nil {
		t.Fatalf("the lua script did not run: %v", err)
	}
	if uid := strings.TrimSpace(string(got)); uid != want {
		t.Fatalf("haproxy -c ran the lua script as uid %s, want %s (the check user)", uid, want)
	}

	// TLS: a certificate and a crt-list, uploaded as the controller does.
	ca, err := devpki.NewAuthority("listener CA")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Server("www.example.org")
	if err != nil {
		t.Fatal(err)
	}
	certDir := f.env.Path("lib", "certs", testLB)
	pem := filepath.Join(certDir, "l1.pem")
	for name, body := range map[string][]byte{"l1.pem": srv.Combined(), "l1-list.pem": []byte(pem + "\n")} {
		if status, _, out := f.env.Do("PUT", "/1.0/loadbalancer/"+testLB+"/certificates/"+name, body); status != 200 {
			t.Fatalf("certificate %s: %d %s", name, status, out)
		}
	}
	tls := f.config(2, "bind "+f.lb.VIP+":443 ssl crt-list "+filepath.Join(certDir, "l1-list.pem"))
	if status, body := f.upload(tls); status != 202 {
		t.Fatalf("upload with TLS: %d %s", status, body)
	}
	// A crt-list naming a file the check cannot see fails the check: the
	// certificates are really read.
	bad := f.config(3, "bind "+f.lb.VIP+":443 ssl crt "+filepath.Join(certDir, "missing.pem"))
	if status, body := f.upload(bad); status != 400 {
		t.Fatalf("upload naming a missing certificate: %d %s", status, body)
	}
	for _, name := range []string{"l1.pem", "l1-list.pem"} {
		st, err := os.Stat(filepath.Join(certDir, name))
		if err != nil {
			t.Fatal(err)
		}
		sys := st.Sys().(*syscall.Stat_t)
		if st.Mode().Perm() != 0o600 || sys.Uid != 0 || sys.Gid != 0 {
			t.Errorf("%s: mode %v owner %d:%d, want 0600 root", name, st.Mode().Perm(), sys.Uid, sys.Gid)
		}
	}
	// Nothing of the check's copies is left behind.
	if left, _ := filepath.Glob(f.env.Path("lib", "certs", ".check-*")); len(left) != 0 {
		t.Errorf("copies left: %v", left)
	}
}
