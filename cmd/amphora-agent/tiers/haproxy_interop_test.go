//go:build interop || vm

// The HAProxy part of the interop tier: the real controller driver
// (python3-octavia's HaproxyAmphoraLoadBalancerDriver and its
// AmphoraAPIClient1_0) runs a load balancer on the real agent binary,
// through testdata/interop/haproxy_controller_client.py, with configs
// rendered by Octavia's JinjaTemplater, HAProxy inside a real network
// namespace and traffic from a client namespace to member namespaces.
//
//	go test -tags interop -count=1 -v ./cmd/amphora-agent/tiers/ -run InteropHAProxy
package tiers_test

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
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
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
)

const (
	// The controller uses UUIDs for every object; the frontend, backend
	// and server names of the rendered config are these ids.
	hapLB       = "6e1f2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b"
	hapListener = "7a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
	hapPool     = "8b3c4d5e-6f7a-4b8c-9d0e-1f2a3b4c5d6e"
	hapCert     = "9c4d5e6f-7a8b-4c9d-8e1f-2a3b4c5d6e7f"
	// hapConnLimit is the listener's connection_limit: HAProxy needs about
	// 2.5 descriptors per connection and the hard limit here is 20000.
	hapConnLimit = 1000

	// hapStartTimeout bounds the script's start-up (imports, config,
	// driver); hapPhaseTimeout one phase (a reload may take up to 30 s,
	// the client's read timeout is 60 s).
	hapStartTimeout = 60 * time.Second
	hapPhaseTimeout = 90 * time.Second
	hapTrafficWait  = 20 * time.Second
)

var (
	hapMemberIDs = []string{
		"a1c2e3f4-0000-4000-8000-00000000a001",
		"a1c2e3f4-0000-4000-8000-00000000a002",
	}
	// The TERMINATED_HTTPS listener, its pool and that pool's members.
	hapTLSListener  = "b2d3e4f5-0000-4000-8000-00000000b001"
	hapTLSPool      = "b2d3e4f5-0000-4000-8000-00000000b002"
	hapTLSMemberIDs = []string{
		"b2d3e4f5-0000-4000-8000-00000000b101",
		"b2d3e4f5-0000-4000-8000-00000000b102",
	}
)

// hapPhase is one JSON line of haproxy_controller_client.py.
type hapPhase struct {
	Phase   string          `json:"phase"`
	Error   string          `json:"error"`
	Seconds float64         `json:"seconds"`
	Result  json.RawMessage `json:"result"`
	Calls   []hapCall       `json:"calls"`
	HTTP    []hapHTTP       `json:"http"`

	// ready only
	Driver               string         `json:"driver"`
	Templater            string         `json:"templater"`
	TemplaterBaseAmpPath string         `json:"templater_base_amp_path"`
	TemplaterBaseCrtDir  string         `json:"templater_base_crt_dir"`
	ControllerConfig     map[string]any `json:"controller_config"`
}

// hapCall is one call of a driver client method.
type hapCall struct {
	Client   string          `json:"client"`
	Call     string          `json:"call"`
	Args     []any           `json:"args"`
	Kwargs   map[string]any  `json:"kwargs"`
	Raised   *string         `json:"raised"`
	Returned json.RawMessage `json:"returned"`
	Seconds  float64         `json:"seconds"`
	Config   string          `json:"config"` // upload_config only
}

// hapHTTP is one HTTP attempt of the client's requests session.
type hapHTTP struct {
	Client       string  `json:"client"`
	Method       string  `json:"method"`
	URL          string  `json:"url"`
	RequestBytes *int    `json:"request_bytes"`
	RequestMD5   string  `json:"request_md5"`
	RequestJSON  any     `json:"request_json"`
	Status       int     `json:"status"`
	ContentType  string  `json:"content_type"`
	ETag         *string `json:"etag"`
	Body         string  `json:"body"`
	Raised       string  `json:"raised"`
	Seconds      float64 `json:"seconds"`
}

func (h hapHTTP) path() string {
	if i := strings.Index(h.URL, "://"); i >= 0 {
		if j := strings.IndexByte(h.URL[i+3:], '/'); j >= 0 {
			return h.URL[i+3+j:]
		}
	}
	return h.URL
}

func (h hapHTTP) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", h.Method, h.path())
	if h.RequestBytes != nil {
		fmt.Fprintf(&b, " (%d bytes, md5 %s)", *h.RequestBytes, h.RequestMD5)
	}
	if h.RequestJSON != nil {
		fmt.Fprintf(&b, " json %v", h.RequestJSON)
	}
	if h.Raised != "" {
		fmt.Fprintf(&b, " -> raised %s after %.3fs", h.Raised, h.Seconds)
		return b.String()
	}
	fmt.Fprintf(&b, " -> %d %s", h.Status, h.ContentType)
	if h.ETag != nil {
		fmt.Fprintf(&b, " ETag %s", *h.ETag)
	}
	fmt.Fprintf(&b, " in %.3fs: %s", h.Seconds, h.Body)
	return b.String()
}

func (c hapCall) String() string {
	args := c.Args
	if len(args) > 0 {
		args = args[1:] // the amphora
	}
	s := fmt.Sprintf("%s.%s%v", c.Client, c.Call, args)
	if len(c.Kwargs) > 0 {
		s += fmt.Sprintf(" %v", c.Kwargs)
	}
	if c.Raised != nil {
		return fmt.Sprintf("%s raised %s (%.3fs)", s, *c.Raised, c.Seconds)
	}
	ret := string(c.Returned)
	if len(ret) > 300 {
		ret = ret[:300] + "..."
	}
	return fmt.Sprintf("%s = %s (%.3fs)", s, ret, c.Seconds)
}

// exchanges renders every HTTP attempt of a phase, one per line.
func (p hapPhase) exchanges() string {
	var b strings.Builder
	for _, h := range p.HTTP {
		b.WriteString("  " + h.String() + "\n")
	}
	return b.String()
}

func (p hapPhase) callNames() []string {
	var names []string
	for _, c := range p.Calls {
		names = append(names, c.Call)
	}
	return names
}

// hapController runs the script and talks to it phase by phase.
type hapController struct {
	t      *testing.T
	env    *testenv.Env
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *testenv.SyncBuffer
	done   chan struct{}
	phases []hapPhase
}

func startHAPController(t *testing.T, env *testenv.Env, args ...string) (*hapController, hapPhase) {
	t.Helper()
	script := testdataScript(t, "interop", "haproxy_controller_client.py")
	c := &hapController{t: t, env: env, lines: make(chan string, 16), stderr: &testenv.SyncBuffer{}, done: make(chan struct{})}
	c.cmd = exec.Command(debianPython, append([]string{script}, args...)...)
	c.cmd.Env = pythonEnv()
	c.cmd.Stderr = c.stderr
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 1<<16), 64<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	go func() { c.cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			c.cmd.Process.Kill()
			<-c.done
		}
	})
	ready := c.read("ready", hapStartTimeout)
	return c, ready
}

// read waits for the next JSON line, which must be the named phase.
func (c *hapController) read(phase string, timeout time.Duration) hapPhase {
	c.t.Helper()
	var line string
	select {
	case l, ok := <-c.lines:
		if !ok {
			select {
			case <-c.done:
			case <-time.After(5 * time.Second):
			}
			c.t.Fatalf("controller script ended before reporting phase %q: %v\nstderr:\n%s\nagent output:\n%s",
				phase, c.cmd.ProcessState, c.stderr.String(), c.env.Output())
		}
		line = l
	case <-time.After(timeout):
		c.t.Fatalf("controller script did not report phase %q within %v\nstderr:\n%s\nagent output:\n%s",
			phase, timeout, c.stderr.String(), c.env.Output())
	}
	var p hapPhase
	dec := json.NewDecoder(strings.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		c.t.Fatalf("controller script printed an invalid report for phase %q: %v\n%s", phase, err, line)
	}
	if p.Phase != phase {
		c.t.Fatalf("controller script reported phase %q, want %q\n%s", p.Phase, phase, line)
	}
	if p.Error != "" {
		c.t.Fatalf("phase %q: the controller raised after %.3fs:\n%s\nclient calls:\n%s\nHTTP exchanges:\n%s\ncontroller log (stderr):\n%s\nagent output:\n%s",
			phase, p.Seconds, p.Error, callLines(p), p.exchanges(), c.stderr.String(), c.env.Output())
	}
	return p
}

// run sends a phase and checks what every phase must satisfy: no client
// exception except those listed (call name -> exception), no failed or
// retried HTTP attempt, every 404 a JSON one.
func (c *hapController) run(phase string, allowRaise map[string]string) hapPhase {
	c.t.Helper()
	if _, err := io.WriteString(c.stdin, phase+"\n"); err != nil {
		c.t.Fatalf("sending phase %q: %v\nstderr:\n%s", phase, err, c.stderr.String())
	}
	p := c.read(phase, hapPhaseTimeout)
	c.phases = append(c.phases, p)
	c.t.Logf("phase %s: %.3fs\n%s", phase, p.Seconds, p.exchanges())
	for _, call := range p.Calls {
		if call.Raised == nil {
			continue
		}
		if want, ok := allowRaise[call.Call]; !ok || want != *call.Raised {
			c.t.Errorf("phase %s: %s", phase, call)
		}
	}
	for _, h := range p.HTTP {
		switch {
		case h.Raised != "":
			c.t.Errorf("phase %s: the client's HTTP attempt failed (it retries these): %s", phase, h)
		case h.Status == 404 && !strings.Contains(h.ContentType, "application/json"):
			c.t.Errorf("phase %s: a non-JSON 404 (the client retries it as \"agent not ready\"): %s", phase, h)
		}
	}
	// One HTTP attempt per client call: anything more is a retry.
	if len(p.HTTP) != len(p.Calls) {
		c.t.Errorf("phase %s: %d client calls made %d HTTP attempts, want one each\ncalls:\n%s", phase, len(p.Calls), len(p.HTTP), callLines(p))
	}
	return p
}

func (c *hapController) quit() {
	c.t.Helper()
	io.WriteString(c.stdin, "quit\n")
	c.stdin.Close()
	select {
	case <-c.done:
		if !c.cmd.ProcessState.Success() {
			c.t.Errorf("controller script exited with %v\nstderr:\n%s", c.cmd.ProcessState, c.stderr.String())
		}
	case <-time.After(10 * time.Second):
		c.t.Errorf("controller script did not exit after quit")
	}
}

func callLines(p hapPhase) string {
	var b strings.Builder
	for _, c := range p.Calls {
		b.WriteString("  " + c.String() + "\n")
	}
	return b.String()
}

// call returns the i-th recorded call, which must be the named method.
func (p hapPhase) call(t *testing.T, i int, name string) hapCall {
	t.Helper()
	if i >= len(p.Calls) || p.Calls[i].Call != name {
		t.Fatalf("phase %s: call %d is not %s; calls:\n%s", p.Phase, i, name, callLines(p))
	}
	return p.Calls[i]
}

// exchange returns the i-th HTTP attempt, which must be method path.
func (p hapPhase) exchange(t *testing.T, i int, method, path string) hapHTTP {
	t.Helper()
	if i >= len(p.HTTP) || p.HTTP[i].Method != method || p.HTTP[i].path() != path {
		t.Fatalf("phase %s: HTTP attempt %d is not %s %s; attempts:\n%s", p.Phase, i, method, path, p.exchanges())
	}
	return p.HTTP[i]
}

func hapResult[T any](t *testing.T, p hapPhase) T {
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
	hap     *haproxyMasters
	ctl     *hapController
	ready   hapPhase
	start   time.Time
}

// newHAPFixture builds the topology, starts the agent in it (after
// before(f), which may add to its configuration) and the controller script
// with the common arguments plus extra(f).
func newHAPFixture(t *testing.T, extra func(f *hapFixture) []string, before ...func(f *hapFixture)) *hapFixture {
	requireOctavia(t)
	f := &hapFixture{t: t, start: time.Now()}
	f.ns, f.lb, f.env = newLBEnv(t)
	f.base, f.certDir = f.env.Path("lib"), f.env.Path("lib", "certs")
	f.lbDir = filepath.Join(f.base, hapLB)
	f.cfgPath = filepath.Join(f.lbDir, "haproxy.cfg")
	f.sock = filepath.Join(f.base, hapLB+".sock")
	// HAProxy outlives the agent by design; the test stops it.
	f.hap = watchHAProxy(t, filepath.Join(f.lbDir, hapLB+".pid"))
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
		"--lb-id", hapLB,
		"--listener-id", hapListener,
		"--pool-id", hapPool,
		"--vip", f.lb.VIP,
		"--listener-port", "80",
		"--connection-limit", strconv.Itoa(hapConnLimit),
		"--cert-id", hapCert,
	}
	for i, m := range f.lb.Members {
		args = append(args, "--member", fmt.Sprintf("%s,%s,%d", hapMemberIDs[i], m.Addr, m.Port))
	}
	if extra != nil {
		args = append(args, extra(f)...)
	}
	f.ctl, f.ready = startHAPController(t, f.env, args...)
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
	f.ctl.quit()
	var total float64
	for _, p := range f.ctl.phases {
		total += p.Seconds
	}
	f.t.Logf("controller: start-up %.3fs, %d phases %.3fs; test %v (Octavia import check excluded)",
		f.ready.Seconds, len(f.ctl.phases), total, time.Since(f.start).Round(time.Millisecond))
	if f.t.Failed() {
		f.t.Logf("controller log (stderr):\n%s", f.ctl.stderr.String())
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
		m, err := getMember(c, url, "X-Member")
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
		m, err := getMember(c, url, "X-Member")
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
	// The agent strips group lines (spec §2.5 step 3); 11.0.0's template
	// renders none.
	if want := hapGroupLine.ReplaceAllString(uploaded, ""); string(got) != want {
		t.Errorf("%s is not the config the controller uploaded\ngot:\n%s\nwant:\n%s", f.cfgPath, got, want)
	}
	if st, err := os.Stat(f.cfgPath); err == nil && st.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %#o, want 0600", f.cfgPath, st.Mode().Perm())
	}
}

// uploaded is the one config upload_config sent in phase p.
func (f *hapFixture) uploaded(p hapPhase) string {
	f.t.Helper()
	var cfgs []string
	for _, c := range p.Calls {
		if c.Call == "upload_config" {
			cfgs = append(cfgs, c.Config)
		}
	}
	if len(cfgs) != 1 {
		f.t.Fatalf("phase %s uploaded %d configs, want 1\n%s", p.Phase, len(cfgs), callLines(p))
	}
	return cfgs[0]
}

// listenerUpdate checks the tail of the controller's
// update_amphora_listeners in phase p, whose calls must be want: the
// config upload (202, ETag = md5) and the reload (202, reloadDetails),
// and what Octavia's template rendered for this agent. It returns the
// uploaded config.
func (f *hapFixture) listenerUpdate(p hapPhase, want []string, reloadDetails string) string {
	t := f.t
	t.Helper()
	if got := p.callNames(); !reflect.DeepEqual(got, want) {
		t.Fatalf("phase %s: the driver called %v, want %v\n%s", p.Phase, got, want, callLines(p))
	}
	if got := string(p.call(t, 0, "get_api_version").Returned); got != `{"api_version": "1.0"}` && got != `{"api_version":"1.0"}` {
		t.Errorf("get_api_version returned %s", got)
	}
	if r := hapResult[map[string]any](t, p); r["api_version"] != "1.0" {
		t.Errorf("the driver populated api_version %v, want 1.0", r["api_version"])
	}
	p.exchange(t, 0, "GET", "//")
	cfg := f.uploaded(p)
	n := len(want)
	up := p.exchange(t, n-2, "PUT", "/1.0/loadbalancer/"+f.env.AmphoraID+"/"+hapLB+"/haproxy")
	if up.Status != 202 || up.ETag == nil || *up.ETag != md5Hex([]byte(cfg)) {
		t.Errorf("upload_config: %s; want 202 with ETag %s", up, md5Hex([]byte(cfg)))
	}
	wantJSON(t, "upload_config", up.Body, map[string]any{"message": "OK"})
	rl := p.exchange(t, n-1, "PUT", "/1.0/loadbalancer/"+hapLB+"/reload")
	if rl.Status != 202 {
		t.Errorf("reload_listener: %s; want 202", rl)
	}
	wantJSON(t, "reload_listener", rl.Body, map[string]any{"message": "OK", "details": reloadDetails})
	for _, want := range []string{
		"stats socket " + f.sock + " mode 0666 level user\n",
		"server-state-file " + filepath.Join(f.lbDir, "servers-state") + "\n",
		fmt.Sprintf("    maxconn %d\n", hapConnLimit),
		"frontend " + hapListener + "\n",
		"    bind " + f.lb.VIP + ":80\n",
		"    mode http\n",
		"default_backend " + hapPool + ":" + hapListener + "\n",
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
	del := f.ctl.run("delete", nil)
	if got, want := del.callNames(), []string{"get_api_version", "delete_listener", "delete_listener", "get_all_listeners", "get_details"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("delete: the driver called %v, want %v\n%s", got, want, callLines(del))
	}
	for _, i := range []int{1, 2} {
		d := del.exchange(t, i, "DELETE", "/1.0/listeners/"+hapLB)
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
	testenv.WaitFor(t, 10*time.Second, "the HAProxy master gone after delete_listener", func() bool { return !isHAProxy(master) })
	for _, p := range []string{f.lbDir, f.sock, filepath.Join(f.certDir, hapLB)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left after delete_listener (%v)", p, err)
		}
	}
	for url, c := range clients {
		if m, err := getMember(c, url, "X-Member"); err == nil {
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
	create := ctl.run("create", nil)
	cfg1 := f.listenerUpdate(create, update, "Configuration file is valid\nhaproxy daemon for "+hapLB+" started")
	for i, m := range lb.Members {
		line := fmt.Sprintf("server %s %s ", hapMemberIDs[i], m.HostPort())
		if strings.Contains(cfg1, line) != (i == 0) {
			t.Errorf("first config: member %d line %q present = %v, want %v", i+1, line, i != 0, i == 0)
		}
	}
	f.storedConfig(cfg1)
	master := f.hap.master()
	if master == 0 || !isHAProxy(master) {
		t.Fatalf("no HAProxy master behind %s after the controller's reload (pid %d)\n%s", f.hap.pidPath, master, env.Output())
	}
	if !f.inNamespace(master) {
		t.Errorf("HAProxy master %d does not run in network namespace %s", master, f.ns)
	}
	t.Logf("create: traffic through the VIP reaches member-1 after %v",
		f.serving(client, vipURL, "traffic to member-1 after create", "member-1").Round(time.Millisecond))

	// 2. Member create: a listener update with both members, a reload of
	// the running HAProxy through its master.
	upd := ctl.run("update", nil)
	cfg2 := f.listenerUpdate(upd, update, "Listener "+hapLB+" reloaded")
	for i, m := range lb.Members {
		if line := fmt.Sprintf("server %s %s ", hapMemberIDs[i], m.HostPort()); !strings.Contains(cfg2, line) {
			t.Errorf("second config has no %q", line)
		}
	}
	f.storedConfig(cfg2)
	if got := f.hap.master(); got != master {
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
	start := ctl.run("start", nil)
	if got, want := start.callNames(), []string{"get_api_version", "start_listener"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("start: the driver called %v, want %v", got, want)
	}
	st := start.exchange(t, 1, "PUT", "/1.0/loadbalancer/"+hapLB+"/start")
	if st.Status != 202 {
		t.Errorf("start_listener: %s; want 202", st)
	}
	wantJSON(t, "start_listener", st.Body, map[string]any{"message": "OK", "details": "Configuration file is valid\nhaproxy daemon for " + hapLB + " started"})
	if got := f.hap.master(); got != master {
		t.Errorf("start of the running load balancer replaced the master %d by %d", master, got)
	}
	f.serving(client, vipURL, "traffic after start", "member-1", "member-2")

	// 4. Listener status and details as the controller reads them.
	status := ctl.run("status", nil)
	if got, want := status.callNames(), []string{"get_api_version", "get_all_listeners", "get_details"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("status: the driver called %v, want %v", got, want)
	}
	sr := hapResult[struct {
		Listeners []map[string]any `json:"listeners"`
		Details   json.RawMessage  `json:"details"`
	}](t, status)
	f.checkListeners(sr.Listeners, map[string]string{hapListener: "HTTP"})
	checkDetails(t, sr.Details)
	details := decodeObject(t, "details", sr.Details)
	if n := fmt.Sprint(details["haproxy_count"]); n != "1" {
		t.Errorf("details haproxy_count = %s, want 1", n)
	}
	if l := fmt.Sprint(details["listeners"]); l != "["+hapListener+"]" {
		t.Errorf("details listeners = %s, want [%s]", l, hapListener)
	}

	// 5. A certificate as the driver uploads one: md5 check (404
	// ignored), upload, md5 read back, and no second upload once the md5
	// matches.
	certName := hapCert + ".pem"
	certURL := "/1.0/loadbalancer/" + hapLB + "/certificates/" + certName
	certUp := ctl.run("cert-upload", nil)
	if got, want := certUp.callNames(), []string{"get_api_version", "get_cert_md5sum", "upload_cert_pem", "get_cert_md5sum", "get_cert_md5sum"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("cert-upload: the driver called %v, want %v\n%s", got, want, callLines(certUp))
	}
	cu := hapResult[struct {
		Filename string  `json:"filename"`
		PEM      string  `json:"pem"`
		MD5Sent  string  `json:"md5sum_sent"`
		MD5Read  *string `json:"md5sum_read"`
	}](t, certUp)
	pemMD5 := md5Hex([]byte(cu.PEM))
	if cu.Filename != certName || cu.MD5Sent != pemMD5 {
		t.Fatalf("cert-upload sent %s with md5 %s; the PEM's md5 is %s", cu.Filename, cu.MD5Sent, pemMD5)
	}
	notFound := map[string]any{"message": "Certificate Not Found", "details": "No certificate with filename: " + certName}
	if first := certUp.exchange(t, 1, "GET", certURL); first.Status != 404 {
		t.Errorf("md5 of a certificate not yet uploaded: %s; want a JSON 404", first)
	} else {
		wantJSON(t, "GET of a missing certificate", first.Body, notFound)
	}
	if got := string(certUp.call(t, 1, "get_cert_md5sum").Returned); got != "null" {
		t.Errorf("get_cert_md5sum(ignore=(404,)) before the upload = %s, want None", got)
	}
	if put := certUp.exchange(t, 2, "PUT", certURL); put.Status != 200 || put.ETag == nil || *put.ETag != pemMD5 ||
		put.RequestBytes == nil || *put.RequestBytes != len(cu.PEM) {
		t.Errorf("upload_cert_pem: %s; want 200 with ETag %s", put, pemMD5)
	} else {
		wantJSON(t, "upload_cert_pem", put.Body, map[string]any{"message": "OK"})
	}
	if cu.MD5Read == nil || *cu.MD5Read != pemMD5 {
		t.Errorf("get_cert_md5sum = %v, want %s", deref(cu.MD5Read), pemMD5)
	}
	for _, i := range []int{3, 4} {
		if g := certUp.exchange(t, i, "GET", certURL); g.Status != 200 || g.ETag == nil || *g.ETag != pemMD5 {
			t.Errorf("md5 of the uploaded certificate: %s; want 200 with ETag %s", g, pemMD5)
		} else {
			wantJSON(t, "GET certificate", g.Body, map[string]any{"md5sum": pemMD5})
		}
	}
	certPath := filepath.Join(f.certDir, hapLB, certName)
	if got, err := os.ReadFile(certPath); err != nil || string(got) != cu.PEM {
		t.Errorf("%s does not hold the uploaded PEM (%v)", certPath, err)
	}
	if st, err := os.Stat(certPath); err == nil && st.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %#o, want 0600", certPath, st.Mode().Perm())
	}

	// 6. Certificate delete; reading it again is the driver's 404 path:
	// ignored (None), or NotFound, which _upload_cert catches.
	certDel := ctl.run("cert-delete", map[string]string{"get_cert_md5sum": notFoundException})
	if got, want := certDel.callNames(), []string{"get_api_version", "delete_cert_pem", "get_cert_md5sum", "get_cert_md5sum", "delete_cert_pem"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("cert-delete: the driver called %v, want %v\n%s", got, want, callLines(certDel))
	}
	cd := hapResult[struct {
		Ignored *string `json:"md5sum_after_delete_ignoring_404"`
		Raised  *string `json:"raised_without_ignore"`
	}](t, certDel)
	if cd.Ignored != nil {
		t.Errorf("get_cert_md5sum(ignore=(404,)) after delete = %s, want None", *cd.Ignored)
	}
	if cd.Raised == nil || *cd.Raised != notFoundException {
		t.Errorf("get_cert_md5sum after delete raised %s, want %s", deref(cd.Raised), notFoundException)
	}
	if c := certDel.call(t, 2, "get_cert_md5sum"); c.Raised != nil {
		t.Errorf("get_cert_md5sum(ignore=(404,)) raised %s", *c.Raised)
	}
	for _, i := range []int{1, 4} {
		d := certDel.exchange(t, i, "DELETE", certURL)
		if d.Status != 200 {
			t.Errorf("delete_cert_pem: %s; want 200", d)
		}
		wantJSON(t, "delete_cert_pem", d.Body, map[string]any{"message": "OK"})
	}
	for _, i := range []int{2, 3} {
		g := certDel.exchange(t, i, "GET", certURL)
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
	crtList := filepath.Join(f.certDir, hapLB, hapTLSListener+".pem")
	certURL := func(name string) string { return "/1.0/loadbalancer/" + hapLB + "/certificates/" + name }
	// checkCertFile checks certificate i on the amphora (its PEM followed
	// by its key, 0600) and the crt-list naming it.
	checkCertFile := func(i int) {
		t.Helper()
		path := filepath.Join(f.certDir, hapLB, pemName(i))
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
		if want := filepath.Join(f.certDir, hapLB, pemName(i)) + "\n"; err != nil || string(list) != want {
			t.Errorf("crt-list %s = %q (%v), want %q", crtList, list, err, want)
		}
	}
	// checkUploads checks the driver's first uploads of names from HTTP
	// attempt from on: an md5 check answered 404, then the PUT.
	checkUploads := func(p hapPhase, from int, names ...string) {
		t.Helper()
		for k, name := range names {
			get := p.exchange(t, from+2*k, "GET", certURL(name))
			put := p.exchange(t, from+2*k+1, "PUT", certURL(name))
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
	create := ctl.run("tls-create", nil)
	cfg := f.listenerUpdate(create, []string{"get_api_version", "get_info",
		"get_cert_md5sum", "upload_cert_pem", "get_cert_md5sum", "upload_cert_pem",
		"upload_config", "reload_listener"},
		"Configuration file is valid\nhaproxy daemon for "+hapLB+" started")
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
	master := f.hap.master()
	if master == 0 || !isHAProxy(master) {
		t.Fatalf("no HAProxy master behind %s after the controller's reload (pid %d)\n%s", f.hap.pidPath, master, f.env.Output())
	}
	f.serving(httpClient, httpURL, "HTTP traffic after create", "member-1", "member-2")
	tlsStarted("TLS traffic after create", 0)

	// 2. Listener status: one HAProxy, two listeners.
	status := ctl.run("status", nil)
	sr := hapResult[struct {
		Listeners []map[string]any `json:"listeners"`
		Details   json.RawMessage  `json:"details"`
	}](t, status)
	f.checkListeners(sr.Listeners, map[string]string{hapListener: "HTTP", hapTLSListener: "TERMINATED_HTTPS"})
	details := decodeObject(t, "details", sr.Details)
	if n := fmt.Sprint(details["haproxy_count"]); n != "1" {
		t.Errorf("details haproxy_count = %s, want 1", n)
	}
	wantIDs := []string{hapListener, hapTLSListener}
	sort.Strings(wantIDs)
	if l := fmt.Sprint(details["listeners"]); l != fmt.Sprint(wantIDs) {
		t.Errorf("details listeners = %s, want %v", l, wantIDs)
	}

	// 3. Certificate rotation: new PEM and crt-list, same config, reload.
	rotate := ctl.run("tls-rotate", nil)
	cfgR := f.listenerUpdate(rotate, []string{"get_api_version", "get_info",
		"get_cert_md5sum", "upload_cert_pem", "get_cert_md5sum", "upload_cert_pem",
		"upload_config", "reload_listener"}, "Listener "+hapLB+" reloaded")
	checkUploads(rotate, 2, pemName(1))
	if g := rotate.exchange(t, 4, "GET", certURL(hapTLSListener+".pem")); g.Status != 200 {
		t.Errorf("md5 check of the existing crt-list: %s; want 200", g)
	}
	if put := rotate.exchange(t, 5, "PUT", certURL(hapTLSListener+".pem")); put.Status != 200 {
		t.Errorf("upload of the changed crt-list: %s; want 200", put)
	}
	f.storedConfig(cfgR)
	checkCertFile(1)
	if got := f.hap.master(); got != master {
		t.Errorf("the reload replaced the HAProxy master %d by %d", master, got)
		master = got
	}
	start := time.Now()
	testenv.WaitFor(t, hapTrafficWait, "the rotated certificate served", func() bool {
		_, err := getMember(httpsClient, httpsURL, "X-Member")
		got := lastServed()
		return err == nil && got != nil && got.Cmp(serial(1)) == 0
	})
	t.Logf("rotate: the new certificate is served after %v", time.Since(start).Round(time.Millisecond))
	tlsStarted("TLS traffic after the rotation", 1)

	// 4. Delete the TLS listener: its certificate goes, the remaining
	// HTTP listener is pushed and reloaded.
	dl := ctl.run("tls-delete-listener", nil)
	cfgD := f.listenerUpdate(dl, []string{"get_api_version", "delete_cert_pem", "get_info", "upload_config", "reload_listener"},
		"Listener "+hapLB+" reloaded")
	if d := dl.exchange(t, 1, "DELETE", certURL(pemName(1))); d.Status != 200 {
		t.Errorf("delete_cert_pem: %s; want 200", d)
	}
	if strings.Contains(cfgD, hapTLSListener) || strings.Contains(cfgD, ":443") {
		t.Errorf("the config after the TLS listener's delete still has it:\n%s", cfgD)
	}
	f.storedConfig(cfgD)
	if _, err := os.Stat(filepath.Join(f.certDir, hapLB, pemName(1))); !os.IsNotExist(err) {
		t.Errorf("the deleted listener's certificate is still on the amphora (%v)", err)
	}
	testenv.WaitFor(t, hapTrafficWait, "port 443 closed after the TLS listener's delete", func() bool {
		_, err := getMember(httpsClient, httpsURL, "X-Member")
		return err != nil
	})
	f.serving(httpClient, httpURL, "HTTP traffic after the TLS listener's delete", "member-1", "member-2")
	status = ctl.run("status", nil)
	sr = hapResult[struct {
		Listeners []map[string]any `json:"listeners"`
		Details   json.RawMessage  `json:"details"`
	}](t, status)
	f.checkListeners(sr.Listeners, map[string]string{hapListener: "HTTP"})

	// 5. The last listener goes with the load balancer.
	f.deleteLB(master, map[string]*http.Client{httpURL: httpClient, httpsURL: httpsClient})
	f.finish()
}
