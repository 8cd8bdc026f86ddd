//go:build interop

package interop_test

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/promutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/tiersutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
)

const upstreamProxy = "/usr/bin/prometheus-proxy"

// startUpstreamProxy runs Debian's prometheus-proxy, unchanged, inside ns.
// It hard-codes the namespace amphora-haproxy (opened by path under
// /var/run/netns) and its addresses, so it runs in a private mount
// namespace where that path is ns.
func startUpstreamProxy(t *testing.T, ns *topo.Namespace) {
	t.Helper()
	dir := t.TempDir()
	script := `set -e
touch "$2/amphora-haproxy"
mount --bind "/run/netns/$1" "$2/amphora-haproxy"
mount --rbind "$2" /run/netns
exec ` + upstreamProxy
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", ns.Name, dir)
	out := &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		if t.Failed() {
			t.Logf("prometheus-proxy output:\n%s", out.String())
		}
	})
}

// metricsAnswer is one scrape: status, the headers upstream sets, body.
type metricsAnswer struct {
	status             int
	contentType, cache string
	closes             bool
	body               string
}

func scrapeIn(c *http.Client) (metricsAnswer, error) {
	r, err := c.Get("http://127.0.0.1:9102/metrics")
	if err != nil {
		return metricsAnswer{}, err
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	return metricsAnswer{status: r.StatusCode, contentType: r.Header.Get("Content-Type"),
		cache: r.Header.Get("Cache-Control"), closes: r.Close, body: string(b)}, err
}

// The two values upstream reads from the host at each scrape.
var hostGauges = regexp.MustCompile(`(?m)^(octavia_loadbalancer_(?:cpu|memory)) [0-9]+\.[0-9]\n`)

// Debian's prometheus-proxy and the agent translate the same page of the
// same HAProxy (run by the agent from a config Octavia's templater
// rendered, with traffic through it): headers and bodies are equal but for
// the CPU and memory values, and both answer 502 once the exporter is
// gone. The page is read from HAProxy once and served to both from a
// recording (HAProxy's counters move with every scrape): to the agent
// through prometheus_exporter_address, to prometheus-proxy, which
// hard-codes 127.0.0.1:9101, in a namespace of its own.
func TestInteropPrometheusProxy(t *testing.T) {
	if _, err := os.Stat(upstreamProxy); err != nil {
		t.Skip("python3-octavia's prometheus-proxy is not installed (make deps installs it)")
	}
	f := promutil.NewFixture(t, "[amphora_agent]\nprometheus_exporter_address = 127.0.0.1:19101\n")
	f.Start()

	// Traffic through the HTTP listener, so the counters are not all 0.
	vip := f.LB.HTTPClient(false)
	testenv.WaitFor(t, 20*time.Second, "traffic through the VIP", func() bool {
		_, err := tiersutil.GetMember(vip, f.LB.URL(80, "/"), "")
		return err == nil
	})
	for i := 0; i < 5; i++ {
		tiersutil.GetMember(vip, f.LB.URL(80, "/"), "")
	}
	var page []byte
	amp := f.LB.Amphora.HTTPClient(false)
	testenv.WaitFor(t, 10*time.Second, "HAProxy's exporter page", func() bool {
		r, err := amp.Get("http://127.0.0.1:9101/metrics")
		if err != nil {
			return false
		}
		defer r.Body.Close()
		page, err = io.ReadAll(r.Body)
		return err == nil && r.StatusCode == 200
	})
	if !strings.Contains(string(page), promutil.Members[1]) {
		t.Fatalf("HAProxy's page has no member %s:\n%s", promutil.Members[1], page)
	}
	recording := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(page) })
	forAgent := f.LB.Amphora.ServeHTTP(t, "127.0.0.1:19101", recording)

	up := topo.NewNamespace(t, "pp")
	forUpstream := up.ServeHTTP(t, "127.0.0.1:9101", recording)
	startUpstreamProxy(t, up)
	upClient := up.HTTPClient(false)
	var upstream, ours metricsAnswer
	testenv.WaitFor(t, 20*time.Second, "prometheus-proxy serving", func() bool {
		a, err := scrapeIn(upClient)
		upstream = a
		return err == nil && a.status == 200
	})
	ours, err := scrapeIn(amp)
	if err != nil {
		t.Fatal(err)
	}

	if ours.status != upstream.status || ours.contentType != upstream.contentType || ours.cache != upstream.cache || ours.closes != upstream.closes {
		t.Errorf("answers differ: agent %d %q %q close=%v, prometheus-proxy %d %q %q close=%v",
			ours.status, ours.contentType, ours.cache, ours.closes, upstream.status, upstream.contentType, upstream.cache, upstream.closes)
	}
	for _, a := range []*metricsAnswer{&ours, &upstream} {
		if n := len(hostGauges.FindAllString(a.body, -1)); n != 2 {
			t.Fatalf("%d CPU and memory samples in\n%.600s", n, a.body)
		}
		a.body = hostGauges.ReplaceAllString(a.body, "$1 X\n")
	}
	if ours.body != upstream.body {
		diffPages(t, ours.body, upstream.body)
	}
	for _, s := range []string{"octavia_member_status", promutil.Members[1], promutil.Listener, "octavia_listener_http_responses_total"} {
		if !strings.Contains(ours.body, s) {
			t.Errorf("the page has no %s", s)
		}
	}
	t.Logf("equal pages: %d bytes, %d lines, from HAProxy's %d bytes", len(ours.body), strings.Count(ours.body, "\n"), len(page))

	// The exporter gone: 502 from both.
	forAgent.Stop()
	forUpstream.Stop()
	for name, c := range map[string]*http.Client{"agent": amp, "prometheus-proxy": upClient} {
		a, err := scrapeIn(c)
		if err != nil || a.status != http.StatusBadGateway {
			t.Errorf("%s without the exporter: %d %v, want 502", name, a.status, err)
		}
	}
}

// diffPages fails with the line where the agent's page first differs.
func diffPages(t *testing.T, ours, upstream string) {
	t.Helper()
	n := 0
	for n < len(ours) && n < len(upstream) && ours[n] == upstream[n] {
		n++
	}
	start := strings.LastIndexByte(ours[:n], '\n') + 1
	line := func(s string) string {
		l, _, _ := strings.Cut(s[start:], "\n")
		return l
	}
	t.Fatalf("pages differ from byte %d (line %d):\n agent            %q\n prometheus-proxy %q",
		n, strings.Count(ours[:start], "\n")+1, line(ours), line(upstream))
}
