//go:build system

package system_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/amphora-agent/amphora-agent/agent/health"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/hbutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/promutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
)

// A tenant in the client namespace scrapes the PROMETHEUS listener on the
// VIP: HAProxy hands the scrape to the agent on 127.0.0.1:9102 inside the
// amphora namespace, which reads HAProxy's exporter on 127.0.0.1:9101
// there. A real Prometheus text parser reads the page, with Octavia's
// families for both listeners, the pool and its members.
func TestPrometheusListenerScrape(t *testing.T) {
	hm := hbutil.NewReceiver(t)
	f := promutil.NewFixture(t, "[health_manager]\ncontroller_ip_port_list = "+hm.Addr()+"\nheartbeat_interval = 1\n")
	f.Start()
	client := f.LB.HTTPClient(false)
	url := f.LB.URL(promutil.Port, "/metrics")

	var (
		families map[string]*dto.MetricFamily
		resp     *http.Response
	)
	testenv.WaitFor(t, 20*time.Second, "a page through the PROMETHEUS listener", func() bool {
		r, err := client.Get(url)
		if err != nil {
			return false
		}
		body, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil || r.StatusCode != 200 {
			return false
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		families, err = p.TextToMetricFamilies(strings.NewReader(string(body)))
		if err != nil {
			t.Fatalf("the page does not parse: %v\n%s", err, body)
		}
		resp = r
		return true
	})
	if ct := resp.Header.Get("Content-Type"); ct != "text/plain; version=0.0.4" {
		t.Errorf("Content-Type %q", ct)
	}

	// series lists the label values of label over a family's samples.
	series := func(family, label string) map[string]bool {
		out := map[string]bool{}
		mf := families[family]
		if mf == nil {
			t.Errorf("no family %s", family)
			return out
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					out[l.GetValue()] = true
				}
			}
		}
		return out
	}
	for _, fam := range []string{"octavia_listener_status", "octavia_listener_connections_total", "octavia_listener_bytes_in_total", "octavia_listener_http_requests_total"} {
		got := series(fam, "listener")
		if !got[promutil.HTTPListener] || !got[promutil.Listener] || len(got) != 2 {
			t.Errorf("%s: listeners %v, want exactly %s and %s", fam, got, promutil.HTTPListener, promutil.Listener)
		}
	}
	if got := series("octavia_pool_status", "pool"); !got[promutil.Pool+":"+promutil.HTTPListener] || len(got) != 1 {
		t.Errorf("octavia_pool_status: pools %v", got)
	}
	if got := series("octavia_member_status", "member"); !got[promutil.Members[0]] || !got[promutil.Members[1]] || len(got) != 2 {
		t.Errorf("octavia_member_status: members %v", got)
	}
	for _, fam := range []string{"octavia_loadbalancer_cpu", "octavia_loadbalancer_memory", "octavia_loadbalancer_current_connections"} {
		if families[fam] == nil || len(families[fam].GetMetric()) != 1 {
			t.Errorf("no single %s sample", fam)
		}
	}
	for name := range families {
		if !strings.HasPrefix(name, "octavia_") {
			t.Errorf("family %s is not Octavia's", name)
		}
	}

	// The heartbeat reports both listeners (the PROMETHEUS one too, as
	// upstream) and only the tenant's pool: never the internal
	// prometheus-exporter proxies.
	m, _ := hm.WaitFor(hbutil.Wait, "insecure", "both listeners OPEN", func(m health.Message) bool {
		return m.Listeners[promutil.HTTPListener].Status == "OPEN" && m.Listeners[promutil.Listener].Status == "OPEN"
	})
	if len(m.Listeners) != 2 || len(m.Pools) != 1 || m.Pools[promutil.Pool+":"+promutil.HTTPListener].Members == nil {
		t.Errorf("heartbeat %+v", m)
	}
	if strings.Contains(fmt.Sprintf("%+v", m), "prometheus") {
		t.Errorf("the heartbeat names the internal proxies: %+v", m)
	}

	// HAProxy's exporter gone (the load balancer stopped): the agent's
	// endpoint answers 502, as upstream's.
	if status, _, body := f.Env.Do("PUT", "/1.0/loadbalancer/"+promutil.LB+"/stop", nil); status != 202 {
		t.Fatalf("stop: %d %s", status, body)
	}
	inside := f.LB.Amphora.HTTPClient(false)
	r, err := inside.Get("http://127.0.0.1:9102/metrics")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusBadGateway {
		t.Fatalf("without HAProxy: %d, want 502", r.StatusCode)
	}
}
