//go:build bench

// make bench's apply and growth figures: a config change applied through
// the agent (upload + reload, as the controller sends them, over mutual
// TLS) against HAProxy's own floor for the same controller-rendered config
// (haproxy -c, then a master-worker reload until the master lists the new
// worker); the heartbeat CPU of the running agent; and how apply latency,
// heartbeat CPU, start-up with load balancers to restore and idle memory
// grow with the work. Figures are printed, never asserted.
//
// AMPHORA_BENCH_BASELINE_BIN, when set, names a second agent binary (an
// older build) measured the same way in the same run, interleaved with
// the one under test, for before/after figures.
package bench_test

import (
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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/haproxy/stats/haproxytest"
)

const (
	// floorRuns pairs of (floor, agent) applies of the headline config.
	floorRuns = 30
	// growthApplyRuns applies per growth-table cell, after one untimed.
	growthApplyRuns = 5
	// growthBeats heartbeats are measured per growth-table cell;
	// headlineBeats for the headline 1 × 10 × 250 figure.
	growthBeats   = 4
	headlineBeats = 20
	// headlineWindows windows of headlineBeats are measured for that
	// figure, and their median printed: this VM's neighbours move a
	// single window by up to twice its quiet cost.
	headlineWindows = 5
	// memberPort is where every rendered member points (nothing listens:
	// no health monitor is rendered, so nothing connects).
	memberPort = 9
)

// lbShape is one load balancer to render: listeners × members each,
// listener ports from firstPort up. drop leaves out each pool's last
// member: the second variant a change alternates with.
type lbShape struct {
	id                 string
	listeners, members int
	firstPort          int
	drop               bool
	base, crtDir       string
}

// benchUUID is a fixed, random-looking UUID per (kind, n): real ids
// compress as random hex, and so must the bench's.
func benchUUID(kind, n int) string {
	h := uint64(kind)<<32 ^ uint64(n)*0x9E3779B97F4A7C15
	h ^= h >> 31
	h *= 0xBF58476D1CE4E5B9
	h2 := h ^ h>>29
	h2 *= 0x94D049BB133111EB
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", uint32(h), uint16(h>>32), uint16(h>>48)&0xfff, uint16(h2)&0xfff, h2>>16&0xffffffffffff)
}

// renderConfigs renders every shape with Octavia's JinjaTemplater
// (testdata/render_configs.py) in one Python run.
func renderConfigs(amphoraID string, shapes []lbShape) ([]string, error) {
	type lst struct {
		ID      string   `json:"id"`
		Pool    string   `json:"pool"`
		Port    int      `json:"port"`
		Members []string `json:"members"`
	}
	type lb struct {
		ID         string `json:"lb_id"`
		Base       string `json:"base_path"`
		CrtDir     string `json:"base_crt_dir"`
		VIP        string `json:"vip"`
		MemberPort int    `json:"member_port"`
		ConnLimit  int    `json:"connection_limit"`
		Listeners  []lst  `json:"listeners"`
	}
	req := struct {
		AmphoraID string `json:"amphora_id"`
		LBs       []lb   `json:"lbs"`
	}{AmphoraID: amphoraID}
	for _, s := range shapes {
		l := lb{ID: s.id, Base: s.base, CrtDir: s.crtDir, VIP: "127.0.0.1", MemberPort: memberPort, ConnLimit: 50}
		for i := range s.listeners {
			x := lst{ID: benchUUID(0x11, i), Pool: benchUUID(0x22, i), Port: s.firstPort + i}
			n := s.members
			if s.drop {
				n--
			}
			for m := range n {
				x.Members = append(x.Members, benchUUID(0x33+i, m))
			}
			l.Listeners = append(l.Listeners, x)
		}
		req.LBs = append(req.LBs, l)
	}
	in, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, benchPython, benchScript("render_configs.py"))
	cmd.Stdin = bytes.NewReader(in)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("render_configs.py: %v: %s", err, lastLine(stderr.String()))
	}
	var out []string
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || len(out) != len(shapes) {
		return nil, fmt.Errorf("render_configs.py printed %d configs (%v)", len(out), err)
	}
	return out, nil
}

// --- a running agent --------------------------------------------------------

// runningAgent is an agent binary serving on loopback with a heartbeat
// every second to hm.
type runningAgent struct {
	t      *testing.T
	e      *testenv.Env
	p      *proc
	client *http.Client
	hm     *net.UDPConn
}

func startRunningAgent(t *testing.T, bin string, e *testenv.Env) (*runningAgent, error) {
	if e == nil {
		e = testenv.New(t)
	}
	hm, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	hm.SetReadBuffer(4 << 20)
	t.Cleanup(func() { hm.Close() })
	cfg := strings.NewReplacer("debug = True", "debug = False",
		"heartbeat_interval = 10", "heartbeat_interval = 1",
		"127.0.0.1:5555", hm.LocalAddr().String()).Replace(e.Config())
	if err := os.WriteFile(e.ConfigPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	a := &runningAgent{t: t, e: e, hm: hm, client: &http.Client{
		Timeout:   60 * time.Second,
		Transport: &http.Transport{TLSClientConfig: e.ClientTLS()}, // kept alive, as the controller's session
	}}
	t.Cleanup(func() { killHAProxies(e.Path("lib")) })
	a.p, err = startProc(t, e.Path("agent.log"), nil, bin, "--config-file", e.ConfigPath)
	if err != nil {
		return nil, err
	}
	if _, err := firstGET(a.p, a.client, e.URL("/"), 60*time.Second); err != nil {
		a.p.stop()
		return nil, err
	}
	return a, nil
}

func (a *runningAgent) put(path string, body []byte) error {
	req, _ := http.NewRequest("PUT", a.e.URL(path), bytes.NewReader(body))
	resp, err := a.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("PUT %s: %d %s", path, resp.StatusCode, lastLine(string(msg)))
	}
	return nil
}

// apply uploads cfg as lb's config and asks for action, as the controller
// does for every change.
func (a *runningAgent) apply(lb, cfg, action string) error {
	_, err := a.applyTimed(lb, cfg, action)
	return err
}

// applyTimed is apply, also reporting how long the upload took.
func (a *runningAgent) applyTimed(lb, cfg, action string) (upload time.Duration, err error) {
	start := time.Now()
	if err := a.put("/1.0/loadbalancer/"+a.e.AmphoraID+"/"+lb+"/haproxy", []byte(cfg)); err != nil {
		return 0, err
	}
	return time.Since(start), a.put("/1.0/loadbalancer/"+lb+"/"+action, nil)
}

// cpuOf is the agent's utime + stime from /proc/<pid>/stat (clock
// ticks, 1/100 s) and its run time from /proc/<pid>/schedstat (ns).
func cpuOf(pid int) (ticks int64, ns int64) {
	stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 {
		f := strings.Fields(string(stat[i+1:]))
		if len(f) > 12 {
			u, _ := strconv.ParseInt(f[11], 10, 64)
			s, _ := strconv.ParseInt(f[12], 10, 64)
			ticks = u + s
		}
	}
	// schedstat is per thread: sum the threads of the process.
	scheds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	for _, path := range scheds {
		if sched, err := os.ReadFile(path); err == nil {
			if f := strings.Fields(string(sched)); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				ns += n
			}
		}
	}
	return ticks, ns
}

// heartbeatCPU measures the agent's CPU time per heartbeat over beats
// heartbeat intervals (1 s each), starting with the heartbeat after the
// next one: from /proc/<pid>/stat, and from schedstat (finer grained). It
// also reports the largest datagram received and how many came; a message
// too big for one datagram is not sent at all, but its cycle still runs.
func (a *runningAgent) heartbeatCPU(beats int) (perStat, perSched time.Duration, size, got int, err error) {
	buf := make([]byte, 70000)
	read := func(until time.Time) {
		for {
			a.hm.SetReadDeadline(until)
			n, err := a.hm.Read(buf)
			if err != nil {
				return
			}
			got++
			size = max(size, n)
		}
	}
	// The cycle under way may still carry the previous config.
	read(time.Now().Add(1500 * time.Millisecond))
	got, size = 0, 0
	t0, s0 := cpuOf(a.p.pid())
	read(time.Now().Add(time.Duration(beats) * time.Second))
	t1, s1 := cpuOf(a.p.pid())
	perStat = time.Duration(t1-t0) * 10 * time.Millisecond / time.Duration(beats)
	perSched = time.Duration(s1-s0) / time.Duration(beats)
	return perStat, perSched, size, got, nil
}

// killHAProxies kills the HAProxy masters (and their process groups) of
// every load balancer under base: they outlive the agent by design.
func killHAProxies(base string) {
	pids, _ := filepath.Glob(filepath.Join(base, "*", "*.pid"))
	for _, p := range pids {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && pid > 1 {
			syscall.Kill(-pid, syscall.SIGKILL)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// --- HAProxy's floor -----------------------------------------------------

// floor is HAProxy alone, master-worker, driven the cheapest way: write
// the config, `haproxy -c`, SIGUSR2 to the master, poll its CLI until the
// master lists the new worker.
type floor struct {
	p   *haproxytest.Process
	cfg string
}

// floorConfig is cfg with the agent's folders replaced by dir, and the
// group the agent adds from its user/group file.
func floorConfig(cfg, agentBase, dir string) string {
	return strings.ReplaceAll(cfg, agentBase, dir) + "\nglobal\n    group nogroup\n"
}

func startFloor(t *testing.T, cfg string) (*floor, error) {
	if _, err := os.Stat(benchHAProxy); err != nil {
		return nil, fmt.Errorf("no %s", benchHAProxy)
	}
	dir := haproxytest.ShortDir(t)
	p := haproxytest.Start(t, haproxytest.Options{Dir: dir, Config: floorConfig(cfg, "/AGENT-BASE", dir)})
	return &floor{p: p, cfg: p.ConfigPath}, nil
}

// apply times one change done by hand, and its check alone.
func (f *floor) apply(cfg string) (check, total time.Duration, err error) {
	start := time.Now()
	if err := os.WriteFile(f.cfg, []byte(cfg), 0o600); err != nil {
		return 0, 0, err
	}
	if out, err := exec.Command(benchHAProxy, "-c", "-f", f.cfg).CombinedOutput(); err != nil {
		return 0, 0, fmt.Errorf("haproxy -c: %v: %s", err, lastLine(string(out)))
	}
	check = time.Since(start)
	before, err := f.p.ShowProc()
	if err != nil {
		return 0, 0, err
	}
	if err := syscall.Kill(f.p.Pid(), syscall.SIGUSR2); err != nil {
		return 0, 0, err
	}
	for deadline := start.Add(30 * time.Second); ; {
		if now, err := f.p.ShowProc(); err == nil && now.Reloads > before.Reloads && len(now.Workers) > 0 {
			return check, time.Since(start), nil
		}
		if time.Now().After(deadline) {
			return 0, 0, errors.New("no new worker within 30 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// --- figures ---------------------------------------------------------------

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p*float64(len(s)) + 0.5)
	return s[min(max(i-1, 0), len(s)-1)]
}

// binaries are the agent builds measured: the one under test, and the
// baseline when AMPHORA_BENCH_BASELINE_BIN names one.
type agentBuild struct{ name, path string }

// startAgents starts one running agent per binary.
func startAgents(t *testing.T, bins []agentBuild) ([]*runningAgent, error) {
	var agents []*runningAgent
	for _, b := range bins {
		a, err := startRunningAgent(t, b.path, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.name, err)
		}
		agents = append(agents, a)
	}
	return agents, nil
}

func benchBinaries(t *testing.T) []agentBuild {
	bins := []agentBuild{{"agent", testenv.Binary(t)}}
	if b := os.Getenv("AMPHORA_BENCH_BASELINE_BIN"); b != "" {
		bins = append(bins, agentBuild{"baseline", b})
	}
	return bins
}

// benchApplyFloor prints the floor against the agent for one config,
// measured in turn (floor, agent, floor, agent...).
func benchApplyFloor(t *testing.T, tb *benchTable, notes *[]string) {
	const listeners, members = 10, 100
	lb := benchUUID(0xbb, 1)
	bins := benchBinaries(t)
	agents, err := startAgents(t, bins)
	if err != nil {
		tb.row("apply: "+"agents", "n/a ("+err.Error()+")", "", "")
		return
	}
	base := agents[0].e.Path("lib")
	var shapes []lbShape
	for _, a := range agents {
		for _, drop := range []bool{false, true} {
			shapes = append(shapes, lbShape{id: lb, listeners: listeners, members: members, firstPort: 20000, drop: drop,
				base: a.e.Path("lib"), crtDir: a.e.Path("lib", "certs")})
		}
	}
	cfgs, err := renderConfigs(agents[0].e.AmphoraID, shapes)
	if err != nil {
		tb.row("apply: floor vs agent", "n/a ("+err.Error()+")", "", "")
		return
	}
	// The floor runs in this namespace: its own ports, its own folder.
	ports := make([]string, listeners)
	for i := range ports {
		ports[i] = strconv.Itoa(haproxytest.FreePort(t))
	}
	floorCfg := func(cfg string) string {
		for i := range listeners {
			cfg = strings.Replace(cfg, "127.0.0.1:"+strconv.Itoa(20000+i)+"\n", "127.0.0.1:"+ports[i]+"\n", 1)
		}
		return strings.ReplaceAll(cfg, base, "/AGENT-BASE")
	}
	fl, err := startFloor(t, floorCfg(cfgs[0]))
	if err != nil {
		tb.row("apply: HAProxy floor", "n/a ("+err.Error()+")", "", "")
		return
	}
	floorVariant := func(i int) string {
		return floorConfig(floorCfg(cfgs[i%2]), "/AGENT-BASE", filepath.Dir(fl.cfg))
	}
	for i, a := range agents {
		if err := a.apply(lb, cfgs[2*i], "start"); err != nil {
			tb.row("apply: "+bins[i].name, "n/a ("+err.Error()+")", "", "")
			return
		}
	}
	// times[0] is the floor's, times[i+1] agent i's; firsts are the first
	// part of each (haproxy -c; PUT haproxy).
	times := make([][]time.Duration, len(agents)+1)
	firsts := make([][]time.Duration, len(agents)+1)
	for run := range floorRuns {
		check, d, err := fl.apply(floorVariant(run + 1))
		if err != nil {
			tb.row("apply: HAProxy floor", "n/a ("+err.Error()+")", "", "")
			return
		}
		times[0], firsts[0] = append(times[0], d), append(firsts[0], check)
		for i, a := range agents {
			start := time.Now()
			upload, err := a.applyTimed(lb, cfgs[2*i+(run+1)%2], "reload")
			if err != nil {
				tb.row("apply: "+bins[i].name, "n/a ("+err.Error()+")", "", "")
				return
			}
			times[i+1], firsts[i+1] = append(times[i+1], time.Since(start)), append(firsts[i+1], upload)
		}
	}
	// split is the p50s of the two parts of each apply.
	split := func(k int, first, second string) string {
		rest := make([]time.Duration, len(times[k]))
		for j := range rest {
			rest[j] = times[k][j] - firsts[k][j]
		}
		return fmt.Sprintf("    %s %s + %s %s", first, fmtDur(percentile(firsts[k], 0.5)), second, fmtDur(percentile(rest, 0.5)))
	}
	fp50 := percentile(times[0], 0.5)
	tb.row(fmt.Sprintf("apply 1 LB × %d lst × %d mbr, %d runs: p50 / p99", listeners, members, floorRuns), "", "", "")
	tb.row("  HAProxy floor (haproxy -c + master reload until new worker)",
		fmtDur(fp50)+" / "+fmtDur(percentile(times[0], 0.99)), "", "")
	tb.row(split(0, "haproxy -c", "reload"), "", "", "")
	for i, b := range bins {
		p50 := percentile(times[i+1], 0.5)
		tb.row(fmt.Sprintf("  %s: PUT haproxy + PUT reload, mTLS (÷ floor p50)", b.name),
			fmtDur(p50)+" / "+fmtDur(percentile(times[i+1], 0.99)), "n/a (upstream reloads through systemd)",
			fmtRatio(float64(p50)/float64(fp50)))
		tb.row(split(i+1, "PUT haproxy", "PUT reload"), "", "", "")
	}
	*notes = append(*notes, "apply: same Octavia-rendered config (JinjaTemplater, HTTP listeners, members on 127.0.0.1, no monitor),",
		"  a member added and removed in turn; floor and agent(s) measured in turn in the same loop; the floor polls every 1 ms;",
		"  the line under each gives the p50 of its two steps (check or upload; reload, until the new worker is listed).")
}

// benchGrowth prints how apply latency and heartbeat CPU grow with
// listeners × members, and the headline 1 × 10 × 250 heartbeat.
func benchGrowth(t *testing.T, tb *benchTable, notes *[]string) {
	var cells []growthCell
	for _, l := range []int{1, 10, 50} {
		for _, m := range []int{10, 100, 200} {
			cells = append(cells, growthCell{l, m, growthBeats, 1})
		}
	}
	benchGrowthCells(t, tb, notes, append(cells, headlineCell))
}

// growthCell is one row of the growth table: windows (0 counts as 1)
// windows of beats heartbeats each.
type growthCell struct{ listeners, members, beats, windows int }

// headlineCell is the headline heartbeat: 1 LB × 10 × 250 over 20 beats.
var headlineCell = growthCell{10, 250, headlineBeats, headlineWindows}

func benchGrowthCells(t *testing.T, tb *benchTable, notes *[]string, cells []growthCell) {
	bins := benchBinaries(t)
	agents, err := startAgents(t, bins)
	if err != nil {
		tb.row("growth: "+"agents", "n/a ("+err.Error()+")", "", "")
		return
	}
	lb := benchUUID(0xcc, 1)
	var shapes []lbShape
	for _, c := range cells {
		for _, a := range agents {
			for _, drop := range []bool{false, true} {
				shapes = append(shapes, lbShape{id: lb, listeners: c.listeners, members: c.members, firstPort: 21000, drop: drop,
					base: a.e.Path("lib"), crtDir: a.e.Path("lib", "certs")})
			}
		}
	}
	cfgs, err := renderConfigs(agents[0].e.AmphoraID, shapes)
	if err != nil {
		tb.row("growth", "n/a ("+err.Error()+")", "", "")
		return
	}
	header := "growth: apply p50 | heartbeat CPU (stat; schedstat) | datagram"
	if len(bins) > 1 {
		header += "   [agent → baseline]"
	}
	tb.row(header, "", "", "")
	started := make([]bool, len(agents))
	k := 0
	for _, c := range cells {
		var cols []string
		for i, a := range agents {
			cfg := func(run int) string { return cfgs[k+2*i+run%2] }
			action := "reload"
			if !started[i] {
				action, started[i] = "start", true
			}
			if err := a.apply(lb, cfg(1), action); err != nil {
				cols = append(cols, "n/a ("+err.Error()+")")
				continue
			}
			var ds []time.Duration
			for run := range growthApplyRuns {
				start := time.Now()
				if err := a.apply(lb, cfg(run), "reload"); err != nil {
					ds = nil
					break
				}
				ds = append(ds, time.Since(start))
			}
			// The last apply is the full config: the heartbeat carries
			// every member.
			var perStat, perSched []time.Duration
			var size, got int
			var err error
			for range max(c.windows, 1) {
				st, sc, sz, g, e := a.heartbeatCPU(c.beats)
				if err = e; err != nil {
					break
				}
				perStat, perSched = append(perStat, st), append(perSched, sc)
				size, got = max(size, sz), got+g
			}
			hb := "n/a (" + fmt.Sprint(err) + ")"
			if err == nil {
				cpu := fmtDur(percentile(perStat, 0.5)) + "; " + fmtDur(percentile(perSched, 0.5))
				hb = fmt.Sprintf("%s | %d B", cpu, size)
				if got == 0 {
					hb = cpu + " | too big, none sent"
				}
				if len(perSched) > 1 {
					hb += fmt.Sprintf(" (schedstat %s–%s)", fmtDur(slices.Min(perSched)), fmtDur(slices.Max(perSched)))
				}
			}
			cols = append(cols, fmtDur(percentile(ds, 0.5))+" | "+hb)
		}
		k += 2 * len(agents)
		label := fmt.Sprintf("  1 LB × %d lst × %d mbr (%d heartbeats)", c.listeners, c.members, c.beats)
		if c.windows > 1 {
			label = fmt.Sprintf("  1 LB × %d lst × %d mbr (median of %d × %d heartbeats)", c.listeners, c.members, c.windows, c.beats)
		}
		tb.row(label, strings.Join(cols, "  →  "), "", "")
	}
	*notes = append(*notes, "growth: one running agent (heartbeat_interval 1 s, debug off); apply = median of "+strconv.Itoa(growthApplyRuns)+
		" upload + reload; heartbeat CPU = the agent",
		"  process's utime+stime from /proc/<pid>/stat (10 ms ticks) and its run time from /proc/<pid>/schedstat over that",
		"  many 1 s intervals, divided by their number (the whole cycle: stats read, message, zlib, HMAC, counters, send);",
		"  a row of several windows gives the median window and, in brackets, the range of their schedstat figures;",
		"  datagram = the largest received (more than 64 KiB cannot be sent: the agent logs it and the cycle still runs).")
}

// benchRestore prints start-up to ready with 1, 10 and 50 load balancers
// to restore after a reboot (agent and HAProxy gone, namespace gone), and
// the agent's idle memory with 0 and 50 load balancers.
func benchRestore(t *testing.T, tb *benchTable, notes *[]string) {
	bins := benchBinaries(t)
	tb.row("start-up to ready (API answers, every LB's stats socket answers), LBs of 1 lst × 10 mbr", "", "", "")
	for _, n := range []int{0, 1, 10, 50} {
		var cols []string
		for _, b := range bins {
			d, rss, pss, err := restoreOnce(t, b.path, n)
			if err != nil {
				cols = append(cols, "n/a ("+err.Error()+")")
				continue
			}
			cols = append(cols, fmt.Sprintf("%s, idle agent RSS %s PSS %s", fmtDur(d), fmtKB(rss), fmtKB(pss)))
		}
		tb.row(fmt.Sprintf("  %d LBs to restore", n), strings.Join(cols, "  →  "), "", "")
	}
	*notes = append(*notes, "restore: the LBs are created through the API, then the agent, every HAProxy and the namespace are",
		"  removed (a reboot); timed from exec of the agent to the first 200 on GET / with every LB's stats socket answering;",
		"  memory of the agent process alone (not HAProxy) "+idleSettle.String()+" later.")
}

func restoreOnce(t *testing.T, bin string, n int) (time.Duration, int64, int64, error) {
	e := testenv.New(t)
	a, err := startRunningAgent(t, bin, e)
	if err != nil {
		return 0, 0, 0, err
	}
	var shapes []lbShape
	for i := range n {
		shapes = append(shapes, lbShape{id: benchUUID(0xdd, i), listeners: 1, members: 10, firstPort: 22000 + i,
			base: e.Path("lib"), crtDir: e.Path("lib", "certs")})
	}
	var cfgs []string
	if n > 0 {
		if cfgs, err = renderConfigs(e.AmphoraID, shapes); err != nil {
			return 0, 0, 0, err
		}
	}
	for i, s := range shapes {
		if err := a.apply(s.id, cfgs[i], "start"); err != nil {
			return 0, 0, 0, err
		}
	}
	a.p.stop()
	killHAProxies(e.Path("lib"))
	exec.Command("ip", "netns", "delete", e.Namespace()).Run()
	p, err := startProc(t, e.Path("agent2.log"), nil, bin, "--config-file", e.ConfigPath)
	if err != nil {
		return 0, 0, 0, err
	}
	defer p.stop()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: e.ClientTLS()}}
	if _, err := firstGET(p, client, e.URL("/"), 60*time.Second); err != nil {
		return 0, 0, 0, err
	}
	for i := 0; i < len(shapes); {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := haproxytest.ShowInfo(ctx, filepath.Join(e.Path("lib"), shapes[i].id+".sock"))
		cancel()
		if err == nil {
			i++
			continue
		}
		if time.Since(p.started) > 2*time.Minute {
			return 0, 0, 0, fmt.Errorf("LB %d of %d not serving after 2 min: %v", i+1, n, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	ready := time.Since(p.started)
	time.Sleep(idleSettle)
	rss, pss := memKB([]int{p.pid()})
	return ready, rss, pss, nil
}
