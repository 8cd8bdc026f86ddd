package ctrlutil

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
)

const (
	// The controller uses UUIDs for every object; the frontend, backend
	// and server names of the rendered config are these ids.
	HAPLB       = "6e1f2a3b-4c5d-4e6f-8a9b-0c1d2e3f4a5b"
	HAPListener = "7a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
	HAPPool     = "8b3c4d5e-6f7a-4b8c-9d0e-1f2a3b4c5d6e"
	HAPCert     = "9c4d5e6f-7a8b-4c9d-8e1f-2a3b4c5d6e7f"
	// HAPConnLimit is the listener's connection_limit: HAProxy needs about
	// 2.5 descriptors per connection and the hard limit here is 20000.
	HAPConnLimit = 1000
	// hapStartTimeout bounds the script's start-up (imports, config,
	// driver); hapPhaseTimeout one phase (a reload may take up to 30 s,
	// the client's read timeout is 60 s).
	hapStartTimeout = 60 * time.Second
	hapPhaseTimeout = 90 * time.Second
)

var (
	HAPMemberIDs = []string{
		"a1c2e3f4-0000-4000-8000-00000000a001",
		"a1c2e3f4-0000-4000-8000-00000000a002",
	}
)

// HAPPhase is one JSON line of haproxy_controller_client.py.
type HAPPhase struct {
	Phase   string          `json:"phase"`
	Error   string          `json:"error"`
	Seconds float64         `json:"seconds"`
	Result  json.RawMessage `json:"result"`
	Calls   []HAPCall       `json:"calls"`
	HTTP    []HAPHTTP       `json:"http"`

	// ready only
	Driver               string         `json:"driver"`
	Templater            string         `json:"templater"`
	TemplaterBaseAmpPath string         `json:"templater_base_amp_path"`
	TemplaterBaseCrtDir  string         `json:"templater_base_crt_dir"`
	ControllerConfig     map[string]any `json:"controller_config"`
}

// HAPCall is one call of a driver client method.
type HAPCall struct {
	Client   string          `json:"client"`
	Call     string          `json:"call"`
	Args     []any           `json:"args"`
	Kwargs   map[string]any  `json:"kwargs"`
	Raised   *string         `json:"raised"`
	Returned json.RawMessage `json:"returned"`
	Seconds  float64         `json:"seconds"`
	Config   string          `json:"config"` // upload_config only
}

// HAPHTTP is one HTTP attempt of the client's requests session.
type HAPHTTP struct {
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

// HAPController runs the script and talks to it phase by phase.
type HAPController struct {
	t      *testing.T
	env    *testenv.Env
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	Stderr *testenv.SyncBuffer
	done   chan struct{}
	Phases []HAPPhase
}

func StartHAPController(t *testing.T, env *testenv.Env, args ...string) (*HAPController, HAPPhase) {
	t.Helper()
	script := TestdataScript(t, "interop", "haproxy_controller_client.py")
	c := &HAPController{t: t, env: env, lines: make(chan string, 16), Stderr: &testenv.SyncBuffer{}, done: make(chan struct{})}
	c.cmd = exec.Command(DebianPython, append([]string{script}, args...)...)
	c.cmd.Env = PythonEnv()
	c.cmd.Stderr = c.Stderr
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

func CallLines(p HAPPhase) string {
	var b strings.Builder
	for _, c := range p.Calls {
		b.WriteString("  " + c.String() + "\n")
	}
	return b.String()
}

func (h HAPHTTP) path() string {
	if i := strings.Index(h.URL, "://"); i >= 0 {
		if j := strings.IndexByte(h.URL[i+3:], '/'); j >= 0 {
			return h.URL[i+3+j:]
		}
	}
	return h.URL
}

func (h HAPHTTP) String() string {
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

func (c HAPCall) String() string {
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
func (p HAPPhase) exchanges() string {
	var b strings.Builder
	for _, h := range p.HTTP {
		b.WriteString("  " + h.String() + "\n")
	}
	return b.String()
}

func (p HAPPhase) CallNames() []string {
	var names []string
	for _, c := range p.Calls {
		names = append(names, c.Call)
	}
	return names
}

// read waits for the next JSON line, which must be the named phase.
func (c *HAPController) read(phase string, timeout time.Duration) HAPPhase {
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
				phase, c.cmd.ProcessState, c.Stderr.String(), c.env.Output())
		}
		line = l
	case <-time.After(timeout):
		c.t.Fatalf("controller script did not report phase %q within %v\nstderr:\n%s\nagent output:\n%s",
			phase, timeout, c.Stderr.String(), c.env.Output())
	}
	var p HAPPhase
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
			phase, p.Seconds, p.Error, CallLines(p), p.exchanges(), c.Stderr.String(), c.env.Output())
	}
	return p
}

// Run sends a phase and checks what every phase must satisfy: no client
// exception except those listed (call name -> exception), no failed or
// retried HTTP attempt, every 404 a JSON one.
func (c *HAPController) Run(phase string, allowRaise map[string]string) HAPPhase {
	c.t.Helper()
	if _, err := io.WriteString(c.stdin, phase+"\n"); err != nil {
		c.t.Fatalf("sending phase %q: %v\nstderr:\n%s", phase, err, c.Stderr.String())
	}
	p := c.read(phase, hapPhaseTimeout)
	c.Phases = append(c.Phases, p)
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
		c.t.Errorf("phase %s: %d client calls made %d HTTP attempts, want one each\ncalls:\n%s", phase, len(p.Calls), len(p.HTTP), CallLines(p))
	}
	return p
}

func (c *HAPController) Quit() {
	c.t.Helper()
	io.WriteString(c.stdin, "quit\n")
	c.stdin.Close()
	select {
	case <-c.done:
		if !c.cmd.ProcessState.Success() {
			c.t.Errorf("controller script exited with %v\nstderr:\n%s", c.cmd.ProcessState, c.Stderr.String())
		}
	case <-time.After(10 * time.Second):
		c.t.Errorf("controller script did not exit after quit")
	}
}

// Call returns the i-th recorded call, which must be the named method.
func (p HAPPhase) Call(t *testing.T, i int, name string) HAPCall {
	t.Helper()
	if i >= len(p.Calls) || p.Calls[i].Call != name {
		t.Fatalf("phase %s: call %d is not %s; calls:\n%s", p.Phase, i, name, CallLines(p))
	}
	return p.Calls[i]
}

// Exchange returns the i-th HTTP attempt, which must be method path.
func (p HAPPhase) Exchange(t *testing.T, i int, method, path string) HAPHTTP {
	t.Helper()
	if i >= len(p.HTTP) || p.HTTP[i].Method != method || p.HTTP[i].path() != path {
		t.Fatalf("phase %s: HTTP attempt %d is not %s %s; attempts:\n%s", p.Phase, i, method, path, p.exchanges())
	}
	return p.HTTP[i]
}
