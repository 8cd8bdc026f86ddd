//go:build interop

// The HAProxy part of the interop tier: the real controller driver
// (python3-octavia's HaproxyAmphoraLoadBalancerDriver and its
// AmphoraAPIClient1_0) runs a load balancer on the real agent binary,
// through tiers/testdata/interop/haproxy_controller_client.py, with configs
// rendered by Octavia's JinjaTemplater, HAProxy inside a real network
// namespace and traffic from a client namespace to member namespaces.
//
//	go test -tags interop -count=1 -v ./cmd/amphora-agent/tiers/interop/ -run InteropHAProxy
package interop_test

import (
	"bytes"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/certs/devpki"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/ctrlutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/tiersutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
)

const (
	hapTrafficWait = 20 * time.Second
)

var (
	// The TERMINATED_HTTPS listener, its pool and that pool's members.
	hapTLSListener  = "b2d3e4f5-0000-4000-8000-00000000b001"
	hapTLSPool      = "b2d3e4f5-0000-4000-8000-00000000b002"
	hapTLSMemberIDs = []string{
		"b2d3e4f5-0000-4000-8000-00000000b101",
		"b2d3e4f5-0000-4000-8000-00000000b102",
	}
)

func hapResult[T any](t *testing.T, p ctrlutil.HAPPhase) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(p.Result))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("phase %s: result %s: %v", p.Phase, p.Result, err)
	}
	return v
}

// wantJSON checks a response body against the exact JSON object want.
func wantJSON(t *testing.T, what, body string, want map[string]any) {
	t.Helper()
	var got map[string]any
	if err := json.Unmarshal([]byte(body), &got); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("%s answered %s, want %v", what, body, want)
	}
}

var hapGroupLine = regexp.MustCompile(`\s+group\s.+`)

// hapBareCRLF is a health check's version with a trailing "\r\n" and no
// header behind it, as Octavia 11 renders an HTTP/1.0 monitor; HAProxy
// 3.0 refuses it, so the agent stores the version alone.
var hapBareCRLF = regexp.MustCompile(`(?m)^(\s*option httpchk \S+ \S+ HTTP/1\.[01])\\r\\n$`)

// hapFixture is one agent whose HAProxy runs in the amphora namespace of
// a client/amphora/members topology, and the controller script driving it.
type hapFixture struct {
	t       *testing.T
	env     *testenv.Env
	lb      *topo.LB
	ns      string
	base    string // [haproxy_amphora] base_path
	certDir string // [haproxy_amphora] base_cert_dir
	lbDir   string
	cfgPath string
	sock    string
	hap     *tiersutil.HAProxyMasters
	ctl     *ctrlutil.HAPController
	ready   ctrlutil.HAPPhase
	start   time.Time
}

// newHAPFixture builds the topology, starts the agent in it (after
// before(f), which may add to its configuration) and the controller script
// with the common arguments plus extra(f).
func newHAPFixture(t *testing.T, extra func(f *hapFixture) []string, before ...func(f *hapFixture)) *hapFixture {
	ctrlutil.RequireOctavia(t)
	f := &hapFixture{t: t, start: time.Now()}
	f.ns, f.lb, f.env = tiersutil.NewLBEnv(t)
	f.base, f.certDir = f.env.Path("lib"), f.env.Path("lib", "certs")
	f.lbDir = filepath.Join(f.base, ctrlutil.HAPLB)
	f.cfgPath = filepath.Join(f.lbDir, "haproxy.cfg")
	f.sock = filepath.Join(f.base, ctrlutil.HAPLB+".sock")
	// HAProxy outlives the agent by design; the test stops it.
	f.hap = tiersutil.WatchHAProxy(t, filepath.Join(f.lbDir, ctrlutil.HAPLB+".pid"))
	for _, b := range before {
		b(f)
	}
	f.env.Start()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent access log:\n%s", requestLines(f.env))
		}
	})

	args := []string{
		"--amphora-id", f.env.AmphoraID,
		"--lb-network-ip", "127.0.0.1",
		"--port", strconv.Itoa(f.env.Port),
		"--client-cert", f.env.ClientCert,
		"--server-ca", f.env.CAFile,
		"--workdir", t.TempDir(),
		"--base-path", f.base,
		"--base-cert-dir", f.certDir,
		"--lb-id", ctrlutil.HAPLB,
		"--listener-id", ctrlutil.HAPListener,
		"--pool-id", ctrlutil.HAPPool,
		"--vip", f.lb.VIP,
		"--listener-port", "80",
		"--connection-limit", strconv.Itoa(ctrlutil.HAPConnLimit),
		"--cert-id", ctrlutil.HAPCert,
	}
	for i, m := range f.lb.Members {
		args = append(args, "--member", fmt.Sprintf("%s,%s,%d", ctrlutil.HAPMemberIDs[i], m.Addr, m.Port))
	}
	if extra != nil {
		args = append(args, extra(f)...)
	}
	f.ctl, f.ready = ctrlutil.StartHAPController(t, f.env, args...)
	t.Logf("controller ready in %.3fs: driver %s, templater %s (base_amp_path %s, base_crt_dir %s)",
		f.ready.Seconds, f.ready.Driver, f.ready.Templater, f.ready.TemplaterBaseAmpPath, f.ready.TemplaterBaseCrtDir)
	if f.ready.TemplaterBaseAmpPath != f.base || f.ready.TemplaterBaseCrtDir != f.certDir {
		t.Fatalf("the driver's templater renders for %s / %s, want the agent's %s / %s",
			f.ready.TemplaterBaseAmpPath, f.ready.TemplaterBaseCrtDir, f.base, f.certDir)
	}
	return f
}

// finish ends the script and logs the timings.
func (f *hapFixture) finish() {
	f.ctl.Quit()
	var total float64
	for _, p := range f.ctl.Phases {
		total += p.Seconds
	}
	f.t.Logf("controller: start-up %.3fs, %d phases %.3fs; test %v (Octavia import check excluded)",
		f.ready.Seconds, len(f.ctl.Phases), total, time.Since(f.start).Round(time.Millisecond))
	if f.t.Failed() {
		f.t.Logf("controller log (stderr):\n%s", f.ctl.Stderr.String())
		f.t.Logf("agent output:\n%s", f.env.Output())
	}
}

// serving sends requests with c to url until every wanted member has
// answered, then 4 more per member, all of which must come from a wanted
// member. It returns how long the first part took.
func (f *hapFixture) serving(c *http.Client, url, what string, want ...string) time.Duration {
	t := f.t
	t.Helper()
	start := time.Now()
	wanted := map[string]bool{}
	for _, m := range want {
		wanted[m] = true
	}
	seen := map[string]bool{}
	var last string
	testenv.WaitFor(t, hapTrafficWait, what, func() bool {
		m, err := tiersutil.GetMember(c, url, "X-Member")
		switch {
		case err != nil:
			last = err.Error()
		case !wanted[m]:
			last = "answered by " + m
			seen = map[string]bool{}
		default:
			seen[m] = true
		}
		return len(seen) == len(wanted)
	})
	took := time.Since(start)
	for i := 0; i < 4*len(want); i++ {
		m, err := tiersutil.GetMember(c, url, "X-Member")
		if err != nil || !wanted[m] {
			t.Fatalf("%s: request %d answered by %q, %v (want %v; before: %s)", what, i, m, err, want, last)
		}
	}
	return took
}

func (f *hapFixture) inNamespace(pid int) bool {
	a, err1 := os.Stat(fmt.Sprintf("/proc/%d/ns/net", pid))
	b, err2 := os.Stat("/run/netns/" + f.ns)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}

// storedConfig checks that the agent stored what the controller uploaded.
func (f *hapFixture) storedConfig(uploaded string) {
	t := f.t
	t.Helper()
	got, err := os.ReadFile(f.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	// The agent strips group lines (spec §2.5 step 3; 11.0.0's template
	// renders none) and rewrites health checks HAProxy 3.0 refuses.
	want := hapGroupLine.ReplaceAllString(uploaded, "")
	want = hapBareCRLF.ReplaceAllString(want, "$1")
	if string(got) != want {
		t.Errorf("%s is not the config the controller uploaded\ngot:\n%s\nwant:\n%s", f.cfgPath, got, want)
	}
	if st, err := os.Stat(f.cfgPath); err == nil && st.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %#o, want 0600", f.cfgPath, st.Mode().Perm())
	}
}

// uploaded is the one config upload_config sent in phase p.
func (f *hapFixture) uploaded(p ctrlutil.HAPPhase) string {
	f.t.Helper()
	var cfgs []string
	for _, c := range p.Calls {
		if c.Call == "upload_config" {
			cfgs = append(cfgs, c.Config)
		}
	}
	if len(cfgs) != 1 {
		f.t.Fatalf("phase %s uploaded %d configs, want 1\n%s", p.Phase, len(cfgs), ctrlutil.CallLines(p))
	}
	return cfgs[0]
}

// listenerUpdate checks the tail of the controller's
// update_amphora_listeners in phase p, whose calls must be want: the
// config upload (202, ETag = md5) and the reload (202, reloadDetails),
// and what Octavia's template rendered for this agent. It returns the
// uploaded config.
func (f *hapFixture) listenerUpdate(p ctrlutil.HAPPhase, want []string, reloadDetails string) string {
	t := f.t
	t.Helper()
	if got := p.CallNames(); !reflect.DeepEqual(got, want) {
		t.Fatalf("phase %s: the driver called %v, want %v\n%s", p.Phase, got, want, ctrlutil.CallLines(p))
	}
	if got := string(p.Call(t, 0, "get_api_version").Returned); got != `{"api_version": "1.0"}` && got != `{"api_version":"1.0"}` {
		t.Errorf("get_api_version returned %s", got)
	}
	if r := hapResult[map[string]any](t, p); r["api_version"] != "1.0" {
		t.Errorf("the driver populated api_version %v, want 1.0", r["api_version"])
	}
	p.Exchange(t, 0, "GET", "//")
	cfg := f.uploaded(p)
	n := len(want)
	up := p.Exchange(t, n-2, "PUT", "/1.0/loadbalancer/"+f.env.AmphoraID+"/"+ctrlutil.HAPLB+"/haproxy")
	if up.Status != 202 || up.ETag == nil || *up.ETag != tiersutil.MD5Hex([]byte(cfg)) {
		t.Errorf("upload_config: %s; want 202 with ETag %s", up, tiersutil.MD5Hex([]byte(cfg)))
	}
	wantJSON(t, "upload_config", up.Body, map[string]any{"message": "OK"})
	rl := p.Exchange(t, n-1, "PUT", "/1.0/loadbalancer/"+ctrlutil.HAPLB+"/reload")
	if rl.Status != 202 {
		t.Errorf("reload_listener: %s; want 202", rl)
	}
	wantJSON(t, "reload_listener", rl.Body, map[string]any{"message": "OK", "details": reloadDetails})
	for _, want := range []string{
		"stats socket " + f.sock + " mode 0666 level user\n",
		"server-state-file " + filepath.Join(f.lbDir, "servers-state") + "\n",
		fmt.Sprintf("    maxconn %d\n", ctrlutil.HAPConnLimit),
		"frontend " + ctrlutil.HAPListener + "\n",
		"    bind " + f.lb.VIP + ":80\n",
		"    mode http\n",
		"default_backend " + ctrlutil.HAPPool + ":" + ctrlutil.HAPListener + "\n",
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("the rendered config has no %q:\n%s", want, cfg)
		}
	}
	return cfg
}

// checkListeners compares get_all_listeners with want (uuid -> type).
func (f *hapFixture) checkListeners(got []map[string]any, want map[string]string) {
	f.t.Helper()
	var wantList []map[string]any
	for uuid, typ := range want {
		wantList = append(wantList, map[string]any{"status": "ACTIVE", "uuid": uuid, "type": typ})
	}
	key := func(l []map[string]any) func(i, j int) bool {
		return func(i, j int) bool { return fmt.Sprint(l[i]["uuid"]) < fmt.Sprint(l[j]["uuid"]) }
	}
	sort.Slice(got, key(got))
	sort.Slice(wantList, key(wantList))
	if len(got) != len(wantList) || (len(got) > 0 && !reflect.DeepEqual(got, wantList)) {
		f.t.Errorf("get_all_listeners = %v, want %v", got, wantList)
	}
}

// deleteLB runs the "delete" phase (driver.delete of the last listener:
// DELETE /1.0/listeners/{lb_id}, then once more as a retried task would)
// and checks that HAProxy and every file of the LB are gone.
func (f *hapFixture) deleteLB(master int, clients map[string]*http.Client) {
	t := f.t
	t.Helper()
	del := f.ctl.Run("delete", nil)
	if got, want := del.CallNames(), []string{"get_api_version", "delete_listener", "delete_listener", "get_all_listeners", "get_details"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("delete: the driver called %v, want %v\n%s", got, want, ctrlutil.CallLines(del))
	}
	for _, i := range []int{1, 2} {
		d := del.Exchange(t, i, "DELETE", "/1.0/listeners/"+ctrlutil.HAPLB)
		if d.Status != 200 {
			t.Errorf("delete_listener: %s; want 200", d)
		}
		wantJSON(t, "delete_listener", d.Body, map[string]any{"message": "OK"})
	}
	dr := hapResult[struct {
		Listeners []map[string]any `json:"listeners"`
		Details   json.RawMessage  `json:"details"`
	}](t, del)
	f.checkListeners(dr.Listeners, nil)
	details := decodeObject(t, "details after delete", dr.Details)
	if n := fmt.Sprint(details["haproxy_count"]); n != "0" {
		t.Errorf("details haproxy_count after delete = %s, want 0", n)
	}
	if l := fmt.Sprint(details["listeners"]); l != "[]" {
		t.Errorf("details listeners after delete = %s, want []", l)
	}
	testenv.WaitFor(t, 10*time.Second, "the HAProxy master gone after delete_listener", func() bool { return !tiersutil.IsHAProxy(master) })
	for _, p := range []string{f.lbDir, f.sock, filepath.Join(f.certDir, ctrlutil.HAPLB)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after delete_listener (%v)", p, err)
		}
	}
	for url, c := range clients {
		if m, err := tiersutil.GetMember(c, url, "X-Member"); err == nil {
			t.Errorf("%s still answers after delete_listener (%s)", url, m)
		}
	}
}

// TestInteropHAProxyLoadBalancer: the controller creates an HTTP listener
// (config rendered by Octavia's JinjaTemplater from its sample models),
// adds a member (reload), starts it (failover path), reads listener status
// and details, uploads, reads and deletes a certificate, and deletes the
// load balancer; traffic from the client namespace proves each config runs.
func TestInteropHAProxyLoadBalancer(t *testing.T) {
	f := newHAPFixture(t, nil)
	env, lb, ctl := f.env, f.lb, f.ctl
	vipURL := lb.URL(80, "/")
	client := lb.HTTPClient(false)
	update := []string{"get_api_version", "get_info", "upload_config", "reload_listener"}

	// 1. Listener create: the first config; the reload of a load
	// balancer that is not running starts it.
	create := ctl.Run("create", nil)
	cfg1 := f.listenerUpdate(create, update, "Configuration file is valid\nhaproxy daemon for "+ctrlutil.HAPLB+" started")
	for i, m := range lb.Members {
		line := fmt.Sprintf("server %s %s ", ctrlutil.HAPMemberIDs[i], m.HostPort())
		if strings.Contains(cfg1, line) != (i == 0) {
			t.Errorf("first config: member %d line %q present = %v, want %v", i+1, line, i != 0, i == 0)
		}
	}
	f.storedConfig(cfg1)
	master := f.hap.Master()
	if master == 0 || !tiersutil.IsHAProxy(master) {
		t.Fatalf("no HAProxy master behind %s after the controller's reload (pid %d)\n%s", f.hap.PidPath, master, env.Output())
	}
	if !f.inNamespace(master) {
		t.Errorf("HAProxy master %d does not run in network namespace %s", master, f.ns)
	}
	t.Logf("create: traffic through the VIP reaches member-1 after %v",
		f.serving(client, vipURL, "traffic to member-1 after create", "member-1").Round(time.Millisecond))

	// 2. Member create: a listener update with both members, a reload of
	// the running HAProxy through its master.
	upd := ctl.Run("update", nil)
	cfg2 := f.listenerUpdate(upd, update, "Listener "+ctrlutil.HAPLB+" reloaded")
	for i, m := range lb.Members {
		if line := fmt.Sprintf("server %s %s ", ctrlutil.HAPMemberIDs[i], m.HostPort()); !strings.Contains(cfg2, line) {
			t.Errorf("second config has no %q", line)
		}
	}
	f.storedConfig(cfg2)
	if got := f.hap.Master(); got != master {
		t.Errorf("the reload replaced the HAProxy master %d by %d; a reload goes through the master", master, got)
		master = got
	}
	t.Logf("update: both members answer after %v",
		f.serving(client, vipURL, "traffic to both members after the reload", "member-1", "member-2").Round(time.Millisecond))
	// The controller renders load-server-state-from-file for a pool with a
	// health monitor; only then are the states saved before the reload.
	if _, err := os.Stat(filepath.Join(f.lbDir, "servers-state")); strings.Contains(cfg2, "load-server-state-from-file global") && err != nil {
		t.Errorf("servers state not saved before the reload: %v", err)
	} else if !strings.Contains(cfg2, "load-server-state-from-file global") && !os.IsNotExist(err) {
		t.Errorf("servers state saved for a config that does not load it (stat: %v)", err)
	}

	// 3. The driver's start (failover flows) on the running load balancer.
	start := ctl.Run("start", nil)
	if got, want := start.CallNames(), []string{"get_api_version", "start_listener"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("start: the driver called %v, want %v", got, want)
	}
	st := start.Exchange(t, 1, "PUT", "/1.0/loadbalancer/"+ctrlutil.HAPLB+"/start")
	if st.Status != 202 {
		t.Errorf("start_listener: %s; want 202", st)
	}
	wantJSON(t, "start_listener", st.Body, map[string]any{"message": "OK", "details": "Configuration file is valid\nhaproxy daemon for " + ctrlutil.HAPLB + " started"})
	if got := f.hap.Master(); got != master {
		t.Errorf("start of the running load balancer replaced the master %d by %d", master, got)
	}
	f.serving(client, vipURL, "traffic after start", "member-1", "member-2")

	// 4. Listener status and details as the controller reads them.
	status := ctl.Run("status", nil)
	if got, want := status.CallNames(), []string{"get_api_version", "get_all_listeners", "get_details"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("status: the driver called %v, want %v", got, want)
	}
	sr := hapResult[struct {
		Listeners []map[string]any `json:"listeners"`
		Details   json.RawMessage  `json:"details"`
	}](t, status)
	f.checkListeners(sr.Listeners, map[string]string{ctrlutil.HAPListener: "HTTP"})
	checkDetails(t, sr.Details)
	details := decodeObject(t, "details", sr.Details)
	if n := fmt.Sprint(details["haproxy_count"]); n != "1" {
		t.Errorf("details haproxy_count = %s, want 1", n)
	}
	if l := fmt.Sprint(details["listeners"]); l != "["+ctrlutil.HAPListener+"]" {
		t.Errorf("details listeners = %s, want [%s]", l, ctrlutil.HAPListener)
	}

	// 5. A certificate as the driver uploads one: md5 check (404
	// ignored), upload, md5 read back, and no second upload once the md5
	// matches.
	certName := ctrlutil.HAPCert + ".pem"
	certURL := "/1.0/loadbalancer/" + ctrlutil.HAPLB + "/certificates/" + certName
	certUp := ctl.Run("cert-upload", nil)
	if got, want := certUp.CallNames(), []string{"get_api_version", "get_cert_md5sum", "upload_cert_pem", "get_cert_md5sum", "get_cert_md5sum"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("cert-upload: the driver called %v, want %v\n%s", got, want, ctrlutil.CallLines(certUp))
	}
	cu := hapResult[struct {
		Filename string  `json:"filename"`
		PEM      string  `json:"pem"`
		MD5Sent  string  `json:"md5sum_sent"`
		MD5Read  *string `json:"md5sum_read"`
	}](t, certUp)
	pemMD5 := tiersutil.MD5Hex([]byte(cu.PEM))
	if cu.Filename != certName || cu.MD5Sent != pemMD5 {
		t.Fatalf("cert-upload sent %s with md5 %s; the PEM's md5 is %s", cu.Filename, cu.MD5Sent, pemMD5)
	}
	notFound := map[string]any{"message": "Certificate Not Found", "details": "No certificate with filename: " + certName}
	if first := certUp.Exchange(t, 1, "GET", certURL); first.Status != 404 {
		t.Errorf("md5 of a certificate not yet uploaded: %s; want a JSON 404", first)
	} else {
		wantJSON(t, "GET of a missing certificate", first.Body, notFound)
	}
	if got := string(certUp.Call(t, 1, "get_cert_md5sum").Returned); got != "null" {
		t.Errorf("get_cert_md5sum(ignore=(404,)) before the upload = %s, want None", got)
	}
	if put := certUp.Exchange(t, 2, "PUT", certURL); put.Status != 200 || put.ETag == nil || *put.ETag != pemMD5 ||
		put.RequestBytes == nil || *put.RequestBytes != len(cu.PEM) {
		t.Errorf("upload_cert_pem: %s; want 200 with ETag %s", put, pemMD5)
	} else {
		wantJSON(t, "upload_cert_pem", put.Body, map[string]any{"message": "OK"})
	}
	if cu.MD5Read == nil || *cu.MD5Read != pemMD5 {
		t.Errorf("get_cert_md5sum = %v, want %s", ctrlutil.Deref(cu.MD5Read), pemMD5)
	}
	for _, i := range []int{3, 4} {
		if g := certUp.Exchange(t, i, "GET", certURL); g.Status != 200 || g.ETag == nil || *g.ETag != pemMD5 {
			t.Errorf("md5 of the uploaded certificate: %s; want 200 with ETag %s", g, pemMD5)
		} else {
			wantJSON(t, "GET certificate", g.Body, map[string]any{"md5sum": pemMD5})
		}
	}
	certPath := filepath.Join(f.certDir, ctrlutil.HAPLB, certName)
	if got, err := os.ReadFile(certPath); err != nil || string(got) != cu.PEM {
		t.Errorf("%s does not hold the uploaded PEM (%v)", certPath, err)
	}
	if st, err := os.Stat(certPath); err == nil && st.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %#o, want 0600", certPath, st.Mode().Perm())
	}

	// 6. Certificate delete; reading it again is the driver's 404 path:
	// ignored (None), or NotFound, which _upload_cert catches.
	certDel := ctl.Run("cert-delete", map[string]string{"get_cert_md5sum": notFoundException})
	if got, want := certDel.CallNames(), []string{"get_api_version", "delete_cert_pem", "get_cert_md5sum", "get_cert_md5sum", "delete_cert_pem"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("cert-delete: the driver called %v, want %v\n%s", got, want, ctrlutil.CallLines(certDel))
	}
	cd := hapResult[struct {
		Ignored *string `json:"md5sum_after_delete_ignoring_404"`
		Raised  *string `json:"raised_without_ignore"`
	}](t, certDel)
	if cd.Ignored != nil {
		t.Errorf("get_cert_md5sum(ignore=(404,)) after delete = %s, want None", *cd.Ignored)
	}
	if cd.Raised == nil || *cd.Raised != notFoundException {
		t.Errorf("get_cert_md5sum after delete raised %s, want %s", ctrlutil.Deref(cd.Raised), notFoundException)
	}
	if c := certDel.Call(t, 2, "get_cert_md5sum"); c.Raised != nil {
		t.Errorf("get_cert_md5sum(ignore=(404,)) raised %s", *c.Raised)
	}
	for _, i := range []int{1, 4} {
		d := certDel.Exchange(t, i, "DELETE", certURL)
		if d.Status != 200 {
			t.Errorf("delete_cert_pem: %s; want 200", d)
		}
		wantJSON(t, "delete_cert_pem", d.Body, map[string]any{"message": "OK"})
	}
	for _, i := range []int{2, 3} {
		g := certDel.Exchange(t, i, "GET", certURL)
		if g.Status != 404 {
			t.Errorf("md5 of a deleted certificate: %s; want 404", g)
		}
		wantJSON(t, "GET of a deleted certificate", g.Body, notFound)
	}
	if _, err := os.Stat(certPath); !os.IsNotExist(err) {
		t.Errorf("%s still there after delete_cert_pem (%v)", certPath, err)
	}

	// 7. Deleting the last listener removes the load balancer.
	f.deleteLB(master, map[string]*http.Client{vipURL: client})
	f.finish()
}

// TestInteropHAProxyTerminatedHTTPS: a load balancer with an HTTP and a
// TERMINATED_HTTPS listener, whose certificate the driver fetches from
// Octavia's local cert manager and uploads with its crt-list; the
// certificate is rotated; the TLS listener is deleted while the HTTP one
// stays; then the load balancer goes.
func TestInteropHAProxyTerminatedHTTPS(t *testing.T) {
	tenantCA, err := devpki.NewAuthority("tenant CA")
	if err != nil {
		t.Fatal(err)
	}
	const host = "www.example.test"
	var certs []devpki.Issued
	f := newHAPFixture(t, func(f *hapFixture) []string {
		args := []string{"--tls-listener-id", hapTLSListener, "--tls-pool-id", hapTLSPool, "--tls-listener-port", "443"}
		for _, id := range hapTLSMemberIDs {
			args = append(args, "--tls-member", id)
		}
		dir := t.TempDir()
		for i := 0; i < 2; i++ {
			c, err := tenantCA.Server(host, net.ParseIP(f.lb.VIP))
			if err != nil {
				t.Fatal(err)
			}
			certs = append(certs, c)
			certFile, keyFile := filepath.Join(dir, fmt.Sprintf("tls%d.crt", i)), filepath.Join(dir, fmt.Sprintf("tls%d.key", i))
			for p, b := range map[string][]byte{certFile: c.CertPEM, keyFile: c.KeyPEM} {
				if err := os.WriteFile(p, b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			args = append(args, "--tls-pem", certFile+","+keyFile)
		}
		return args
	})
	lb, ctl := f.lb, f.ctl
	httpURL, httpsURL := lb.URL(80, "/"), "https://"+net.JoinHostPort(lb.VIP, "443")+"/"
	httpClient := lb.HTTPClient(false)
	roots := x509.NewCertPool()
	roots.AddCert(tenantCA.Cert)
	// served records the certificate serial of every TLS connection.
	var servedMu sync.Mutex
	var served *big.Int
	httpsClient := lb.HTTPClient(false)
	httpsClient.Transport.(*http.Transport).TLSClientConfig = &tls.Config{
		RootCAs: roots, ServerName: host, MinVersion: tls.VersionTLS12,
		VerifyConnection: func(cs tls.ConnectionState) error {
			servedMu.Lock()
			served = cs.PeerCertificates[0].SerialNumber
			servedMu.Unlock()
			return nil
		},
	}
	lastServed := func() *big.Int {
		servedMu.Lock()
		defer servedMu.Unlock()
		return served
	}
	serial := func(i int) *big.Int {
		leaf, err := certs[i].Leaf()
		if err != nil {
			t.Fatal(err)
		}
		return leaf.SerialNumber
	}
	// The controller names a certificate on the amphora after the SHA-1 of
	// its PEM, and the listener's crt-list after the listener.
	pemName := func(i int) string {
		s := sha1.Sum(certs[i].CertPEM)
		return hex.EncodeToString(s[:]) + ".pem"
	}
	crtList := filepath.Join(f.certDir, ctrlutil.HAPLB, hapTLSListener+".pem")
	certURL := func(name string) string { return "/1.0/loadbalancer/" + ctrlutil.HAPLB + "/certificates/" + name }
	// checkCertFile checks certificate i on the amphora (its PEM followed
	// by its key, 0600) and the crt-list naming it.
	checkCertFile := func(i int) {
		t.Helper()
		path := filepath.Join(f.certDir, ctrlutil.HAPLB, pemName(i))
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("certificate %d not on the amphora: %v", i, err)
		}
		if !bytes.HasPrefix(got, certs[i].CertPEM) || !bytes.Contains(got, []byte("PRIVATE KEY-----")) {
			t.Errorf("%s is not certificate %d followed by its key:\n%s", path, i, got)
		}
		if st, err := os.Stat(path); err == nil && st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %#o, want 0600", path, st.Mode().Perm())
		}
		list, err := os.ReadFile(crtList)
		if want := filepath.Join(f.certDir, ctrlutil.HAPLB, pemName(i)) + "\n"; err != nil || string(list) != want {
			t.Errorf("crt-list %s = %q (%v), want %q", crtList, list, err, want)
		}
	}
	// checkUploads checks the driver's first uploads of names from HTTP
	// attempt from on: an md5 check answered 404, then the PUT.
	checkUploads := func(p ctrlutil.HAPPhase, from int, names ...string) {
		t.Helper()
		for k, name := range names {
			get := p.Exchange(t, from+2*k, "GET", certURL(name))
			put := p.Exchange(t, from+2*k+1, "PUT", certURL(name))
			if get.Status != 404 {
				t.Errorf("md5 check before uploading %s: %s; want 404", name, get)
			}
			if put.Status != 200 || put.ETag == nil || *put.ETag != put.RequestMD5 {
				t.Errorf("upload of %s: %s; want 200 with the body's md5 as ETag", name, put)
			}
		}
	}
	tlsStarted := func(what string, cert int) {
		t.Helper()
		took := f.serving(httpsClient, httpsURL, what, "member-1", "member-2")
		if got := lastServed(); got == nil || got.Cmp(serial(cert)) != 0 {
			t.Errorf("%s: HAProxy served certificate serial %v, want certificate %d (%v)", what, got, cert, serial(cert))
		}
		t.Logf("%s: both members answer over TLS after %v", what, took.Round(time.Millisecond))
	}

	// 1. Create both listeners.
	create := ctl.Run("tls-create", nil)
	cfg := f.listenerUpdate(create, []string{"get_api_version", "get_info",
		"get_cert_md5sum", "upload_cert_pem", "get_cert_md5sum", "upload_cert_pem",
		"upload_config", "reload_listener"},
		"Configuration file is valid\nhaproxy daemon for "+ctrlutil.HAPLB+" started")
	checkUploads(create, 2, pemName(0), hapTLSListener+".pem")
	for _, want := range []string{
		"frontend " + hapTLSListener + "\n",
		"    bind " + lb.VIP + ":443 ssl crt-list " + crtList,
		"default_backend " + hapTLSPool + ":" + hapTLSListener + "\n",
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("the rendered config has no %q:\n%s", want, cfg)
		}
	}
	f.storedConfig(cfg)
	checkCertFile(0)
	master := f.hap.Master()
	if master == 0 || !tiersutil.IsHAProxy(master) {
		t.Fatalf("no HAProxy master behind %s after the controller's reload (pid %d)\n%s", f.hap.PidPath, master, f.env.Output())
	}
	f.serving(httpClient, httpURL, "HTTP traffic after create", "member-1", "member-2")
	tlsStarted("TLS traffic after create", 0)

	// 2. Listener status: one HAProxy, two listeners.
	status := ctl.Run("status", nil)
	sr := hapResult[struct {
		Listeners []map[string]any `json:"listeners"`
		Details   json.RawMessage  `json:"details"`
	}](t, status)
	f.checkListeners(sr.Listeners, map[string]string{ctrlutil.HAPListener: "HTTP", hapTLSListener: "TERMINATED_HTTPS"})
	details := decodeObject(t, "details", sr.Details)
	if n := fmt.Sprint(details["haproxy_count"]); n != "1" {
		t.Errorf("details haproxy_count = %s, want 1", n)
	}
	wantIDs := []string{ctrlutil.HAPListener, hapTLSListener}
	sort.Strings(wantIDs)
	if l := fmt.Sprint(details["listeners"]); l != fmt.Sprint(wantIDs) {
		t.Errorf("details listeners = %s, want %v", l, wantIDs)
	}

	// 3. Certificate rotation: new PEM and crt-list, same config, reload.
	rotate := ctl.Run("tls-rotate", nil)
	cfgR := f.listenerUpdate(rotate, []string{"get_api_version", "get_info",
		"get_cert_md5sum", "upload_cert_pem", "get_cert_md5sum", "upload_cert_pem",
		"upload_config", "reload_listener"}, "Listener "+ctrlutil.HAPLB+" reloaded")
	checkUploads(rotate, 2, pemName(1))
	if g := rotate.Exchange(t, 4, "GET", certURL(hapTLSListener+".pem")); g.Status != 200 {
		t.Errorf("md5 check of the existing crt-list: %s; want 200", g)
	}
	if put := rotate.Exchange(t, 5, "PUT", certURL(hapTLSListener+".pem")); put.Status != 200 {
		t.Errorf("upload of the changed crt-list: %s; want 200", put)
	}
	f.storedConfig(cfgR)
	checkCertFile(1)
	if got := f.hap.Master(); got != master {
		t.Errorf("the reload replaced the HAProxy master %d by %d", master, got)
		master = got
	}
	start := time.Now()
	testenv.WaitFor(t, hapTrafficWait, "the rotated certificate served", func() bool {
		_, err := tiersutil.GetMember(httpsClient, httpsURL, "X-Member")
		got := lastServed()
		return err == nil && got != nil && got.Cmp(serial(1)) == 0
	})
	t.Logf("rotate: the new certificate is served after %v", time.Since(start).Round(time.Millisecond))
	tlsStarted("TLS traffic after the rotation", 1)

	// 4. Delete the TLS listener: its certificate goes, the remaining
	// HTTP listener is pushed and reloaded.
	dl := ctl.Run("tls-delete-listener", nil)
	cfgD := f.listenerUpdate(dl, []string{"get_api_version", "delete_cert_pem", "get_info", "upload_config", "reload_listener"},
		"Listener "+ctrlutil.HAPLB+" reloaded")
	if d := dl.Exchange(t, 1, "DELETE", certURL(pemName(1))); d.Status != 200 {
		t.Errorf("delete_cert_pem: %s; want 200", d)
	}
	if strings.Contains(cfgD, hapTLSListener) || strings.Contains(cfgD, ":443") {
		t.Errorf("the config after the TLS listener's delete still has it:\n%s", cfgD)
	}
	f.storedConfig(cfgD)
	if _, err := os.Stat(filepath.Join(f.certDir, ctrlutil.HAPLB, pemName(1))); !os.IsNotExist(err) {
		t.Errorf("the deleted listener's certificate is still on the amphora (%v)", err)
	}
	testenv.WaitFor(t, hapTrafficWait, "port 443 closed after the TLS listener's delete", func() bool {
		_, err := tiersutil.GetMember(httpsClient, httpsURL, "X-Member")
		return err != nil
	})
	f.serving(httpClient, httpURL, "HTTP traffic after the TLS listener's delete", "member-1", "member-2")
	status = ctl.Run("status", nil)
	sr = hapResult[struct {
		Listeners []map[string]any `json:"listeners"`
		Details   json.RawMessage  `json:"details"`
	}](t, status)
	f.checkListeners(sr.Listeners, map[string]string{ctrlutil.HAPListener: "HTTP"})

	// 5. The last listener goes with the load balancer.
	f.deleteLB(master, map[string]*http.Client{httpURL: httpClient, httpsURL: httpsClient})
	f.finish()
}
