//go:build system

package system_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/metrics/metricstest"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/hbutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/netns"
	"github.com/amphora-agent/amphora-agent/netns/netnstest"
)

// Helpers of the metrics floods in the hostile suite: an agent whose metrics endpoint is open in its namespace, fake
// HAProxy exporters there, a flood client in a process of its own (its
// sockets must not count against this process's open-files limit), and
// the agent's threads, resident size and descriptors read from /proc.

// procFigures are what a flood may grow in the agent.
type procFigures struct {
	Threads int
	RSS     int64 // bytes
	FDs     int
}

func (f procFigures) String() string {
	return fmt.Sprintf("%d threads, %.1f MB RSS, %d fds", f.Threads, float64(f.RSS)/(1<<20), f.FDs)
}

func readProcFigures(pid int) (procFigures, error) {
	f, err := readProcStatus(pid)
	if err != nil {
		return f, err
	}
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return f, err
	}
	f.FDs = len(fds)
	return f, nil
}

// readProcStatus reads the threads and the RSS of pid (not its fds).
func readProcStatus(pid int) (procFigures, error) {
	var f procFigures
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return f, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		key, value, _ := strings.Cut(line, ":")
		value = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(value), "kB"))
		switch key {
		case "Threads":
			f.Threads, err = strconv.Atoi(value)
		case "VmRSS":
			var kb int64
			kb, err = strconv.ParseInt(value, 10, 64)
			f.RSS = kb << 10
		}
		if err != nil {
			return f, err
		}
	}
	if f.RSS == 0 {
		return f, fmt.Errorf("no VmRSS for %d", pid)
	}
	return f, nil
}

// procSampler records the peaks of a process's figures until Stop.
type procSampler struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	peak procFigures
}

// sampleProc reads pid's figures every 20 ms; over, when set, is called
// (once) when the RSS passes limit.
func sampleProc(pid int, limit int64, over func()) *procSampler {
	s := &procSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		fired := false
		for {
			if f, err := readProcFigures(pid); err == nil {
				s.mu.Lock()
				s.peak.Threads = max(s.peak.Threads, f.Threads)
				s.peak.RSS = max(s.peak.RSS, f.RSS)
				s.peak.FDs = max(s.peak.FDs, f.FDs)
				s.mu.Unlock()
				if over != nil && !fired && limit > 0 && f.RSS > limit {
					fired = true
					over()
				}
			}
			select {
			case <-s.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return s
}

// Stop ends the sampling and returns the peaks.
func (s *procSampler) Stop() procFigures {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// metricsRig is an agent sending a heartbeat every second, its metrics
// endpoint open in its namespace on the default addresses.
type metricsRig struct {
	t  *testing.T
	e  *testenv.Env
	hm *hbutil.Receiver
	ns string
}

func newMetricsRig(t *testing.T) *metricsRig {
	t.Helper()
	hm := hbutil.NewReceiver(t)
	e := testenv.New(t)
	e.Extra = "[health_manager]\ncontroller_ip_port_list = " + hm.Addr() + "\nheartbeat_interval = 1\n"
	e.Start()
	return &metricsRig{t: t, e: e, hm: hm, ns: e.Namespace()}
}

// exporter stands in for HAProxy's exporter on 127.0.0.1:9101 in the
// namespace (see metricstest.ServeExporter).
func (r *metricsRig) exporter(answer func(c net.Conn)) {
	r.t.Helper()
	var ln net.Listener
	testenv.WaitFor(r.t, 15*time.Second, "the agent's namespace", func() bool {
		var err error
		ln, err = netns.Listen(r.ns, "tcp", "127.0.0.1:9101")
		return err == nil
	})
	metricstest.ServeExporter(r.t, ln, answer)
}

// answerPage answers with a real HAProxy 2.6 exporter page.
func answerPage(t *testing.T) func(net.Conn) {
	page, err := os.ReadFile("../../../../agent/metrics/promex/testdata/haproxy26_haproxy.txt")
	if err != nil {
		t.Fatal(err)
	}
	head := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", len(page))
	return func(c net.Conn) {
		c.SetWriteDeadline(time.Now().Add(30 * time.Second))
		c.Write(append([]byte(head), page...))
	}
}

// answerNothing keeps the connection open, silent, until the agent hangs
// up (or the test ends).
func answerNothing(c net.Conn) { io.Copy(io.Discard, c) }

// scrape asks the endpoint once from inside the namespace.
func (r *metricsRig) scrape(timeout time.Duration) (int, error) {
	client := &http.Client{Timeout: timeout, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return netnstest.Dial(ctx, r.ns, network, addr)
		}}}
	resp, err := client.Get("http://127.0.0.1:9102/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// floodResult is what the flood client reports.
type floodResult struct {
	Answers map[string]int // status code or error class: count
	Elapsed time.Duration
}

func (f floodResult) String() string {
	var keys []string
	for k := range f.Answers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s×%d", k, f.Answers[k]))
	}
	return fmt.Sprintf("%s in %v", strings.Join(parts, " "), f.Elapsed.Round(time.Millisecond))
}

// flood runs n scrapes at once against the endpoint, from a process of
// their own inside the namespace, each bounded by timeout.
func (r *metricsRig) flood(n int, timeout time.Duration) floodResult {
	r.t.Helper()
	self, err := os.Executable()
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", r.ns, self,
		"-test.run=^TestScrapeFloodClientProcess$", "-test.count=1", "-test.v=false")
	cmd.Env = append(os.Environ(), "AA_SCRAPE_FLOOD="+strconv.Itoa(n),
		"AA_SCRAPE_FLOOD_ADDR=127.0.0.1:9102", "AA_SCRAPE_FLOOD_TIMEOUT="+timeout.String())
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if data, ok := strings.CutPrefix(line, floodResultPrefix); ok {
			var res floodResult
			if err := json.Unmarshal([]byte(data), &res); err != nil {
				r.t.Fatalf("flood client result %q: %v", data, err)
			}
			return res
		}
	}
	r.t.Fatalf("flood client: %v\n%s", err, out)
	return floodResult{}
}

const floodResultPrefix = "scrape-flood-result: "

// TestScrapeFloodClientProcess is the flood client, run by flood in its
// own process inside the namespace; it does nothing in a test run.
func TestScrapeFloodClientProcess(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("AA_SCRAPE_FLOOD"))
	if n == 0 {
		t.Skip("the flood client of the metrics floods, run in a process of its own")
	}
	addr := os.Getenv("AA_SCRAPE_FLOOD_ADDR")
	timeout, err := time.ParseDuration(os.Getenv("AA_SCRAPE_FLOOD_TIMEOUT"))
	if err != nil {
		t.Fatal(err)
	}
	raiseOpenFiles(t, uint64(n)+256)
	var (
		mu      sync.Mutex
		answers = map[string]int{}
		wg      sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(timeout)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			what := scrapeOnceRaw(addr, deadline)
			mu.Lock()
			answers[what]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	data, _ := json.Marshal(floodResult{Answers: answers, Elapsed: time.Since(start)})
	fmt.Println(floodResultPrefix + string(data))
}

// scrapeOnceRaw is one scrape on its own connection: its status code,
// or the class of its failure.
func scrapeOnceRaw(addr string, deadline time.Time) string {
	c, err := (&net.Dialer{Deadline: deadline}).Dial("tcp", addr)
	if err != nil {
		return "dial " + errClass(err)
	}
	defer c.Close()
	c.SetDeadline(deadline)
	if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: flood\r\nConnection: close\r\n\r\n"); err != nil {
		return "write " + errClass(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "read " + errClass(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return strconv.Itoa(resp.StatusCode) + " body " + errClass(err)
	}
	return strconv.Itoa(resp.StatusCode)
}

func errClass(err error) string {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "eof"
	}
	return "error"
}

// serviceWatch calls the agent's API every 200 ms on a new connection
// and receives its heartbeats while a flood runs.
type serviceWatch struct {
	stop     chan struct{}
	done     sync.WaitGroup
	mu       sync.Mutex
	apiCalls int
	apiFails []string
	apiWorst time.Duration
	beats    int
	hbWorst  time.Duration // the longest time without a heartbeat
}

func (r *metricsRig) watchService() *serviceWatch {
	w := &serviceWatch{stop: make(chan struct{})}
	client := &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: r.e.ClientTLS(), DisableKeepAlives: true}}
	w.done.Add(2)
	go func() {
		defer w.done.Done()
		for {
			start := time.Now()
			resp, err := client.Get(r.e.URL("/"))
			took := time.Since(start)
			w.mu.Lock()
			w.apiCalls++
			w.apiWorst = max(w.apiWorst, took)
			if err != nil {
				w.apiFails = append(w.apiFails, err.Error())
			} else {
				resp.Body.Close()
				if resp.StatusCode != 200 {
					w.apiFails = append(w.apiFails, resp.Status)
				}
			}
			w.mu.Unlock()
			select {
			case <-w.stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	go func() {
		defer w.done.Done()
		last := time.Now()
		for {
			select {
			case <-w.stop:
				w.mu.Lock()
				w.hbWorst = max(w.hbWorst, time.Since(last))
				w.mu.Unlock()
				return
			default:
			}
			got := r.hm.Next(time.Now().Add(200 * time.Millisecond))
			now := time.Now()
			w.mu.Lock()
			w.hbWorst = max(w.hbWorst, now.Sub(last))
			if got != nil {
				w.beats++
				last = now
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// Stop ends the watch; it fails the test if an API call failed or took
// longer than apiBound, or heartbeats paused longer than hbBound.
func (w *serviceWatch) Stop(t *testing.T, apiBound, hbBound time.Duration) {
	t.Helper()
	close(w.stop)
	w.done.Wait()
	t.Logf("during the flood: %d API calls (slowest %v), %d heartbeats (longest pause %v)",
		w.apiCalls, w.apiWorst.Round(time.Millisecond), w.beats, w.hbWorst.Round(time.Millisecond))
	if len(w.apiFails) > 0 {
		t.Errorf("%d of %d API calls failed, first: %s", len(w.apiFails), w.apiCalls, w.apiFails[0])
	}
	if w.apiWorst > apiBound {
		t.Errorf("an API call took %v (bound %v)", w.apiWorst, apiBound)
	}
	if w.hbWorst > hbBound {
		t.Errorf("no heartbeat for %v (bound %v)", w.hbWorst, hbBound)
	}
}
