//go:build system

package system_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
)

// Mutations queue behind each other for as long as their client waits,
// as upstream's single worker has them: two uploads whose `haproxy -c`
// each takes about 24 s (a lua-load script that sleeps) hold the lock,
// and an upload queued behind both waits about 48 s, past the 45 s
// handler budget that used to answer it 500 "Agent busy".
func TestMutationQueuesPastTheBudget(t *testing.T) {
	f := newLBFixture(t)
	f.startServing()

	// The check runs as an unprivileged user: the script's folder must be
	// open to it, and the marker folder writable.
	dir := openToAll(t)
	const checkSleep = 24
	slow := func(gen int) string {
		script := filepath.Join(dir, fmt.Sprintf("slow-%d.lua", gen))
		marker := filepath.Join(dir, fmt.Sprintf("checking-%d", gen))
		lua := fmt.Sprintf("os.execute(\"touch %s; sleep %d\")\n", marker, checkSleep)
		if err := os.WriteFile(script, []byte(lua), 0o644); err != nil {
			t.Fatal(err)
		}
		return strings.Replace(f.config(gen), "    daemon\n", "    daemon\n    lua-load "+script+"\n", 1)
	}
	type answer struct {
		status int
		body   string
		took   time.Duration
	}
	client := &http.Client{
		Timeout:   3 * time.Minute,
		Transport: &http.Transport{TLSClientConfig: f.env.ClientTLS(), DisableKeepAlives: true},
	}
	put := func(cfg string) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			start := time.Now()
			req, _ := http.NewRequest("PUT", f.env.URL("/1.0/loadbalancer/"+f.env.AmphoraID+"/"+testLB+"/haproxy"), strings.NewReader(cfg))
			resp, err := client.Do(req)
			if err != nil {
				ch <- answer{body: err.Error(), took: time.Since(start)}
				return
			}
			buf := make([]byte, 4096)
			n, _ := resp.Body.Read(buf)
			resp.Body.Close()
			ch <- answer{status: resp.StatusCode, body: string(buf[:n]), took: time.Since(start)}
		}()
		return ch
	}
	queued := func(n int) {
		testenv.WaitFor(t, 30*time.Second, fmt.Sprintf("%d requests queued", n), func() bool {
			return f.env.Count("request queued behind a change in progress") >= n
		})
	}

	first := put(slow(2))
	testenv.WaitFor(t, 30*time.Second, "the first upload's check to run", func() bool {
		_, err := os.Stat(filepath.Join(dir, "checking-2"))
		return err == nil
	})
	second := put(slow(3))
	queued(1)
	third := put(f.config(4))
	queued(2)

	for i, ch := range []<-chan answer{first, second, third} {
		a := <-ch
		t.Logf("upload %d: %d after %v", i+1, a.status, a.took.Round(time.Second))
		if a.status != 202 {
			t.Fatalf("upload %d: %d %s\nagent output:\n%s", i+1, a.status, a.body, f.env.Output())
		}
		if i == 2 && a.took < 45*time.Second {
			t.Fatalf("the last upload waited only %v: it did not queue behind both slow checks", a.took)
		}
	}
	if status, body := f.action("reload"); status != 202 {
		t.Fatalf("reload: %d %s", status, body)
	}
	f.waitServing("the queued upload's config served", "4")
}
