//go:build system

package system_test

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io/fs"
	"maps"
	"math/big"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/certs/devpki"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/tiersutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
)

// checkUID is the uid `haproxy -c` runs as: the haproxy user's, else
// nobody's.
func checkUID() string {
	if u, err := user.Lookup("haproxy"); err == nil {
		return u.Uid
	}
	return "65534"
}

// openToAll makes a folder, removed with the test, that anyone may read
// and write, outside the agent's: the check user leaves its answers there.
func openToAll(t *testing.T) string {
	dir, err := os.MkdirTemp("", "aa-open-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// `haproxy -c` runs the uploaded config's lua-load scripts; it must do so
// as the haproxy user, not root. A config whose TLS certificates are 0600
// root files still validates, and the files stay as they were.
func TestHAProxyCheckRunsWithoutRoot(t *testing.T) {
	f := newLBFixture(t)
	f.env.Start()
	want := checkUID()

	// A folder the unprivileged check can read the script from and write
	// its answer to.
	dir := openToAll(t)
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
	_, srv, err := devpki.Listener("www.example.org")
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
	f.certsUntouched(certDir, "l1.pem", "l1-list.pem")
}

// certsUntouched fails the test unless the named certificates in certDir
// are still 0600 root and nothing of the check's copies is left behind.
func (f *lbFixture) certsUntouched(certDir string, names ...string) {
	t := f.t
	t.Helper()
	for _, name := range names {
		st, err := os.Stat(filepath.Join(certDir, name))
		if err != nil {
			t.Fatal(err)
		}
		sys := st.Sys().(*syscall.Stat_t)
		if st.Mode().Perm() != 0o600 || sys.Uid != 0 || sys.Gid != 0 {
			t.Errorf("%s: mode %v owner %d:%d, want 0600 root", name, st.Mode().Perm(), sys.Uid, sys.Gid)
		}
	}
	if left, _ := filepath.Glob(f.env.Path("lib", "certs", ".check-*")); len(left) != 0 {
		t.Errorf("copies left: %v", left)
	}
}

// TestHAProxyBasePathUnderPrivateParent: base_path lies in a folder only
// root may enter (upstream copes: it validates as root). Uploads, starts
// and reloads of a TLS-terminated listener whose certificate, client CA,
// CRL, error file and lua script all lie under base_path still pass the
// unprivileged check, the VIP serves HTTP and HTTPS, and no mode changes.
func TestHAProxyBasePathUnderPrivateParent(t *testing.T) {
	f := newLBFixture(t)
	// The env's folder holds base_path ("lib") and the agent's own keys.
	if err := os.Chmod(f.env.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	f.env.Start()
	want := checkUID()

	// The lua script appends the uid it runs as to a file outside, in a
	// folder anyone may write: the check's uid shows it ran unprivileged.
	uidFile := filepath.Join(openToAll(t), "uids")
	script, errPage := filepath.Join(f.base(), "lua", "whoami.lua"), filepath.Join(f.base(), "errors", "503.http")
	for path, body := range map[string]string{
		script:  `os.execute("id -u >> ` + uidFile + `")` + "\n",
		errPage: "HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\n\r\nno member\n",
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The listener's certificate, crt-list, client CA and CRL, uploaded as
	// the controller does (0600 root).
	ca, srv, err := devpki.Listener("www.example.org")
	if err != nil {
		t.Fatal(err)
	}
	crl, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{Number: big.NewInt(1),
		ThisUpdate: time.Now().Add(-time.Hour), NextUpdate: time.Now().Add(24 * time.Hour)}, ca.Cert, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	certDir := f.env.Path("lib", "certs", testLB)
	list := filepath.Join(certDir, "l1-list.pem")
	uploads := map[string][]byte{
		"l1.pem":         srv.Combined(),
		"l1-list.pem":    []byte(filepath.Join(certDir, "l1.pem") + "\n"),
		"client-ca.pem":  ca.PEM,
		"client-crl.pem": pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: crl}),
	}
	for name, body := range uploads {
		if status, _, out := f.env.Do("PUT", "/1.0/loadbalancer/"+testLB+"/certificates/"+name, body); status != 200 {
			t.Fatalf("certificate %s: %d %s", name, status, out)
		}
	}
	config := func(gen int) string {
		cfg := f.config(gen, "bind "+f.lb.VIP+":443 ssl crt-list "+list+" ca-file "+filepath.Join(certDir, "client-ca.pem")+
			" verify optional crl-file "+filepath.Join(certDir, "client-crl.pem"), "errorfile 503 "+errPage)
		return strings.Replace(cfg, "global\n", "global\n    lua-load "+script+"\n", 1)
	}
	// step runs one call and, for an upload or a reload, checks that its
	// haproxy -c ran the lua script as the check user (the script runs
	// again as root in HAProxy's master on a start or reload, hence
	// "among the uids").
	step := func(what string, call func() (int, string), wantBody string, checked bool) {
		t.Helper()
		os.Remove(uidFile)
		if status, body := call(); status != 202 || !strings.Contains(body, wantBody) {
			t.Fatalf("%s: %d %s\n%s", what, status, body, f.env.Output())
		}
		got, _ := os.ReadFile(uidFile)
		if checked && !slices.Contains(strings.Fields(string(got)), want) {
			t.Fatalf("%s: the check did not run the lua script as uid %s (uids %q)", what, want, got)
		}
	}
	https := f.lb.HTTPClient(false)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	https.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: pool, ServerName: "www.example.org"}
	servesTLS := func(gen string) {
		t.Helper()
		var last error
		defer func() {
			if last != nil {
				t.Logf("last answer over TLS: %v", last)
			}
		}()
		testenv.WaitFor(t, 20*time.Second, "generation "+gen+" over TLS", func() bool {
			var g string
			g, last = tiersutil.GetMember(https, "https"+strings.TrimPrefix(f.lb.URL(443, "/"), "http"), "X-Gen")
			if last == nil && g != gen {
				last = fmt.Errorf("generation %q served", g)
			}
			return last == nil
		})
	}

	step("upload", func() (int, string) { return f.upload(config(1)) }, "", true)
	step("start", func() (int, string) { return f.action("start") }, "started", false)
	f.waitServing("HTTP through the VIP", "1")
	servesTLS("1")
	step("upload 2", func() (int, string) { return f.upload(config(2)) }, "", true)
	step("reload", func() (int, string) { return f.action("reload") }, "reloaded", true)
	servesTLS("2")
	// A new agent checks the stored config again before it reloads.
	f.env.Stop()
	f.env.Start()
	step("reload by a new agent", func() (int, string) { return f.action("reload") }, "reloaded", true)
	servesTLS("2")

	if fi, err := os.Stat(f.env.Dir); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o700 {
		t.Errorf("base_path's parent is %v, want 0700", fi.Mode().Perm())
	}
	f.certsUntouched(certDir, slices.Collect(maps.Keys(uploads))...)
}

// An agent run without root (make run as a user) says in one line that
// the data-plane namespace cannot be made and what that breaks, and logs
// no ERROR (no netlink error code); the API still serves.
func TestRunWithoutRootSaysWhatWillNotWork(t *testing.T) {
	topo.RequireRoot(t) // to become nobody
	const nobody = 65534
	env := testenv.New(t)
	if err := os.WriteFile(env.ConfigPath, []byte(env.Config()), 0o600); err != nil {
		t.Fatal(err)
	}
	err := filepath.WalkDir(env.Dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, nobody, nobody)
	})
	if err != nil {
		t.Fatal(err)
	}
	env.Credential = &syscall.Credential{Uid: nobody, Gid: nobody}
	env.Start()
	testenv.WaitFor(t, 10*time.Second, "start-up complete", func() bool { return env.Count("start-up complete") > 0 })
	out := env.Output()
	t.Logf("agent output:\n%s", out)
	if n := strings.Count(out, "not running as root: the data-plane namespace "+env.Namespace()+" cannot be made"); n != 1 {
		t.Errorf("%d lines saying the namespace cannot be made, want 1", n)
	}
	for _, bad := range []string{"\tERROR\t", "operation not permitted", "netlink"} {
		if strings.Contains(out, bad) {
			t.Errorf("output holds %q", bad)
		}
	}
	if code, _, body := env.Do("GET", "/1.0/info", nil); code != 200 {
		t.Errorf("GET /1.0/info: %d %s", code, body)
	}
}
