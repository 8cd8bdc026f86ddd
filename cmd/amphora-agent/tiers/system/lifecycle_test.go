//go:build system

package system_test

import (
	"context"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/haproxy/stats/haproxytest"
)

// hangUpAction sends PUT .../{action} and hangs up a moment after the
// request is sent, in the middle of the agent's work, as a controller
// whose connection drops. Counted from the dial instead, the moment could
// end in a slow TLS handshake on a loaded host, before the agent had any
// request at all.
func (f *lbFixture) hangUpAction(action string, after time.Duration) {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { time.AfterFunc(after, cancel) },
	})
	req, _ := http.NewRequestWithContext(ctx, "PUT", f.env.URL("/1.0/loadbalancer/"+testLB+"/"+action), nil)
	if resp, err := f.env.Client().Do(req); err == nil {
		resp.Body.Close()
		f.t.Logf("%s answered %d before the client hung up", action, resp.StatusCode)
	}
}

// A controller that hangs up in the middle of a start or a reload leaves
// the new config serving with exactly one master, and nothing rolled back.
func TestHAProxyLifecycleOutlivesTheRequest(t *testing.T) {
	f := newLBFixture(t)
	f.env.Start()
	sock := filepath.Join(f.base(), testLB, "master.sock")
	if status, body := f.upload(f.config(1)); status != 202 {
		t.Fatalf("upload: %d %s", status, body)
	}
	f.hangUpAction("start", 20*time.Millisecond)
	f.waitServing("traffic after a start whose client hung up", "1")
	for gen := 2; gen <= 3; gen++ {
		if status, body := f.upload(f.config(gen)); status != 202 {
			t.Fatalf("upload: %d %s", status, body)
		}
		f.hangUpAction("reload", 50*time.Millisecond)
		f.waitServing("traffic after a reload whose client hung up", string(rune('0'+gen)))
		// The agent finishes the reload before it takes the next request.
		if status, body := f.action("reload"); status != 202 {
			t.Fatalf("reload after the hang-up: %d %s", status, body)
		}
	}
	if n := haproxytest.Masters(sock); n != 1 {
		t.Fatalf("%d HAProxy masters, want 1", n)
	}
	if _, err := os.Stat(filepath.Join(f.base(), testLB, "haproxy.cfg.new-failed")); !os.IsNotExist(err) {
		t.Fatalf("a valid config was recorded as failed: %v", err)
	}
	if n := f.env.Count("putting the last good config back"); n != 0 {
		t.Fatalf("a rollback happened:\n%s", f.env.Output())
	}
	testenv.WaitFor(t, 5*time.Second, "one master", func() bool { return haproxytest.Masters(sock) == 1 })
}

// The agent runs on one P unless GOMAXPROCS says otherwise.
func TestAgentSchedulerProcs(t *testing.T) {
	for env, want := range map[string]string{"": `"gomaxprocs": 1}`, "GOMAXPROCS=2": `"gomaxprocs": 2}`} {
		e := testenv.New(t)
		if env != "" {
			e.Env = append(e.Env, env)
		}
		e.Start()
		testenv.WaitFor(t, 10*time.Second, "the scheduler line", func() bool { return e.Count("scheduler", want) == 1 })
		e.Stop()
	}
}

// A SIGHUP in the first milliseconds, before the API or the first
// heartbeat, reloads the configuration: the agent catches signals from the
// moment it has read its files (it logs the scheduler line just after).
// Without that, SIGHUP's default action ends the agent.
func TestAgentSIGHUPDuringStartUp(t *testing.T) {
	e := testenv.New(t)
	e.Spawn()
	deadline := time.Now().Add(10 * time.Second)
	for e.Count("scheduler") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no scheduler line:\n%s", e.Output())
		}
		time.Sleep(200 * time.Microsecond)
	}
	if err := e.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the configuration reloaded", func() bool {
		select {
		case <-e.Exited():
			t.Fatalf("the agent ended on a SIGHUP during start-up:\n%s", e.Output())
		default:
		}
		return e.Count("configuration applied") == 1
	})
	e.WaitServing()
	if status, _, body := e.Do("GET", "/1.0/info", nil); status != 200 {
		t.Fatalf("GET /1.0/info after the SIGHUP: %d %s", status, body)
	}
}
