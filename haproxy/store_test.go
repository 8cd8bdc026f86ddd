package haproxy

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// fakeRunner records haproxy -c calls and fails when the config holds
// "invalid".
type fakeRunner struct {
	calls [][]string
}

func (f *fakeRunner) CombinedOutput(_ context.Context, name string, args ...string) ([]byte, error) {
	f.calls = append(f.calls, append([]string{name}, args...))
	cfg, _ := os.ReadFile(args[4])
	if strings.Contains(string(cfg), "invalid") {
		return []byte("[ALERT] parsing [haproxy.cfg:3]: unknown keyword 'invalid'"), errors.New("exit status 1")
	}
	return []byte("Configuration file is valid\n"), nil
}

func (f *fakeRunner) Output(ctx context.Context, name string, args ...string) ([]byte, error) {
	return f.CombinedOutput(ctx, name, args...)
}

func newTestStore(t *testing.T) (*Store, *fakeRunner) {
	dir := t.TempDir()
	r := &fakeRunner{}
	return &Store{
		Layout:        Layout{Base: filepath.Join(dir, "lib")},
		HAProxyCmd:    "/usr/sbin/haproxy",
		UserGroupFile: filepath.Join(dir, "lib", "haproxy-default-user-group.conf"),
		Runner:        r,
		Log:           zap.NewNop(),
		FDLimit:       func() uint64 { return 20000 },
	}, r
}

func TestUploadStripsGroupValidatesAndPromotes(t *testing.T) {
	s, r := newTestStore(t)
	body := "global\n    user nobody\n    group haproxy\n    maxconn 1000\nfrontend L1\n    mode http\n"
	if err := s.Upload(context.Background(), "AMP1", "lb1", []byte(body)); err != nil {
		t.Fatal(err)
	}
	stored, err := os.ReadFile(s.Layout.ConfigPath("lb1"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "global\n    user nobody\n    maxconn 1000\nfrontend L1\n    mode http\n"; string(stored) != want {
		t.Fatalf("stored config:\n%q\nwant\n%q", stored, want)
	}
	if st, _ := os.Stat(s.Layout.ConfigPath("lb1")); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode().Perm())
	}
	want := []string{"/usr/sbin/haproxy", "-c", "-L", "quxbkjFfO2U3PaVHnExCdJYeHkA", "-f", s.Layout.StagedPath("lb1"), "-f", s.UserGroupFile}
	if len(r.calls) != 1 || strings.Join(r.calls[0], " ") != strings.Join(want, " ") {
		t.Fatalf("validation ran %q, want %q", r.calls, want)
	}
	if _, err := os.Stat(s.Layout.StagedPath("lb1")); !os.IsNotExist(err) {
		t.Fatal("staged file left behind")
	}
	if ug, err := os.ReadFile(s.UserGroupFile); err != nil || !strings.Contains(string(ug), "group ") {
		t.Fatalf("missing user/group file not replaced by a default: %q %v", ug, err)
	}
	st, err := s.ReadState("lb1")
	if err != nil || st.Peer != "quxbkjFfO2U3PaVHnExCdJYeHkA" || st.AmphoraID != "AMP1" || st.Running {
		t.Fatalf("state %+v %v: upload must record the peer and not mark the LB running", st, err)
	}
}

func TestInvalidUploadKeepsLiveConfig(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := context.Background()
	if err := s.Upload(ctx, "AMP1", "lb1", []byte("global\n")); err != nil {
		t.Fatal(err)
	}
	err := s.Upload(ctx, "AMP1", "lb1", []byte("global\n    invalid\n"))
	fe, ok := fault.As(err)
	if !ok || fe.Kind != fault.KindInvalid || fe.Message != "Invalid request" || !strings.Contains(fe.Details, "unknown keyword 'invalid'") {
		t.Fatalf("invalid upload: %v", err)
	}
	if live, _ := os.ReadFile(s.Layout.ConfigPath("lb1")); string(live) != "global\n" {
		t.Fatalf("live config changed: %q", live)
	}
	if failed, _ := os.ReadFile(s.Layout.FailedPath("lb1")); string(failed) != "global\n    invalid\n" {
		t.Fatalf("rejected config not kept: %q", failed)
	}
}

func TestUploadRefusesUnsafeIDs(t *testing.T) {
	s, r := newTestStore(t)
	for _, ids := range [][2]string{{"AMP1", ".."}, {"AMP1", "../x"}, {"AMP1", ""}, {"../amp", "lb1"}, {"AMP1", "lb1/x"}, {"AMP1", ".hidden"}} {
		err := s.Upload(context.Background(), ids[0], ids[1], []byte("global\n"))
		if fe, ok := fault.As(err); !ok || fe.Kind != fault.KindInvalid {
			t.Errorf("ids %q: %v, want 400", ids, err)
		}
	}
	if len(r.calls) != 0 {
		t.Fatal("haproxy ran for an unsafe id")
	}
	if entries, _ := os.ReadDir(filepath.Dir(s.Layout.Base)); len(entries) != 0 {
		t.Fatalf("files written for unsafe ids: %v", entries)
	}
}

func TestUploadExplainsDescriptorShortage(t *testing.T) {
	s, r := newTestStore(t)
	cfg := "global\n    maxconn 50000\ndefaults\n    option splice-request\n"
	err := s.Upload(context.Background(), "AMP1", "lb1", []byte(cfg))
	fe, ok := fault.As(err)
	if !ok || fe.Kind != fault.KindInvalid {
		t.Fatalf("want 400, got %v", err)
	}
	// 2 per connection + 2 per splice pipe (maxconn/4) + slack.
	for _, want := range []string{"125040", "50000", "20000", "connection_limit", "LimitNOFILE"} {
		if !strings.Contains(fe.Details, want) {
			t.Errorf("details %q do not mention %s", fe.Details, want)
		}
	}
	if len(r.calls) != 0 {
		t.Fatal("haproxy ran for a config that cannot start")
	}
}

func TestConfigNotFound(t *testing.T) {
	s, _ := newTestStore(t)
	for _, lb := range []string{"missing", ".."} {
		_, err := s.Config(lb)
		fe, ok := fault.As(err)
		if !ok || fe.Kind != fault.KindNotFound || fe.Message != "Loadbalancer Not Found" || fe.Details != "No loadbalancer with UUID: "+lb {
			t.Errorf("%s: %v", lb, err)
		}
	}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func TestReservedIDsAreNoLoadBalancers(t *testing.T) {
	s, r := newTestStore(t)
	s.Layout.Reserved = func() map[string]string { return map[string]string{"vrrp": "the VRRP keepalived's files"} }
	// vrrp/ holds a record named like a load balancer's, and a config an
	// agent without this check let an upload write there.
	state, cfg := s.Layout.StatePath("vrrp"), s.Layout.ConfigPath("vrrp")
	testkit.WriteFile(t, state, `{"running":true}`)
	testkit.WriteFile(t, cfg, "global\n")

	err := s.Upload(context.Background(), "AMP1", "vrrp", []byte("global\n"))
	if fe, ok := fault.As(err); !ok || fe.Kind != fault.KindInvalid || !strings.Contains(fe.Details, `load balancer id "vrrp" is reserved`) || !strings.Contains(fe.Details, "VRRP") {
		t.Fatalf("upload: %v, want a 400 naming the reservation", err)
	}
	if len(r.calls) != 0 {
		t.Fatal("haproxy ran for a reserved id")
	}
	if s.Exists("vrrp") || s.Layout.Known("vrrp") {
		t.Fatal("a reserved id is taken for a load balancer")
	}
	if _, err := s.Config("vrrp"); err == nil {
		t.Fatal("config of a reserved id served")
	}
	if lbs, err := s.Layout.LoadBalancers(); err != nil || len(lbs) != 0 {
		t.Fatalf("load balancers %v, %v", lbs, err)
	}
	if err := s.Remove("vrrp"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{state, cfg} {
		if !exists(p) {
			t.Fatalf("%s removed", p)
		}
	}
}

func TestRemoveTakesOnlyWhatTheAgentMade(t *testing.T) {
	s, _ := newTestStore(t)
	base := s.Layout.Base
	// A folder that is not a load balancer's, a load balancer whose config
	// names an ordinary file as its stats socket, an ordinary file at its
	// socket path, and a load balancer with a real socket.
	stray := filepath.Join(base, "stray", "notes")
	named := filepath.Join(base, "keep.txt")
	testkit.WriteFile(t, stray, "not ours")
	testkit.WriteFile(t, named, "not a socket")
	testkit.WriteFile(t, s.Layout.SocketPath("lb1"), "not a socket")
	testkit.WriteFile(t, s.Layout.ConfigPath("lb1"), "global\n    stats socket "+named+" mode 0666 level user\n")
	testkit.WriteFile(t, s.Layout.StatePath("lb2"), "{}")
	sock, err := net.Listen("unix", s.Layout.SocketPath("lb2"))
	if err != nil {
		t.Fatal(err)
	}
	sock.(*net.UnixListener).SetUnlinkOnClose(false)
	sock.Close()

	for _, lb := range []string{"stray", "lb1", "lb2"} {
		if err := s.Remove(lb); err != nil {
			t.Fatalf("remove %s: %v", lb, err)
		}
	}
	for _, p := range []string{stray, named, s.Layout.SocketPath("lb1")} {
		if !exists(p) {
			t.Errorf("%s removed", p)
		}
	}
	for _, p := range []string{s.Layout.Dir("lb1"), s.Layout.Dir("lb2"), s.Layout.SocketPath("lb2")} {
		if exists(p) {
			t.Errorf("%s left", p)
		}
	}
}

// The reload after an upload does not run haproxy -c again for the config
// the upload checked, unless the config, the HAProxy binary, the
// user/group file or a file the config names (directly, through a folder
// or a crt-list) changed since, or the config loads Lua.
func TestCheckStoredSkipsWhatUploadChecked(t *testing.T) {
	s, r := newTestStore(t)
	ctx := context.Background()
	dir := t.TempDir()
	bin := filepath.Join(dir, "haproxy")
	write := func(p, data string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(bin, "binary v1")
	s.HAProxyCmd = bin
	certDir := filepath.Join(dir, "certs")
	if err := os.Mkdir(certDir, 0o755); err != nil {
		t.Fatal(err)
	}
	pem, listed, errf := filepath.Join(dir, "l1.pem"), filepath.Join(certDir, "sni.pem"), filepath.Join(dir, "503.http")
	crtList := filepath.Join(dir, "l1.crtlist")
	write(pem, "cert")
	write(listed, "sni cert")
	write(crtList, listed+" [ssl-min-ver TLSv1.2] sni.example\n")
	write(errf, "HTTP/1.0 503\r\n\r\n")
	cfg := "global\n    maxconn 100\nfrontend L1\n    bind :443 ssl crt-list " + crtList + " ca-file " + pem +
		"\n    errorfile 503 " + errf + "\n    bind :444 ssl crt " + certDir + "\n"
	checks := func() int {
		n := 0
		for _, c := range r.calls {
			if len(c) > 1 && c[1] == "-c" {
				n++
			}
		}
		return n
	}
	reload := func(wantCheck bool, what string) {
		t.Helper()
		before := checks()
		_, skipped, err := s.CheckStored(ctx, "lb1", PeerName("AMP1"))
		if err != nil {
			t.Fatal(err)
		}
		if ran := checks() > before; ran != wantCheck || skipped == wantCheck {
			t.Fatalf("%s: check ran %v (skipped %v), want it to run %v", what, ran, skipped, wantCheck)
		}
	}
	upload := func(body string) {
		t.Helper()
		if err := s.Upload(ctx, "AMP1", "lb1", []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	upload(cfg)
	reload(false, "right after the upload")
	reload(false, "a second reload of the same config")

	for _, change := range []struct {
		what string
		do   func()
	}{
		{"certificate rewritten", func() { write(pem, "cert2") }},
		{"certificate named in the crt-list rewritten", func() { write(listed, "sni cert 2") }},
		{"crt-list rewritten", func() { write(crtList, listed+"\n") }},
		{"file added to the certificate folder", func() { write(filepath.Join(certDir, "other.pem"), "x") }},
		{"error file removed", func() { os.Remove(errf) }},
		{"HAProxy binary replaced", func() { os.Remove(bin); write(bin, "binary v2") }},
		{"user/group file changed", func() { write(s.UserGroupFile, "global\n    group other\n") }},
		{"stored config changed on disk", func() { write(s.Layout.ConfigPath("lb1"), cfg+"# edited\n") }},
	} {
		upload(cfg)
		change.do()
		reload(true, change.what)
		reload(false, change.what+", then reloaded again")
	}

	// A crt-list read once is not read again while unchanged; once
	// rewritten, the files it names now count.
	other := filepath.Join(dir, "other.pem")
	write(other, "other cert")
	upload(cfg)
	write(crtList, other+"\n")
	reload(true, "crt-list naming another certificate")
	reload(false, "crt-list naming another certificate, reloaded again")
	write(other, "other cert 2")
	reload(true, "the certificate the rewritten crt-list names rewritten")

	upload(cfg + "    lua-load /dev/null\n")
	reload(true, "a config loading Lua")
	upload(cfg)
	s.Remove("lb1")
	upload(cfg)
	if checks() == 0 {
		t.Fatal("no check ran")
	}
}
