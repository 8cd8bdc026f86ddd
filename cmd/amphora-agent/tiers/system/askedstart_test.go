//go:build system

package system_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
)

// slowStartFixture is an agent serving testLB, uploaded, whose haproxy_cmd
// is a wrapper that sleeps before it runs HAProxy, then runs then (only
// when it starts one: the check at upload stays quick).
func slowStartFixture(t *testing.T, sleep time.Duration, then string) *lbFixture {
	f := newLBFixture(t)
	wrapper := f.env.Path("haproxy-slow")
	script := fmt.Sprintf("#!/bin/sh\ncase \" $* \" in *\" -c \"*) exec /usr/sbin/haproxy \"$@\" ;; esac\nsleep %d\n%s\n",
		int(sleep.Seconds()), then)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	f.env.Extra += "[haproxy_amphora]\nhaproxy_cmd = " + wrapper + "\n"
	f.env.Start()
	if status, body := f.upload(f.config(1)); status != 202 {
		t.Fatalf("upload: %d %s", status, body)
	}
	return f
}

// putStart sends PUT .../start with a client that gives up after timeout.
func (f *lbFixture) putStart(timeout time.Duration) (status int, body string, took time.Duration, err error) {
	client := f.env.Client()
	client.Timeout = timeout
	req, _ := http.NewRequest("PUT", f.env.URL("/1.0/loadbalancer/"+testLB+"/start"), nil)
	begun := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", time.Since(begun), err
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(data), time.Since(begun), nil
}

// servesAtOnce fails t unless the VIP serves generation 1 right now.
func (f *lbFixture) servesAtOnce(when string) {
	f.t.Helper()
	if g, err := f.get(f.lb.HTTPClient(false)); err != nil || g != "1" {
		f.t.Fatalf("%s: gen %q, %v", when, g, err)
	}
}

const runHAProxy = "exec /usr/sbin/haproxy \"$@\""

// A start the controller asks for is answered as upstream's blocking
// systemctl start would answer it: with HAProxy 20 s and 80 s (past the
// 72 s after which a start answered early ended in a failover) slow to
// start, a 202 once HAProxy serves, never before; one that dies after
// 20 s is a 500 with its output.
func TestHAProxyAskedStartWaitsForASlowHAProxy(t *testing.T) {
	for _, c := range []struct {
		name  string
		sleep time.Duration
		then  string
	}{
		{"20 s", 20 * time.Second, runHAProxy},
		{"80 s", 80 * time.Second, runHAProxy},
		{"dies after 20 s", 20 * time.Second, "echo '[ALERT] the slow wrapper gave up'; exit 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := slowStartFixture(t, c.sleep, c.then)
			status, body, took, err := f.putStart(c.sleep + time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("answered %d after %v", status, took.Round(time.Millisecond))
			if c.then != runHAProxy {
				if status != 500 || !strings.Contains(body, "Error starting haproxy") || !strings.Contains(body, "the slow wrapper gave up") {
					t.Fatalf("start of a HAProxy that died: %d %s", status, body)
				}
				return
			}
			if status != 202 || !strings.Contains(body, "started") {
				t.Fatalf("slow start: %d %s", status, body)
			}
			if took < c.sleep {
				t.Fatalf("answered after %v, before the wrapper even ran HAProxy", took)
			}
			f.servesAtOnce("right after the 202")
		})
	}
	// The controller gives up on a request after its read timeout and
	// sends it again: the start goes on in the background meanwhile, and
	// the retry waits for it, as systemctl start joins the start job.
	t.Run("the client leaves and retries", func(t *testing.T) {
		t.Parallel()
		f := slowStartFixture(t, 20*time.Second, runHAProxy)
		if _, _, took, err := f.putStart(5 * time.Second); err == nil {
			t.Fatalf("the first start was answered after %v, before HAProxy could run", took)
		}
		testenv.WaitFor(t, 20*time.Second, "the start followed in the background", func() bool {
			return f.env.Count("not ready yet; answering now and following its start") > 0
		})
		status, body, took, err := f.putStart(time.Minute)
		if err != nil || status != 202 || !strings.Contains(body, "started") {
			t.Fatalf("the retried start: %d %s %v", status, body, err)
		}
		t.Logf("retry answered after %v", took.Round(time.Millisecond))
		f.servesAtOnce("right after the retry's 202")
	})
}
