//go:build soak

package soak_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/health"
	"github.com/amphora-agent/amphora-agent/agent/health/healthtest"
	"github.com/amphora-agent/amphora-agent/agent/status"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/tiersutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/vrrputil"
)

// The soak's load balancer and its first pool and member stay; its
// listeners, the second pool and member and the certificate get new ids
// as they are created again, as the controller's objects do (so that
// anything kept per id and never dropped shows as growth).
const (
	soakLB        = "5a0c4e2d-1b3f-4a5c-8d6e-7f8091a2b3c4"
	soakPool1     = "8d3f7b5a-4e6c-4d8f-9a01-a2b3c4d5e6f7"
	soakMember1   = "a05b9d7c-6a8e-4fab-9c23-c4d5e6f7a8b9"
	soakMember1IP = "198.51.100.2"   // member network 1: 198.51.100.0/25
	soakAmp1IP    = "198.51.100.20"  // the amphora's port on it
	soakMember2IP = "198.51.100.130" // member network 2: 198.51.100.128/25
	soakAmp2IP    = "198.51.100.148"
)

// soakIDs are the ids of the objects each cycle creates.
type soakIDs struct {
	http                string // the HTTP listener, new when created again
	tls, pool2, member2 string
	cert                string // the TLS listener's certificate file
}

// soakUUID is a random version 4 UUID, as Octavia's ids are.
func soakUUID() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// Pacing and sampling. A controller call goes out at most every
// soakPace; the agent is sampled every soakSample and a line printed
// every soakMinute.
const (
	soakPace    = 200 * time.Millisecond
	soakSample  = 10 * time.Second
	soakMinute  = time.Minute
	soakWarmUp  = 1                // minutes left out of the slopes
	soakMaxGap  = 10 * time.Second // a heartbeat gap beyond this fails the soak
	soakDefault = 20 * time.Minute
	// soakSlowGap is a gap between heartbeats worth explaining: the soak
	// prints the agent's log lines written during the first few.
	soakSlowGap = 1500 * time.Millisecond
)

// soakGap is a slow gap between two heartbeats.
type soakGap struct{ from, to time.Time }

// soakMetric is one column of the minute table whose growth is judged.
type soakMetric struct {
	name  string
	value func(soakRow) float64
	// allow is the growth over 24 h tolerated for the metric.
	allow float64
	// step is the least change that means anything for the metric.
	step float64
}

var soakMetrics = []soakMetric{
	{"rss MiB", func(r soakRow) float64 { return r.rss }, 32, 1},
	{"pss MiB", func(r soakRow) float64 { return r.pss }, 32, 1},
	{"fds", func(r soakRow) float64 { return r.fds }, 16, 2},
	{"goroutines", func(r soakRow) float64 { return r.goroutines }, 32, 2},
	{"threads", func(r soakRow) float64 { return r.threads }, 8, 1},
	{"haproxy procs", func(r soakRow) float64 { return r.haproxy }, 1, 1},
	{"keepalived procs", func(r soakRow) float64 { return r.keepalived }, 1, 1},
	{"zombies", func(r soakRow) float64 { return r.zombies }, 1, 1},
	{"state files", func(r soakRow) float64 { return r.files }, 8, 1},
	{"state KiB", func(r soakRow) float64 { return r.kib }, 256, 0.5},
	{"late median ms", func(r soakRow) float64 { return ms(r.lateMedian) }, 50, 10},
	{"late max ms", func(r soakRow) float64 { return ms(r.lateMax) }, 1000, 100},
}

// soakRow is one minute: the median of its samples for the agent's
// figures, the heartbeats and calls of that minute.
type soakRow struct {
	minute                                 int
	rss, pss                               float64 // MiB
	fds, goroutines, threads               float64
	haproxy, keepalived, zombies           float64
	files, kib                             float64 // the agent's files but logs
	beats                                  int
	lateMedian, lateMax                    time.Duration
	calls, failures, trafficOK, trafficBad int64
	load                                   float64 // the machine's, not judged
}

// soakSampleOf is what one look at the agent finds.
type soakSampleOf struct {
	rss, pss, fds, goroutines, threads, haproxy, keepalived, zombies, files, kib float64
	load                                                                         float64 // 1-minute load average
}

// soak drives one agent as the controller would until its time is up,
// and watches what that costs the agent.
type soak struct {
	t      *testing.T
	amp    *vrrputil.Amp
	mem2   *topo.Namespace
	client *http.Client
	pace   *time.Ticker
	ctx    context.Context
	ids    soakIDs

	certPEM     []byte   // the TLS listener's certificate and key
	serverCerts [][]byte // the agent's own, rotated in turn
	vrrpConfigs []string // two keepalived configs, uploaded in turn

	calls, failures atomic.Int64
	trafficOK       atomic.Int64
	trafficBad      atomic.Int64

	mu       sync.Mutex
	problems []string        // the first failures, in order
	late     []time.Duration // each heartbeat's gap minus the interval, this minute
	longGap  time.Duration
	slow     []soakGap // the first gaps over soakSlowGap
	respawns int       // daemons the agent restarted after they died, last sample
}

// soakDuration is AMPHORA_SOAK (make soak's SOAK), 20 minutes if unset.
func soakDuration(t *testing.T) time.Duration {
	v := os.Getenv("AMPHORA_SOAK")
	if v == "" {
		return soakDefault
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Minute {
		t.Fatalf("AMPHORA_SOAK=%q: want a duration of at least 1m (e.g. 20m)", v)
	}
	return d
}

// TestSoak runs the agent against real HAProxy and keepalived for
// AMPHORA_SOAK (`make soak`, default 20 minutes), with heartbeats every
// second, while the controller's calls go out in a loop, one at most every
// 200 ms: member port plugged (a hot-plugged veth) and detached again
// (the veth removed, as Nova's detach does; the agent has no unplug
// call), certificate put and delete, a TLS listener with its own pool
// and member created and deleted (config upload and reload), the last
// listener deleted and created again (each object created under a new
// id, as the controller's are), the VRRP config uploaded and
// keepalived reloaded, and now and then the agent's own certificate
// rotated. Every minute it prints the agent's RSS, PSS, open files,
// goroutines (from the status socket), threads, HAProxy and keepalived
// processes, zombies, the size of its files (logs aside), the heartbeat
// lateness (gap between heartbeats minus the interval: median and max),
// the calls and failures of that minute, and the machine's load average,
// which explains most lateness on a shared machine. At the end it prints each
// figure's slope per hour and fails if a call failed, a heartbeat gap
// passed soakMaxGap, or a figure grows (the rule is verdict's). Ctrl-C ends it
// early: everything is removed and the test fails.
func TestSoak(t *testing.T) {
	topo.RequireRoot(t)
	for _, bin := range []string{"/usr/sbin/haproxy", "/usr/sbin/keepalived"} {
		if _, err := os.Stat(bin); err != nil {
			t.Skipf("%s is missing (make deps installs it)", bin)
		}
	}
	duration := soakDuration(t)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	s := &soak{t: t, ctx: ctx, ids: soakIDs{http: soakUUID()}}
	s.amp = vrrputil.NewAmp(t, "k", "203.0.113.4", 100)
	env := s.amp.Env
	// The agent runs in a session of its own, so that Ctrl-C reaches only
	// the test, which then stops the agent and removes everything in order.
	env.Wrap = []string{"setsid"}
	env.Extra += "[DEFAULT]\ndebug = False\n"
	client := topo.NewNamespace(t, "kc")
	topo.Link(t, s.amp.NS, "eth1", []string{s.amp.Addr + "/24"}, client, "eth0", []string{"203.0.113.100/24"})
	mem1 := topo.NewNamespace(t, "km1")
	s.mem2 = topo.NewNamespace(t, "km2")
	mem1.ServeHTTP(t, ":80", topo.MemberHandler("member-1"))
	s.mem2.ServeHTTP(t, ":80", topo.MemberHandler("member-2"))
	nic1 := topo.HotplugNIC(t, mem1, "eth0", []string{soakMember1IP + "/25"}, "")
	tiersutil.WatchHAProxy(t, filepath.Join(s.amp.Base(), soakLB, soakLB+".pid"))
	env.Start()
	s.client = env.Client()
	s.pace = time.NewTicker(soakPace)
	defer s.pace.Stop()
	s.prepareCerts()

	// The amphora as the controller leaves it after creating the load
	// balancer: member port plugged, listener up, keepalived running.
	setup := []struct {
		method, path string
		body         []byte
		want         int
	}{
		{"POST", "/1.0/plug/network", s.plugBody(nic1.A.MAC, soakAmp1IP, "198.51.100.0/25"), 202},
		{"PUT", "/1.0/loadbalancer/" + env.AmphoraID + "/" + soakLB + "/haproxy", []byte(s.lbConfig(false)), 202},
		{"PUT", "/1.0/loadbalancer/" + soakLB + "/start", nil, 202},
		{"PUT", "/1.0/vrrp/upload", []byte(s.vrrpConfigs[0]), 200},
		{"PUT", "/1.0/vrrp/start", nil, 202},
	}
	for _, c := range setup {
		if !s.call(c.method, c.path, c.body, c.want) {
			t.Fatalf("set-up failed: %s\n%s", strings.Join(s.problems, "\n"), env.Output())
		}
	}
	vip := "http://" + vrrputil.VIP + "/"
	traffic := client.HTTPClient(false)
	testenv.WaitFor(t, 30*time.Second, "the VIP answering", func() bool {
		_, err := tiersutil.GetMember(traffic, vip, "X-Member")
		return err == nil
	})
	s.calls.Store(0)
	s.amp.Drain() // heartbeats queued during the set-up would arrive as one burst

	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(2)
	go func() { defer wg.Done(); s.heartbeats(done) }()
	go func() { defer wg.Done(); s.traffic(traffic, vip, done) }()
	rows := make(chan []soakRow, 1)
	go func() { rows <- s.watch(duration, done) }()

	fmt.Printf("soak: %v, agent pid %d, heartbeats every 1 s, a call at most every %v; one line a minute (agent figures: medians of a sample every %v)\n",
		duration, env.Pid(), soakPace, soakSample)
	fmt.Println(soakHeader)
	deadline := time.Now().Add(duration)
	cycles := 0
	for time.Now().Before(deadline) && ctx.Err() == nil {
		s.cycle(cycles)
		cycles++
	}
	close(done)
	table := <-rows
	wg.Wait()

	fmt.Printf("soak: %d cycles, %d calls, %d failed\n", cycles, s.calls.Load(), s.failures.Load())
	failed := s.verdict(table)
	if ctx.Err() != nil {
		t.Errorf("interrupted after %d cycles; everything the soak made is removed now", cycles)
	}
	if failed {
		t.Errorf("the soak failed (see above)")
	}
	if len(s.problems) > 0 {
		t.Errorf("failed calls (first %d):\n%s", len(s.problems), strings.Join(s.problems, "\n"))
	}
	if t.Failed() {
		out := env.Output()
		if len(out) > 64<<10 {
			out = "...\n" + out[len(out)-64<<10:]
		}
		t.Logf("agent output (end):\n%s", out)
	}
}

// prepareCerts makes the TLS listener's certificate, two server
// certificates for the agent to rotate between, and two keepalived
// configs differing in priority.
func (s *soak) prepareCerts() {
	t, env := s.t, s.amp.Env
	c, err := env.CA.Server("soak.example")
	if err != nil {
		t.Fatal(err)
	}
	s.certPEM = c.Combined()
	for range 2 {
		c, err := env.CA.Server(env.AmphoraID)
		if err != nil {
			t.Fatal(err)
		}
		s.serverCerts = append(s.serverCerts, c.Combined())
	}
	vrrp := s.amp.WithCheckPath(t, "203.0.113.5")
	s.vrrpConfigs = []string{vrrp, strings.Replace(vrrp, "priority 100", "priority 101", 1)}
}

// cycle is one round of the controller's flows.
func (s *soak) cycle(i int) {
	env := s.amp.Env
	upload := "/1.0/loadbalancer/" + env.AmphoraID + "/" + soakLB + "/haproxy"
	reload := "/1.0/loadbalancer/" + soakLB + "/reload"
	s.ids.tls, s.ids.pool2, s.ids.member2, s.ids.cert = soakUUID(), soakUUID(), soakUUID(), soakUUID()+".pem"
	cert := "/1.0/loadbalancer/" + soakLB + "/certificates/" + s.ids.cert

	// A member on a new network and a TLS listener: the port is plugged,
	// then the listener update (reachability, certificate, config, reload).
	mac, ok := s.hotplug()
	if ok {
		s.call("POST", "/1.0/plug/network", s.plugBody(mac, soakAmp2IP, "198.51.100.128/25"), 202)
	}
	s.call("GET", "//", nil, 200)
	s.call("GET", "/1.0/info", nil, 200)
	s.call("GET", cert, nil, 404)
	s.call("PUT", cert, s.certPEM, 200)
	s.call("GET", "/1.0/details", nil, 200)
	s.call("PUT", upload, []byte(s.lbConfig(true)), 202)
	s.call("PUT", reload, nil, 202)

	// The TLS listener and its member deleted: config and reload, the
	// certificate, then Nova detaches the port.
	s.call("PUT", upload, []byte(s.lbConfig(false)), 202)
	s.call("PUT", reload, nil, 202)
	s.call("DELETE", cert, nil, 200)
	if ok {
		s.unplug()
	}

	// The last listener deleted, then created again (a reload of a
	// stopped load balancer starts it).
	s.call("DELETE", "/1.0/listeners/"+soakLB, nil, 200)
	s.ids.http = soakUUID()
	s.call("PUT", upload, []byte(s.lbConfig(false)), 202)
	s.call("PUT", reload, nil, 202)

	// keepalived: a changed config, then start (a reload when running,
	// as the controller's failover sends it) or reload.
	s.call("PUT", "/1.0/vrrp/upload", []byte(s.vrrpConfigs[i%2]), 200)
	s.call("PUT", "/1.0/vrrp/"+[]string{"start", "reload"}[i%2], nil, 202)

	if i%10 == 9 {
		s.call("PUT", "/1.0/certificate", s.serverCerts[i/10%2], 202)
	}
}

// call sends one controller request once the pace allows and reports
// whether the agent answered want. Not-want answers are failures.
func (s *soak) call(method, path string, body []byte, want int) bool {
	select {
	case <-s.pace.C:
	case <-s.ctx.Done():
		return true
	}
	s.calls.Add(1)
	req, err := http.NewRequestWithContext(s.ctx, method, s.amp.Env.URL(path), bytes.NewReader(body))
	if err != nil {
		s.fail("%s %s: %v", method, path, err)
		return false
	}
	resp, err := s.client.Do(req)
	if err != nil {
		if s.ctx.Err() != nil {
			return true
		}
		s.fail("%s %s: %v", method, path, err)
		return false
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	out.ReadFrom(resp.Body)
	if resp.StatusCode != want {
		s.fail("%s %s: %d, want %d: %s", method, path, resp.StatusCode, want, strings.TrimSpace(out.String()))
		return false
	}
	return true
}

// fail counts a failure and keeps the first few for the report.
func (s *soak) fail(format string, args ...any) {
	s.failures.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.problems) < 20 {
		s.problems = append(s.problems, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
	}
}

// hotplug makes the NIC Nova hot-plugs for a new member port: a veth
// with a fresh MAC whose end in the test's namespace waits for the agent
// and whose other end is member 2's eth0. Deleting member 2's namespace
// removes it whatever happens.
func (s *soak) hotplug() (string, bool) {
	mac, name, ns := topo.UniqueMAC(), topo.UniqueName("kp"), s.mem2.Name
	for _, args := range [][]string{
		{"link", "add", name, "address", mac, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"-n", ns, "addr", "add", soakMember2IP + "/25", "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			s.fail("hot-plug: ip %s: %v %s", strings.Join(args, " "), err, out)
			exec.Command("ip", "-n", ns, "link", "del", "eth0").Run()
			return "", false
		}
	}
	return mac, true
}

// unplug detaches member 2's port: the veth goes, wherever the agent put
// its end.
func (s *soak) unplug() {
	if out, err := exec.Command("ip", "-n", s.mem2.Name, "link", "del", "eth0").CombinedOutput(); err != nil {
		s.fail("detach: %v %s", err, out)
	}
}

func (s *soak) plugBody(mac, ip, subnet string) []byte {
	return []byte(fmt.Sprintf(`{"mac_address": %q, "fixed_ips": [{"ip_address": %q, "subnet_cidr": %q, "gateway": null, "host_routes": []}], "mtu": 1500, "is_sriov": false}`,
		mac, ip, subnet))
}

// lbConfig is the load balancer shaped like the controller's template:
// the HTTP listener on the VIP with member 1, and with tls the TLS
// listener whose pool also holds member 2.
func (s *soak) lbConfig(tls bool) string {
	base := s.amp.Base()
	var b strings.Builder
	fmt.Fprintf(&b, `# Configuration for loadbalancer %s
global
    daemon
    user nobody
    stats socket %s/%s.sock mode 0666 level user
    maxconn 1000

defaults
    log global
    retries 3
    option redispatch
    timeout connect 5000
    timeout client 50000
    timeout server 50000
`, soakLB, base, soakLB)
	frontend := func(listener, bind, pool string, members ...string) {
		fmt.Fprintf(&b, "\nfrontend %s\n    maxconn 1000\n    bind %s\n    mode http\n    default_backend %s:%s\n", listener, bind, pool, listener)
		fmt.Fprintf(&b, "\nbackend %s:%s\n    mode http\n    balance roundrobin\n    option httpchk\n    http-check expect rstatus 200\n", pool, listener)
		for _, m := range members {
			b.WriteString(m)
		}
	}
	server := func(id, ip string) string {
		return fmt.Sprintf("    server %s %s:80 weight 1 check inter 1s fall 2 rise 2\n", id, ip)
	}
	frontend(s.ids.http, vrrputil.VIP+":80", soakPool1, server(soakMember1, soakMember1IP))
	if tls {
		crt := filepath.Join(s.amp.Env.Path("lib", "certs"), soakLB, s.ids.cert)
		frontend(s.ids.tls, vrrputil.VIP+":443 ssl crt "+crt, s.ids.pool2, server(soakMember1, soakMember1IP), server(s.ids.member2, soakMember2IP))
	}
	return b.String()
}

// heartbeats receives the agent's heartbeats until done, decodes each
// with the project's decoder and records the gaps between them.
func (s *soak) heartbeats(done chan struct{}) {
	buf := make([]byte, 1<<16)
	var last time.Time
	for {
		select {
		case <-done:
			return
		default:
		}
		s.amp.HB.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		n, err := s.amp.HB.Read(buf)
		if err != nil {
			continue
		}
		now := time.Now()
		if _, err := healthtest.Decode[health.Message](buf[:n], "insecure"); err != nil {
			s.fail("heartbeat does not decode: %v", err)
			continue
		}
		if !last.IsZero() {
			gap := now.Sub(last)
			s.mu.Lock()
			s.late = append(s.late, gap-time.Second)
			s.longGap = max(s.longGap, gap)
			if gap > soakSlowGap && len(s.slow) < 5 {
				s.slow = append(s.slow, soakGap{last, now})
			}
			s.mu.Unlock()
		}
		last = now
	}
}

// traffic sends one request a second through the VIP; the answers are
// counted, not judged (the VIP moves while the last listener is gone).
func (s *soak) traffic(c *http.Client, url string, done chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		if _, err := tiersutil.GetMember(c, url, "X-Member"); err != nil {
			s.trafficBad.Add(1)
		} else {
			s.trafficOK.Add(1)
		}
	}
}

const soakHeader = "soak:  min  rss MiB  pss MiB  fds  gor  thr  hap  ka  zomb  files    KiB  beats  late ms med/max  calls  fail  traffic ok/fail  load"

// watch samples the agent every soakSample and prints one row a minute
// until done or the duration is over; it returns the rows.
func (s *soak) watch(duration time.Duration, done chan struct{}) []soakRow {
	start := time.Now()
	tick := time.NewTicker(soakSample)
	defer tick.Stop()
	var rows []soakRow
	var samples []soakSampleOf
	var prevCalls, prevFailures, prevOK, prevBad int64
	for {
		ended := false
		select {
		case <-done:
			ended = true
		case <-tick.C:
			samples = append(samples, s.sample())
		}
		minutes := int(time.Since(start) / soakMinute)
		if (minutes > len(rows) || ended) && len(samples) > 0 {
			r := soakRow{minute: len(rows) + 1}
			med := func(f func(soakSampleOf) float64) float64 {
				v := make([]float64, len(samples))
				for i, x := range samples {
					v[i] = f(x)
				}
				slices.Sort(v)
				return v[len(v)/2]
			}
			r.rss = med(func(x soakSampleOf) float64 { return x.rss })
			r.pss = med(func(x soakSampleOf) float64 { return x.pss })
			r.fds = med(func(x soakSampleOf) float64 { return x.fds })
			r.goroutines = med(func(x soakSampleOf) float64 { return x.goroutines })
			r.threads = med(func(x soakSampleOf) float64 { return x.threads })
			r.haproxy = med(func(x soakSampleOf) float64 { return x.haproxy })
			r.keepalived = med(func(x soakSampleOf) float64 { return x.keepalived })
			r.zombies = med(func(x soakSampleOf) float64 { return x.zombies })
			r.files = med(func(x soakSampleOf) float64 { return x.files })
			r.kib = med(func(x soakSampleOf) float64 { return x.kib })
			r.load = med(func(x soakSampleOf) float64 { return x.load })
			s.mu.Lock()
			late := s.late
			s.late = nil
			s.mu.Unlock()
			r.beats = len(late)
			if len(late) > 0 {
				slices.Sort(late)
				r.lateMedian, r.lateMax = late[len(late)/2], late[len(late)-1]
			}
			calls, failures, ok, bad := s.calls.Load(), s.failures.Load(), s.trafficOK.Load(), s.trafficBad.Load()
			r.calls, r.failures, r.trafficOK, r.trafficBad = calls-prevCalls, failures-prevFailures, ok-prevOK, bad-prevBad
			prevCalls, prevFailures, prevOK, prevBad = calls, failures, ok, bad
			// A last part shorter than half a minute is no minute of its
			// own: too few samples to stand beside the others.
			if !ended || time.Since(start)-time.Duration(len(rows))*soakMinute >= soakMinute/2 {
				rows = append(rows, r)
				fmt.Println(r.String())
			}
			samples = nil
		}
		if ended || time.Since(start) >= duration+soakSample {
			if !ended {
				<-done
			}
			return rows
		}
	}
}

func (r soakRow) String() string {
	return fmt.Sprintf("soak: %4d  %7.1f  %7.1f  %3.0f  %3.0f  %3.0f  %3.0f  %2.0f  %4.0f  %5.0f  %5.1f  %5d  %7.1f/%-7.1f  %5d  %4d  %15s  %4.1f",
		r.minute, r.rss, r.pss, r.fds, r.goroutines, r.threads, r.haproxy, r.keepalived, r.zombies, r.files, r.kib,
		r.beats, ms(r.lateMedian), ms(r.lateMax), r.calls, r.failures,
		fmt.Sprintf("%d/%d", r.trafficOK, r.trafficBad), r.load)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// sample reads the agent's figures from /proc and its status socket,
// and counts its daemons by the config their command lines name (other
// tests' daemons on the machine are not counted).
func (s *soak) sample() soakSampleOf {
	env := s.amp.Env
	pid := env.Pid()
	var x soakSampleOf
	proc := func(name string) string {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
		if err != nil {
			s.fail("sample: %v", err)
		}
		return string(data)
	}
	x.rss = kbField(proc("smaps_rollup"), "Rss:") / 1024
	x.pss = kbField(proc("smaps_rollup"), "Pss:") / 1024
	x.threads = kbField(proc("status"), "Threads:")
	if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		x.fds = float64(len(fds))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	live, err := status.Fetch(ctx, filepath.Join(s.amp.Base(), status.SocketName))
	cancel()
	if err != nil || live.Goroutines == 0 {
		s.fail("status socket: %v (goroutines %v)", err, live)
	} else {
		x.goroutines = float64(live.Goroutines)
		n := 0
		for _, d := range live.Daemons {
			n += d.Respawns
		}
		s.mu.Lock()
		s.respawns = max(s.respawns, n)
		s.mu.Unlock()
	}
	base := s.amp.Base()
	x.haproxy = float64(len(tiersutil.DaemonsOf("haproxy", filepath.Join(base, soakLB, "haproxy.cfg"))))
	x.keepalived = float64(len(tiersutil.DaemonsOf("keepalived", filepath.Join(base, "vrrp", "octavia-keepalived.conf"))))
	x.zombies = float64(zombieChildren(pid))
	if avg, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(avg)); len(f) > 0 {
			x.load, _ = strconv.ParseFloat(f[0], 64)
		}
	}
	filepath.WalkDir(env.Dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || strings.Contains(d.Name(), ".log") {
			return nil
		}
		if info, err := d.Info(); err == nil {
			x.files++
			x.kib += float64(info.Size()) / 1024
		}
		return nil
	})
	return x
}

// zombieChildren counts the children of pid that ended and that pid has
// not waited for.
func zombieChildren(pid int) int {
	n := 0
	lists, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, list := range lists {
		data, _ := os.ReadFile(list)
		for _, child := range strings.Fields(string(data)) {
			stat, _ := os.ReadFile("/proc/" + child + "/stat")
			if _, rest, ok := bytes.Cut(stat, []byte(") ")); ok && bytes.HasPrefix(rest, []byte("Z")) {
				n++
			}
		}
	}
	return n
}

// kbField is the number after label in a /proc file of "Label: N kB" lines.
func kbField(text, label string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, label); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				v, _ := strconv.ParseFloat(f[0], 64)
				return v
			}
		}
	}
	return math.NaN()
}

// verdict prints each figure's slope per hour and says whether the soak
// failed: a failed call, a heartbeat gap over soakMaxGap, or a figure
// that grows. A figure grows when even the low end of its slope's 95%
// band (slope minus two standard errors, least squares over the minutes
// after the warm-up) projected over 24 h exceeds what it may grow in a
// day, and the fitted line rose by at least the figure's step during the
// run: noise on a busy machine does not fail the soak, nor a trend
// drawn through wiggles too small to mean anything, and a leak that
// would matter within a day on an amphora does once the run is long
// enough to tell it from noise.
func (s *soak) verdict(rows []soakRow) bool {
	failed := s.failures.Load() > 0
	fmt.Printf("soak: longest heartbeat gap %v (fails above %v)\n", s.longGap.Round(time.Millisecond), soakMaxGap)
	if s.longGap > soakMaxGap {
		failed = true
	}
	fmt.Printf("soak: HAProxy and keepalived respawned after dying: %d times (fails above 0)\n", s.respawns)
	if s.respawns > 0 {
		failed = true
	}
	s.explainSlowGaps()
	s.summarizeLog()
	var judged []soakRow
	for _, r := range rows {
		if r.minute > soakWarmUp {
			judged = append(judged, r)
		}
	}
	fmt.Printf("soak: slopes per hour, least squares over minutes %d-%d (minute 1 is warm-up and left out)\n", soakWarmUp+1, len(rows))
	fmt.Println("soak: rule: a figure grows when (slope - 2 standard errors) x 24 h > its allowance per 24 h")
	fmt.Println("soak:       and the fitted line rose by at least the figure's step over the minutes judged")
	if len(judged) < 3 {
		fmt.Printf("soak: %d minutes after the warm-up: too few to judge growth (3 needed); only failures count\n", len(judged))
		return failed
	}
	fmt.Printf("soak: %-16s %8s %10s %10s %14s %10s %6s  %s\n", "figure", "median", "slope/h", "±2 SE/h", "low end x 24h", "allow/24h", "step", "verdict")
	hours := float64(judged[len(judged)-1].minute-judged[0].minute) / 60
	for _, m := range soakMetrics {
		xs := make([]float64, len(judged))
		ys := make([]float64, len(judged))
		for i, r := range judged {
			xs[i] = float64(r.minute) / 60
			ys[i] = m.value(r)
		}
		slope, se := leastSquares(xs, ys)
		sorted := slices.Clone(ys)
		slices.Sort(sorted)
		low := (slope - 2*se) * 24
		verdict := "flat"
		switch {
		case low > m.allow && slope*hours >= m.step:
			verdict = "GROWS"
			failed = true
		case low > m.allow:
			verdict = "rising, less than a step"
		case slope*24 > m.allow:
			verdict = "rising, within noise"
		}
		fmt.Printf("soak: %-16s %8.1f %10.2f %10.2f %14.1f %10.0f %6.1f  %s\n", m.name, sorted[len(sorted)/2], slope, 2*se, low, m.allow, m.step, verdict)
	}
	return failed
}

// explainSlowGaps prints, for the first heartbeat gaps over soakSlowGap,
// the agent's log lines written during the gap.
func (s *soak) explainSlowGaps() {
	lines := strings.Split(s.amp.Env.Output(), "\n")
	for _, g := range s.slow {
		fmt.Printf("soak: heartbeat gap %v from %s; the agent's log meanwhile:\n", g.to.Sub(g.from).Round(time.Millisecond), g.from.UTC().Format("15:04:05.000"))
		shown := 0
		for _, line := range lines {
			stamp, _, _ := strings.Cut(line, "\t")
			at, err := time.Parse("2006-01-02T15:04:05.000Z0700", stamp)
			if err != nil || at.Before(g.from) || at.After(g.to) {
				continue
			}
			if shown++; shown > 20 {
				fmt.Println("soak:   ...")
				break
			}
			fmt.Printf("soak:   %.300s\n", line)
		}
	}
}

// summarizeLog prints the agent's warnings and errors, one line per
// message with how often it came.
func (s *soak) summarizeLog() {
	count := map[string]int{}
	for _, line := range strings.Split(s.amp.Env.Output(), "\n") {
		f := strings.Split(line, "\t")
		if len(f) < 4 || (f[1] != "WARN" && f[1] != "ERROR") {
			continue
		}
		// time, level, [logger,] caller, message, [fields]
		for i := 2; i+1 < len(f); i++ {
			if strings.Contains(f[i], ".go:") {
				count[f[1]+" "+f[i+1]]++
				break
			}
		}
	}
	fmt.Printf("soak: the agent's warnings and errors: %d kinds\n", len(count))
	for _, msg := range slices.Sorted(maps.Keys(count)) {
		fmt.Printf("soak: %6d x %s\n", count[msg], msg)
	}
}

// leastSquares fits y = a + b x and returns b and its standard error.
func leastSquares(xs, ys []float64) (slope, se float64) {
	n := float64(len(xs))
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx, my = mx/n, my/n
	var sxx, sxy float64
	for i := range xs {
		sxx += (xs[i] - mx) * (xs[i] - mx)
		sxy += (xs[i] - mx) * (ys[i] - my)
	}
	if sxx == 0 {
		return 0, 0
	}
	slope = sxy / sxx
	var ssr float64
	for i := range xs {
		r := ys[i] - (my + slope*(xs[i]-mx))
		ssr += r * r
	}
	return slope, math.Sqrt(ssr / (n - 2) / sxx)
}
