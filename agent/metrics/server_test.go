package metrics

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	vnetns "github.com/vishvananda/netns"
	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/metrics/metricstest"
	"github.com/amphora-agent/amphora-agent/agent/metrics/promex"
	"github.com/amphora-agent/amphora-agent/agent/testkit"
	"github.com/amphora-agent/amphora-agent/keepalived"
	"github.com/amphora-agent/amphora-agent/keepalived/ipvs"
	"github.com/amphora-agent/amphora-agent/netns"
	"github.com/amphora-agent/amphora-agent/netns/netnstest"
)

// testMetricsServer serves pages of exporter, reached without a namespace.
func testMetricsServer(t *testing.T, exporter string) *Server {
	t.Helper()
	m := NewServer("unused", "127.0.0.1:0", exporter, zap.NewNop())
	m.dial = new(net.Dialer).DialContext
	m.utilization = func() (float64, float64, error) { return 50, 23.5, nil }
	return m
}

// fakeExporter serves body at /metrics, as HAProxy's exporter does.
func fakeExporter(t *testing.T, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func scrape(t *testing.T, h http.Handler, method string) *http.Response {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	req, err := http.NewRequest(method, srv.URL+"/anything", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// Upstream's sample pair, through the HTTP layer: status, headers, body.
func TestMetricsPage(t *testing.T) {
	in, err := os.ReadFile("promex/testdata/upstream_haproxy.txt")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("promex/testdata/upstream_octavia.txt")
	if err != nil {
		t.Fatal(err)
	}
	m := testMetricsServer(t, fakeExporter(t, string(in)))
	resp := scrape(t, m, http.MethodGet)
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for k, v := range map[string]string{"Content-Type": "text/plain; version=0.0.4", "Cache-Control": "no-cache"} {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	if !resp.Close {
		t.Error("connection not closed after the answer, as upstream does")
	}
	if string(body) != string(want) {
		t.Fatalf("body differs from upstream's sample: %d bytes, want %d", len(body), len(want))
	}
}

// 502 when HAProxy's exporter is not there or does not answer 200; 501
// for methods upstream does not serve either.
func TestMetricsErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer broken.Close()
	for _, c := range []struct {
		name, exporter, method string
		want                   int
	}{
		{"nothing listens", closed, http.MethodGet, http.StatusBadGateway},
		{"exporter error", strings.TrimPrefix(broken.URL, "http://"), http.MethodGet, http.StatusBadGateway},
		{"POST", closed, http.MethodPost, http.StatusNotImplemented},
	} {
		resp := scrape(t, testMetricsServer(t, c.exporter), c.method)
		if resp.StatusCode != c.want {
			t.Errorf("%s: status %d, want %d", c.name, resp.StatusCode, c.want)
		}
	}
}

// An exporter that fails mid-page gives the scraper an error, never a
// short page that parses.
func TestMetricsCutShort(t *testing.T) {
	exp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000000")
		// Enough that the answer's head and part of its body are out.
		io.WriteString(w, strings.Repeat("haproxy_process_listeners 3\n", 10000))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}))
	defer exp.Close()
	srv := httptest.NewServer(testMetricsServer(t, strings.TrimPrefix(exp.URL, "http://")))
	defer srv.Close()
	// The answer fails, at its head or in its body.
	resp, err := http.Get(srv.URL + "/metrics")
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Fatal("a page cut short read as complete")
	}
}

// The endpoint opens once the namespace appears (the first plug creates
// it after the agent starts) and moves to a namespace recreated under the
// same name; the exporter is read inside it.
func TestMetricsFollowNamespace(t *testing.T) {
	testkit.RequireRoot(t, "creates network namespaces")
	name := fmt.Sprintf("aa-metrics-%d", os.Getpid())
	t.Cleanup(func() { vnetns.DeleteNamed(name) })
	m := NewServer(name, "127.0.0.1:19102", "127.0.0.1:19101", zap.NewNop())
	m.utilization = func() (float64, float64, error) { return 1, 2, nil }
	looked := make(chan bool, 100)
	m.watched = func(open bool) {
		select {
		case looked <- open:
		default:
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// exporterIn serves a one-line page inside the namespace.
	exporterIn := func(value int) {
		ln, err := netns.Listen(name, "tcp", "127.0.0.1:19101")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "haproxy_process_listeners %d\n", value)
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
	// waitFor polls the endpoint from inside the namespace until its page
	// ends with want.
	waitFor := func(want string) {
		t.Helper()
		client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return netnstest.Dial(ctx, name, network, addr)
			}}}
		deadline := time.Now().Add(10 * time.Second)
		var last string
		for time.Now().Before(deadline) {
			resp, err := client.Get("http://127.0.0.1:19102/metrics")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				last = fmt.Sprintf("%d %q", resp.StatusCode, b)
				if resp.StatusCode == 200 && strings.HasSuffix(string(b), want) {
					return
				}
			} else {
				last = err.Error()
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("no page ending in %q; last: %s", want, last)
	}

	// The server has looked for the namespace and not found it.
	select {
	case open := <-looked:
		if open {
			t.Fatal("endpoint open without a namespace")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server never looked for the namespace")
	}
	if err := netns.EnsureWith(name, zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	exporterIn(1)
	waitFor("octavia_loadbalancer_listeners 1\n")

	if err := vnetns.DeleteNamed(name); err != nil {
		t.Fatal(err)
	}
	if err := netns.EnsureWith(name, zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	exporterIn(2)
	waitFor("octavia_loadbalancer_listeners 2\n")
}

// extraSource adds one sample to one family.
type extraSource struct{ family, sample string }

func (e extraSource) WriteSamples(w io.Writer, family string) error {
	if family == e.family {
		_, err := io.WriteString(w, e.sample)
		return err
	}
	return nil
}

// Series of another source (the UDP and SCTP listeners') join HAProxy's
// in their family, asked for at each scrape, and the page still parses
// with Prometheus's own text parser.
func TestMetricsExtraSeries(t *testing.T) {
	in, err := os.ReadFile("promex/testdata/haproxy26_haproxy.txt")
	if err != nil {
		t.Fatal(err)
	}
	m := testMetricsServer(t, fakeExporter(t, string(in)))
	scrapes := 0
	m.Extra = func(context.Context) []promex.Source {
		scrapes++
		return []promex.Source{extraSource{"octavia_listener_bytes_in_total",
			fmt.Sprintf("octavia_listener_bytes_in_total{listener=\"udp-%d\"} 7\n", scrapes)}}
	}
	for want := 1; want <= 2; want++ {
		resp := scrape(t, m, http.MethodGet)
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		families, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
		if err != nil {
			t.Fatalf("scrape %d does not parse: %v", want, err)
		}
		var listeners []string
		for _, s := range families["octavia_listener_bytes_in_total"].GetMetric() {
			listeners = append(listeners, s.GetLabel()[0].GetValue())
		}
		if got := strings.Join(listeners, " "); got != promHTTP26+" "+promListener26+fmt.Sprintf(" udp-%d", want) {
			t.Errorf("scrape %d: listeners %s", want, got)
		}
	}
}

// The listeners of the golden HAProxy 2.6 page.
const (
	promHTTP26     = "1a0c13c0-8e69-46c7-a68a-ca4937996d74"
	promListener26 = "0b248d39-eb90-4180-91aa-5363be7df4db"
)

// The UDP and SCTP listeners' IPVS counters join the families of the
// page: every family they have a value for is one HAProxy's page
// translates to, and the page parses.
func TestMetricsLVSSeries(t *testing.T) {
	in, err := os.ReadFile("promex/testdata/haproxy26_haproxy.txt")
	if err != nil {
		t.Fatal(err)
	}
	st := ipvs.Stats{Conns: 5, InBytes: 180, OutBytes: 320}
	states := []keepalived.LVSListenerState{{ID: "udp-l", Found: true, Stats: st, ActiveConns: 1,
		Pool: &keepalived.LVSPoolState{ID: "udp-p", Status: keepalived.PoolUp, Members: []keepalived.LVSMemberState{
			{ID: "udp-m", Status: keepalived.MemberUp, InKernel: true, Weight: 1, ActiveConns: 1, Stats: st}}}}}
	m := testMetricsServer(t, fakeExporter(t, string(in)))
	m.Extra = func(context.Context) []promex.Source { return []promex.Source{LVSSource(states)} }
	body, err := io.ReadAll(scrape(t, m, http.MethodGet).Body)
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("the page does not parse: %v", err)
	}
	has := func(family, label, value string) bool {
		for _, s := range families[family].GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return true
				}
			}
		}
		return false
	}
	for _, f := range []string{"status", "current_sessions", "sessions_total", "connections_total", "bytes_in_total", "bytes_out_total"} {
		if !has("octavia_listener_"+f, "listener", "udp-l") {
			t.Errorf("octavia_listener_%s has no UDP listener", f)
		}
	}
	for _, f := range []string{"status", "current_sessions", "sessions_total", "connection_attempts_total", "bytes_in_total", "bytes_out_total", "active_members"} {
		if !has("octavia_pool_"+f, "pool", "udp-p:udp-l") {
			t.Errorf("octavia_pool_%s has no UDP pool", f)
		}
	}
	for _, f := range []string{"status", "current_sessions", "sessions_total", "connection_attempts_total", "bytes_in_total", "bytes_out_total", "weight"} {
		if !has("octavia_member_"+f, "member", "udp-m") {
			t.Errorf("octavia_member_%s has no UDP member", f)
		}
	}
}

type countingIPVS struct{ reads int }

func (c *countingIPVS) Read(context.Context) (ipvs.Table, error) { c.reads++; return ipvs.Table{}, nil }

// Without UDP or SCTP listeners a scrape adds nothing and reads no IPVS
// table.
func TestLVSSeriesWithoutListeners(t *testing.T) {
	r := &countingIPVS{}
	extra := LVSSeries(keepalived.LVSLayout{Base: t.TempDir()}, r, zap.NewNop())
	if got := extra(context.Background()); got != nil || r.reads != 0 {
		t.Fatalf("sources %v, %d reads", got, r.reads)
	}
}

// A scraper that gives up ends the agent's request to a stalled exporter:
// its connection is closed, not left open for metricsFetchTimeout.
func TestMetricsStalledExporterFollowsScraper(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	closed := make(chan error, 1)
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			closed <- err
			return
		}
		accepted <- c
		defer c.Close()
		// Read the request, answer nothing, and wait for the agent to hang up.
		buf := make([]byte, 4096)
		for {
			if _, err := c.Read(buf); err != nil {
				closed <- err
				return
			}
		}
	}()
	srv := httptest.NewServer(testMetricsServer(t, ln.Addr().String()))
	defer srv.Close()
	client := &http.Client{Timeout: 200 * time.Millisecond}
	if resp, err := client.Get(srv.URL + "/metrics"); err == nil {
		resp.Body.Close()
		t.Fatalf("a stalled exporter answered %d", resp.StatusCode)
	}
	select {
	case err := <-closed:
		if err != io.EOF {
			t.Fatalf("exporter connection: %v, want EOF", err)
		}
	case <-time.After(5 * time.Second):
		// Unblock the handler so that the servers can close.
		(<-accepted).Close()
		t.Fatal("the agent kept its request to the exporter open after the scraper left")
	}
}

// rawExporter is a fake exporter on loopback: see metricstest.ServeExporter.
func rawExporter(t *testing.T, answer func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricstest.ServeExporter(t, ln, answer)
	return ln.Addr().String()
}

// An exporter answer with a head or a line over the caps is a 502 (or,
// once part of the page has gone out, a cut answer), and the agent stops
// reading it at the cap.
func TestMetricsBadExporterAnswer(t *testing.T) {
	const huge = 64 << 20 // would be held whole without the caps
	okHead := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
	goodLines := strings.Repeat("haproxy_process_listeners 3\n", 20000) // 560 KB: the page is out
	cases := []struct {
		name   string
		answer func(w io.Writer) int64
		cut    bool // the 200 is out before the bad part
	}{
		{"one endless header line", func(w io.Writer) int64 {
			io.WriteString(w, "HTTP/1.1 200 OK\r\nX-Big: ")
			return metricstest.StreamLetter(w, 'a', huge, nil)
		}, false},
		{"endless header lines", func(w io.Writer) int64 {
			io.WriteString(w, "HTTP/1.1 200 OK\r\n")
			line := []byte("X-A: b\r\n")
			sent := int64(0)
			for sent < huge {
				n, err := w.Write(line)
				sent += int64(n)
				if err != nil {
					break
				}
			}
			return sent
		}, false},
		{"an endless first line", func(w io.Writer) int64 {
			io.WriteString(w, okHead+"haproxy_process_listeners{x=\"")
			return metricstest.StreamLetter(w, 'a', huge, nil)
		}, false},
		{"an endless line after half a megabyte", func(w io.Writer) int64 {
			io.WriteString(w, okHead+goodLines+"haproxy_process_listeners{x=\"")
			return metricstest.StreamLetter(w, 'a', huge, nil)
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sent := make(chan int64, 1)
			exp := rawExporter(t, func(conn net.Conn) { sent <- c.answer(conn) })
			srv := httptest.NewServer(testMetricsServer(t, exp))
			defer srv.Close()
			resp, err := http.Get(srv.URL + "/metrics")
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			switch {
			case c.cut && err == nil:
				t.Errorf("a page with a line over the cap read as complete (%d)", resp.StatusCode)
			case !c.cut && (err != nil || resp.StatusCode != http.StatusBadGateway):
				t.Errorf("answer %v %v, want 502", resp, err)
			}
			// The agent hung up well before the end; what the kernel's
			// buffers took counts as sent.
			select {
			case n := <-sent:
				if n >= huge {
					t.Errorf("the agent read all %d bytes", n)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the exporter is still sending")
			}
		})
	}
}

// A silent exporter (it accepts and never answers) is a 502 after the
// answer timeout, not after metricsFetchTimeout; scrapes beyond
// MaxScrapes wait scrapeQueueWait and are answered 503 while the slots
// are taken.
func TestMetricsSilentExporterAndScrapeCap(t *testing.T) {
	release := make(chan struct{})
	accepted := make(chan struct{}, MaxScrapes+1)
	exp := rawExporter(t, func(conn net.Conn) {
		accepted <- struct{}{}
		select {
		case <-release:
		case <-time.After(30 * time.Second):
		}
	})
	m := testMetricsServer(t, exp)
	m.answerTimeout = 20 * time.Second
	srv := httptest.NewServer(m)
	defer srv.Close()
	get := func() (*http.Response, error) {
		resp, err := http.Get(srv.URL + "/metrics")
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}

	// Every slot held by a scrape of the silent exporter.
	answers := make(chan int, MaxScrapes)
	for range MaxScrapes {
		go func() {
			resp, err := get()
			if err != nil {
				answers <- 0
				return
			}
			answers <- resp.StatusCode
		}()
	}
	for i := range MaxScrapes {
		select {
		case <-accepted:
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d scrapes reached the exporter", i)
		}
	}
	start := time.Now()
	resp, err := get()
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a scrape beyond the cap: %v %v, want 503 with Retry-After", resp, err)
	}
	if took := time.Since(start); took < scrapeQueueWait/2 || took > scrapeQueueWait+5*time.Second {
		t.Errorf("503 after %v, want about %v", took, scrapeQueueWait)
	}
	select {
	case <-accepted:
		t.Error("the scrape beyond the cap reached the exporter")
	default:
	}
	// The exporter hangs up without answering: 502 each.
	close(release)
	for range MaxScrapes {
		if code := <-answers; code != http.StatusBadGateway {
			t.Errorf("a scrape of an exporter that hung up: %d, want 502", code)
		}
	}

	// With a short answer timeout, a silent exporter is a 502 in time.
	m.answerTimeout = 300 * time.Millisecond
	blocked := make(chan struct{})
	defer close(blocked)
	m2exp := rawExporter(t, func(conn net.Conn) { <-blocked })
	m.exporter = m2exp
	start = time.Now()
	resp, err = get()
	if err != nil || resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("silent exporter: %v %v, want 502", resp, err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("502 after %v, want about %v", took, m.answerTimeout)
	}
	if len(m.slots) != 0 {
		t.Errorf("%d slots still taken", len(m.slots))
	}
}
