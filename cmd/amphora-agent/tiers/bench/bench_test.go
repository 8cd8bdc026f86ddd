//go:build bench

// make bench's driver: speed and memory figures of this agent printed
// against upstream's Python agent (Debian's python3-octavia) and against
// HAProxy's own idle floor. It prints figures and ratios and asserts no
// timing: a figure that cannot be measured here reads "n/a (reason)".
//
// It expects $AMPHORA_BENCH_OUT to hold heartbeat-bench.txt (the output of
// agent/health's BenchmarkHeartbeat) and heartbeat-sample.json (written by
// agent/health's TestBenchSample), and writes the table to table.txt there.
package bench_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/memtrim"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/haproxy/stats/haproxytest"
)

const (
	benchPython     = "/usr/bin/python3"
	benchHAProxy    = "/usr/sbin/haproxy"
	goStartRuns     = 5
	pythonStartRuns = 3
	// Requests an agent serves before its idle RSS is read.
	idleRequests = 10
	// idleSettle is how long after its last request an agent counts as
	// idle: the agent hands freed heap back once quiet for
	// memtrim.DefaultQuiet, and one more second lets that finish.
	idleSettle = memtrim.DefaultQuiet + time.Second
)

func TestBench(t *testing.T) {
	out := os.Getenv("AMPHORA_BENCH_OUT")
	if out == "" {
		t.Skip("AMPHORA_BENCH_OUT is not set (make bench sets it)")
	}
	// Other work on the machine skews every figure: the 1-minute load
	// average at the start is printed with them.
	loadAvg := "?"
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		loadAvg = strings.Fields(string(la))[0]
	}
	py := probeUpstream()
	var tb benchTable
	tb.row("", "Go agent", "upstream Python", "Python/Go")
	benchHeartbeatRows(t, out, py, &tb)
	goAgent, pyAgent := benchAgents(t, py)
	hap := benchHAProxyFloor(t)

	tb.row(fmt.Sprintf("start-up: exec → first mTLS GET / (median of %d | %d)", goStartRuns, pythonStartRuns),
		fmtDur(goAgent.startup), pyAgent.cell(func(a agentFigures) string { return fmtDur(a.startup) }),
		pyAgent.ratio(func(a agentFigures) float64 { return float64(a.startup) / float64(goAgent.startup) }))
	tb.row("GET /1.0/info, kept-alive mTLS (median)", fmtDur(goAgent.info),
		pyAgent.cell(func(a agentFigures) string { return fmtDur(a.info) }),
		pyAgent.ratio(func(a agentFigures) float64 { return float64(a.info) / float64(goAgent.info) }))
	tb.row("GET /1.0/details, kept-alive mTLS (median)", fmtDur(goAgent.details),
		pyAgent.cell(func(a agentFigures) string { return fmtDur(a.details) }),
		pyAgent.ratio(func(a agentFigures) float64 { return float64(a.details) / float64(goAgent.details) }))
	tb.row(fmt.Sprintf("idle RSS %v after %d requests (VmRSS, procs)", idleSettle, 2*idleRequests),
		goAgent.rssCell(), pyAgent.cell(agentFigures.rssCell),
		pyAgent.ratio(func(a agentFigures) float64 { return float64(a.rss) / float64(goAgent.rss) }))
	tb.row("  same, PSS (pages shared by forks split)",
		fmtKB(goAgent.pss), pyAgent.cell(func(a agentFigures) string { return fmtKB(a.pss) }),
		pyAgent.ratio(func(a agentFigures) float64 { return float64(a.pss) / float64(goAgent.pss) }))
	// The rest of RSS is clean pages of the binary (or interpreter and
	// modules) that the kernel can drop and read again.
	tb.row("  of RSS, anonymous (heap, stacks: not backed by a file)",
		fmtKB(goAgent.anon), pyAgent.cell(func(a agentFigures) string { return fmtKB(a.anon) }),
		pyAgent.ratio(func(a agentFigures) float64 { return float64(a.anon) / float64(goAgent.anon) }))
	if hap.err != nil {
		tb.row("HAProxy idle floor (master+worker, maxconn 100)", "n/a ("+hap.err.Error()+")", "", "")
	} else {
		tb.row("HAProxy idle floor (master+worker, maxconn 100)", hap.rssCell(), "", "")
		tb.row("  agent RSS ÷ HAProxy floor RSS",
			fmtRatio(float64(goAgent.rss)/float64(hap.rss)),
			pyAgent.cell(func(a agentFigures) string { return fmtRatio(float64(a.rss) / float64(hap.rss)) }), "")
	}

	var notes []string
	benchApplyFloor(t, &tb, &notes)
	benchGrowth(t, &tb, &notes)
	benchRestore(t, &tb, &notes)

	var b strings.Builder
	fmt.Fprintf(&b, "make bench: %s, %d cores, load %s, %s; upstream %s; %s\n\n",
		cpuModel(), runtime.NumCPU(), loadAvg, runtime.Version(), py.describe(), haproxyVersion())
	tb.write(&b)
	b.WriteString("\n" + strings.Join([]string{
		"heartbeat: Go = agent/health BenchmarkHeartbeat (csv-to-datagram; parse-csv + build-message; json-zlib-hmac);",
		"  Python = health_daemon.build_stats_message + status_message.wrap_envelope on the same CSV, stats socket and",
		"  LB list mocked, GC on, median of 5 timeit repeats. build_stats_message also parses the CSV twice (two",
		"  socket queries) and rewrites its counters file on every call; our sender persists counters outside this loop.",
		"start-up and RSS: same config and certificates on 127.0.0.1, the built bin/amphora-agent vs upstream's",
		"  octavia.cmd.agent.main (gunicorn master + 1 worker + the heartbeat sender process; logs to a file, not syslog).",
	}, "\n") + "\n" + strings.Join(notes, "\n") + "\n")
	if err := os.WriteFile(filepath.Join(out, "table.txt"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBenchApply prints only the apply, growth and restore figures (the
// slow part of make bench), for a quicker look:
//
//	AMPHORA_BENCH_OUT=1 AMPHORA_AGENT_BIN=$PWD/bin/amphora-agent go test -tags bench -run '^TestBenchApply$' -v ./cmd/amphora-agent/tiers/bench/
func TestBenchApply(t *testing.T) {
	benchPart(t, true, benchApplyFloor, benchGrowth, benchRestore)
}

// TestBenchApplyFloor prints only the apply figures against HAProxy's
// floor (and the baseline's, when set), the quickest look at apply.
func TestBenchApplyFloor(t *testing.T) {
	benchPart(t, false, benchApplyFloor)
}

// TestBenchHeartbeatCPU prints only the running agent's heartbeat CPU
// for 1 LB × 10 × 250 (and the baseline's, when set).
func TestBenchHeartbeatCPU(t *testing.T) {
	benchPart(t, false, func(t *testing.T, tb *benchTable, notes *[]string) {
		benchGrowthCells(t, tb, notes, []growthCell{headlineCell})
	})
}

// benchPart runs parts of the bench table and logs what they printed
// (with their notes when withNotes).
func benchPart(t *testing.T, withNotes bool, parts ...func(*testing.T, *benchTable, *[]string)) {
	if os.Getenv("AMPHORA_BENCH_OUT") == "" {
		t.Skip("AMPHORA_BENCH_OUT is not set")
	}
	var tb benchTable
	var notes []string
	for _, part := range parts {
		part(t, &tb, &notes)
	}
	var b strings.Builder
	tb.write(&b)
	if withNotes {
		b.WriteString(strings.Join(notes, "\n"))
	}
	t.Log("\n" + b.String())
}

// TestBenchAgentFigures prints only the Go agent's start-up, /info,
// /details and idle memory for the binary in AMPHORA_AGENT_BIN, for
// before/after comparisons of two builds.
func TestBenchAgentFigures(t *testing.T) {
	if os.Getenv("AMPHORA_BENCH_OUT") == "" {
		t.Skip("AMPHORA_BENCH_OUT is not set")
	}
	g, _ := benchAgents(t, upstream{err: errors.New("not measured")})
	t.Logf("start-up %s, /1.0/info %s, /1.0/details %s, RSS %s, PSS %s, anonymous %s",
		fmtDur(g.startup), fmtDur(g.info), fmtDur(g.details), fmtKB(g.rss), fmtKB(g.pss), fmtKB(g.anon))
}

// --- heartbeat ---------------------------------------------------------

type goBenchResult struct{ nsPerOp, bytesPerOp, allocsPerOp float64 }

// parseGoBench reads `go test -bench` output: sub-benchmark name → figures.
func parseGoBench(t *testing.T, path string) map[string]goBenchResult {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the heartbeat benchmark's output (make bench writes it): %v", err)
	}
	res := map[string]goBenchResult{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "BenchmarkHeartbeat") {
			continue
		}
		name := strings.TrimPrefix(f[0], "BenchmarkHeartbeat/")
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			name = name[:i] // the GOMAXPROCS suffix
		}
		// BenchmarkHeartbeatCycleSpaced is not the cycle row's figure.
		switch name {
		case "BenchmarkHeartbeatCycle":
			name = "cycle"
		case "BenchmarkHeartbeatCycleSpaced":
			name = "cycle-spaced"
		}
		var r goBenchResult
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				r.nsPerOp = v
			case "B/op":
				r.bytesPerOp = v
			case "allocs/op":
				r.allocsPerOp = v
			}
		}
		res[name] = r
	}
	for _, want := range []string{"csv-to-datagram", "parse-csv", "build-message", "json-zlib-hmac"} {
		if res[want].nsPerOp == 0 {
			t.Fatalf("%s: no BenchmarkHeartbeat/%s line", path, want)
		}
	}
	return res
}

type hbSample struct {
	CSV           string `json:"csv"`
	AmphoraID     string `json:"amphora_id"`
	Key           string `json:"key"`
	Listeners     int    `json:"listeners"`
	Pools         int    `json:"pools"`
	Members       int    `json:"members"`
	DatagramBytes int    `json:"datagram_bytes"`
}

type hbUpstream struct {
	BuildSignNs   float64 `json:"build_sign_ns"`
	BuildNs       float64 `json:"build_ns"`
	SignNs        float64 `json:"sign_ns"`
	Listeners     int     `json:"listeners"`
	Pools         int     `json:"pools"`
	Members       int     `json:"members"`
	DatagramBytes int     `json:"datagram_bytes"`
}

func benchHeartbeatRows(t *testing.T, out string, py upstream, tb *benchTable) {
	goRes := parseGoBench(t, filepath.Join(out, "heartbeat-bench.txt"))
	raw, err := os.ReadFile(filepath.Join(out, "heartbeat-sample.json"))
	if err != nil {
		t.Fatalf("the heartbeat sample (agent/health TestBenchSample writes it): %v", err)
	}
	var sample hbSample
	if err := json.Unmarshal(raw, &sample); err != nil {
		t.Fatal(err)
	}
	var up hbUpstream
	upErr := py.err
	if upErr == nil {
		upErr = runUpstreamHeartbeat(t, sample, &up)
	}
	if upErr == nil && (up.Listeners != sample.Listeners || up.Pools != sample.Pools || up.Members != sample.Members) {
		// Not the same work: a ratio would mean nothing.
		t.Errorf("upstream's message carries %d listeners, %d pools, %d members; ours %d, %d, %d",
			up.Listeners, up.Pools, up.Members, sample.Listeners, sample.Pools, sample.Members)
		upErr = errors.New("upstream built a different message")
	}
	row := func(label string, goNs, goAllocs, pyNs float64) {
		g := fmt.Sprintf("%s, %.0f allocs", fmtDur(time.Duration(goNs)), goAllocs)
		if upErr != nil {
			tb.row(label, g, "n/a ("+upErr.Error()+")", "n/a")
			return
		}
		tb.row(label, g, fmtDur(time.Duration(pyNs)), fmtRatio(pyNs/goNs))
	}
	all, parse, build, sign := goRes["csv-to-datagram"], goRes["parse-csv"], goRes["build-message"], goRes["json-zlib-hmac"]
	row(fmt.Sprintf("heartbeat 1 LB × %d lst × %d mbr: CSV → datagram", sample.Listeners, sample.Members/max(sample.Pools, 1)),
		all.nsPerOp, all.allocsPerOp, up.BuildSignNs)
	row("  CSV → message", parse.nsPerOp+build.nsPerOp, parse.allocsPerOp+build.allocsPerOp, up.BuildNs)
	row("  message → JSON + zlib + HMAC", sign.nsPerOp, sign.allocsPerOp, up.SignNs)
	if c := goRes["cycle"]; c.nsPerOp > 0 {
		tb.row("  whole sender cycle, real HAProxy, 1 LB × 10 lst × 250 mbr (in-process, wall)",
			fmt.Sprintf("%s, %.0f allocs", fmtDur(time.Duration(c.nsPerOp)), c.allocsPerOp), "", "")
	}
	pyBytes := "n/a"
	if upErr == nil {
		pyBytes = fmt.Sprintf("%d B", up.DatagramBytes)
	}
	tb.row("  datagram size", fmt.Sprintf("%d B", sample.DatagramBytes), pyBytes, "")
	// agent/health TestBenchCapacity: members one datagram carries.
	var capacity struct {
		Level     int
		Ours, Go9 int
		Python9   string
	}
	if raw, err := os.ReadFile(filepath.Join(out, "capacity.json")); err == nil && json.Unmarshal(raw, &capacity) == nil {
		tb.row("  members one datagram carries (10 lst, random UUIDs)",
			fmt.Sprintf("%d (klauspost zlib %d; Go zlib 9: %d)", capacity.Ours, capacity.Level, capacity.Go9),
			capacity.Python9+" (zlib 9)", "")
	}
}

func runUpstreamHeartbeat(t *testing.T, sample hbSample, up *hbUpstream) error {
	req, _ := json.Marshal(map[string]string{
		"csv": sample.CSV, "amphora_id": sample.AmphoraID, "key": sample.Key, "base_path": t.TempDir(),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, benchPython, benchScript("upstream_heartbeat.py"))
	cmd.Stdin = bytes.NewReader(req)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("upstream_heartbeat.py: %v: %s", err, lastLine(stderr.String()))
	}
	if err := json.Unmarshal(stdout.Bytes(), up); err != nil {
		return fmt.Errorf("upstream_heartbeat.py printed %q: %v", lastLine(stdout.String()), err)
	}
	return nil
}

func benchScript(name string) string {
	abs, _ := filepath.Abs(filepath.Join("testdata", name))
	return abs
}

// --- upstream availability ---------------------------------------------

// upstream is whether python3-octavia's agent and heartbeat code can run
// here, and which version it is.
type upstream struct {
	version string
	err     error
}

func probeUpstream() upstream {
	if _, err := os.Stat(benchPython); err != nil {
		return upstream{err: fmt.Errorf("no %s", benchPython)}
	}
	v, err := exec.Command("dpkg-query", "-W", "-f=${Version}", "python3-octavia").Output()
	if err != nil || len(v) == 0 {
		return upstream{err: errors.New("python3-octavia is not installed")}
	}
	u := upstream{version: string(v)}
	// The imports the agent and the heartbeat need (flask, gunicorn,
	// pyroute2, oslo.*); this also warms the page cache for the first run.
	cmd := exec.Command(benchPython, "-c", "import octavia.cmd.agent, octavia.amphorae.backends.health_daemon.health_daemon")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		u.err = fmt.Errorf("python3-octavia does not import: %s", lastLine(string(out)))
	}
	return u
}

func (u upstream) describe() string {
	if u.version == "" {
		return "python3-octavia n/a"
	}
	pv, _ := exec.Command(benchPython, "--version").Output()
	return fmt.Sprintf("python3-octavia %s (%s)", u.version, strings.TrimSpace(string(pv)))
}

// --- agents: start-up and idle memory -----------------------------------

type agentFigures struct {
	startup time.Duration
	// info and details are the median latencies of GET /1.0/info and
	// /1.0/details over one kept-alive connection.
	info, details time.Duration
	rss, pss      int64 // kB, summed over the agent's process group
	anon          int64 // kB of those not backed by a file (heap, stacks)
	procs         int
}

func (a agentFigures) rssCell() string { return fmt.Sprintf("%s (%d)", fmtKB(a.rss), a.procs) }

// maybeAgent is upstream's figures, or why there are none.
type maybeAgent struct {
	agentFigures
	err error
}

func (m maybeAgent) cell(f func(agentFigures) string) string {
	if m.err != nil {
		return "n/a (" + m.err.Error() + ")"
	}
	return f(m.agentFigures)
}

func (m maybeAgent) ratio(f func(agentFigures) float64) string {
	if m.err != nil {
		return "n/a"
	}
	return fmtRatio(f(m.agentFigures))
}

func benchAgents(t *testing.T, py upstream) (agentFigures, maybeAgent) {
	bin := testenv.Binary(t)
	goAgent, err := benchAgent(t, goStartRuns, func(e *testenv.Env) ([]string, []string) {
		return []string{bin, "--config-file", e.ConfigPath}, nil
	})
	if err != nil {
		t.Fatalf("our agent: %v", err)
	}
	pyAgent := maybeAgent{err: py.err}
	if py.err == nil {
		// Upstream's /details opens its namespace through pyroute2, which
		// creates it when missing; one the bench made goes afterwards.
		const upstreamNS = "/run/netns/amphora-haproxy"
		if _, err := os.Stat(upstreamNS); os.IsNotExist(err) {
			t.Cleanup(func() { exec.Command("ip", "netns", "delete", filepath.Base(upstreamNS)).Run() })
		}
		pyAgent.agentFigures, pyAgent.err = benchAgent(t, pythonStartRuns, func(e *testenv.Env) ([]string, []string) {
			return []string{benchPython, benchScript("upstream_agent.py"), "--config-file", e.ConfigPath},
				[]string{"PYTHONDONTWRITEBYTECODE=1", "AMPHORA_BENCH_LOG=" + e.Path("gunicorn.log")}
		})
	}
	return goAgent, pyAgent
}

// benchAgent starts an agent runs times, each with a fresh testenv (its
// own PKI, config and port), and times exec → the first mutual-TLS GET /
// that answers 200. After the last start it serves a few requests and its
// idle memory is read.
func benchAgent(t *testing.T, runs int, argv func(*testenv.Env) (args, env []string)) (agentFigures, error) {
	var fig agentFigures
	var startups []time.Duration
	for i := range runs {
		e := testenv.New(t)
		if err := os.WriteFile(e.ConfigPath, []byte(e.Config()), 0o600); err != nil {
			t.Fatal(err)
		}
		client := &http.Client{
			Timeout:   20 * time.Second,
			Transport: &http.Transport{TLSClientConfig: e.ClientTLS(), DisableKeepAlives: true},
		}
		args, env := argv(e)
		p, err := startProc(t, e.Path("agent.log"), env, args...)
		if err != nil {
			return fig, err
		}
		d, err := firstGET(p, client, e.URL("/"), 60*time.Second)
		if err != nil {
			p.stop()
			return fig, err
		}
		startups = append(startups, d)
		if i == runs-1 {
			for range idleRequests {
				for _, path := range []string{"/", "/1.0/info"} {
					if resp, err := client.Get(e.URL(path)); err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}
			}
			time.Sleep(idleSettle)
			pids := groupPids(p.pid())
			fig.procs = len(pids)
			fig.rss, fig.pss = memKB(pids)
			fig.anon = anonKB(pids)
			fig.info, fig.details = latencies(e, idleRequests)
		}
		p.stop()
	}
	slices.Sort(startups)
	fig.startup = startups[len(startups)/2]
	return fig, nil
}

// latencies times GET /1.0/info and GET /1.0/details, runs times each,
// on one kept-alive mutual-TLS connection; medians.
func latencies(e *testenv.Env, runs int) (info, details time.Duration) {
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: e.ClientTLS()}}
	defer client.CloseIdleConnections()
	median := func(path string) time.Duration {
		var ds []time.Duration
		for range runs {
			start := time.Now()
			resp, err := client.Get(e.URL(path))
			if err != nil {
				continue
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			ds = append(ds, time.Since(start))
		}
		return percentile(ds, 0.5)
	}
	median("/1.0/info") // the connection's handshake
	return median("/1.0/info"), median("/1.0/details")
}

func firstGET(p *proc, client *http.Client, url string, limit time.Duration) (time.Duration, error) {
	for {
		resp, err := client.Get(url)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(p.started), nil
			}
		}
		select {
		case <-p.done:
			return 0, fmt.Errorf("exited at start-up (%v): %s", p.cmd.ProcessState, lastLine(p.output()))
		default:
		}
		if time.Since(p.started) > limit {
			return 0, fmt.Errorf("no answer to GET / within %v: %s", limit, lastLine(p.output()))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// --- HAProxy's floor -----------------------------------------------------

type haproxyFloor struct {
	rss, pss int64
	procs    int
	err      error
}

func (h haproxyFloor) rssCell() string { return fmt.Sprintf("%s (%d)", fmtKB(h.rss), h.procs) }

// benchHAProxyFloor runs HAProxy master-worker on loopback with a small
// config and reads its idle memory: the floor any amphora pays per LB.
func benchHAProxyFloor(t *testing.T) haproxyFloor {
	if _, err := os.Stat(benchHAProxy); err != nil {
		return haproxyFloor{err: fmt.Errorf("no %s", benchHAProxy)}
	}
	dir := t.TempDir()
	port := haproxytest.FreePort(t)
	cfg := fmt.Sprintf(`global
    maxconn 100
    stats socket %s mode 600 level admin

defaults
    mode http
    timeout connect 5s
    timeout client 50s
    timeout server 50s

frontend fe
    bind 127.0.0.1:%d
    default_backend be

backend be
    server s1 127.0.0.1:%d
`, filepath.Join(dir, "stats.sock"), port, haproxytest.FreePort(t))
	cfgPath := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := startProc(t, filepath.Join(dir, "haproxy.log"), nil, benchHAProxy, "-W", "-db", "-f", cfgPath)
	if err != nil {
		return haproxyFloor{err: err}
	}
	defer p.stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
		if err == nil && len(groupPids(p.pid())) >= 2 {
			c.Close()
			break
		}
		if c != nil {
			c.Close()
		}
		select {
		case <-p.done:
			return haproxyFloor{err: fmt.Errorf("haproxy exited: %s", lastLine(p.output()))}
		default:
		}
		if time.Now().After(deadline) {
			return haproxyFloor{err: fmt.Errorf("haproxy not listening: %s", lastLine(p.output()))}
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(time.Second)
	pids := groupPids(p.pid())
	h := haproxyFloor{procs: len(pids)}
	h.rss, h.pss = memKB(pids)
	return h
}

func haproxyVersion() string {
	out, err := exec.Command(benchHAProxy, "-v").Output()
	if err != nil {
		return "HAProxy n/a"
	}
	f := strings.Fields(string(out))
	if len(f) >= 3 {
		return "HAProxy " + f[2]
	}
	return "HAProxy ?"
}

// --- processes -------------------------------------------------------------

// proc is a process this bench started, leading its own process group so
// that it and everything it forks can be measured and stopped together.
type proc struct {
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{}
	logPath string
	stopped bool
}

func startProc(t *testing.T, logPath string, env []string, argv ...string) (*proc, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &proc{cmd: cmd, done: make(chan struct{}), logPath: logPath}
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(p.stop)
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) output() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// stop sends SIGTERM to the process, waits for it and for the rest of its
// group (10 s each), then SIGKILLs whatever of the group is left.
func (p *proc) stop() {
	if p.stopped {
		return
	}
	p.stopped = true
	pgid := p.pid()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(groupPids(pgid)) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if len(groupPids(pgid)) > 0 {
		syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

// groupPids lists the live processes of process group pgid.
func groupPids(pgid int) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 3 || f[0] == "Z" {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// memKB sums VmRSS (from status) and Pss (from smaps_rollup) over pids.
func memKB(pids []int) (rss, pss int64) {
	for _, pid := range pids {
		rss += procField(fmt.Sprintf("/proc/%d/status", pid), "VmRSS:")
		pss += procField(fmt.Sprintf("/proc/%d/smaps_rollup", pid), "Pss:")
	}
	return rss, pss
}

// anonKB sums the anonymous memory (smaps_rollup) of pids.
func anonKB(pids []int) (kb int64) {
	for _, pid := range pids {
		kb += procField(fmt.Sprintf("/proc/%d/smaps_rollup", pid), "Anonymous:")
	}
	return kb
}

func procField(path, key string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) >= 2 && fs[0] == key {
			v, _ := strconv.ParseInt(fs[1], 10, 64)
			return v
		}
	}
	return 0
}

// --- output ------------------------------------------------------------------

type benchTable struct{ rows [][]string }

func (tb *benchTable) row(cells ...string) { tb.rows = append(tb.rows, cells) }

func (tb *benchTable) write(w io.Writer) {
	var width []int
	for _, r := range tb.rows {
		for i, c := range r {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	for _, r := range tb.rows {
		var line strings.Builder
		for i, c := range r {
			line.WriteString(c)
			if i < len(r)-1 {
				line.WriteString(strings.Repeat(" ", width[i]-len([]rune(c))+2))
			}
		}
		fmt.Fprintln(w, strings.TrimRight(line.String(), " "))
	}
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	}
}

func fmtKB(kb int64) string { return fmt.Sprintf("%.1f MiB", float64(kb)/1024) }

func fmtRatio(r float64) string {
	if r < 10 {
		return fmt.Sprintf("%.2fx", r)
	}
	return fmt.Sprintf("%.0fx", r)
}

func cpuModel() string {
	data, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	l := strings.TrimSpace(lines[len(lines)-1])
	if r := []rune(l); len(r) > 100 {
		l = string(r[:100]) + "…"
	}
	return l
}
