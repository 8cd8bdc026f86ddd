//go:build vm

package vm_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/certs/devpki"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/ctrlutil"
)

// powerCycles is how many times the power-loss test pulls the plug:
// AMPHORA_VM_POWER_CYCLES, default 2 (each costs a boot, over a minute
// under TCG, and make test's budget is spent on the VM and cloud tiers
// side by side); the requirement's 10 is an opt-in run.
func powerCycles(t *testing.T) int {
	if s := os.Getenv("AMPHORA_VM_POWER_CYCLES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 50 {
			t.Fatalf("AMPHORA_VM_POWER_CYCLES=%q: want 1 to 50", s)
		}
		return n
	}
	return 2
}

// storedFile is one file the upload loop replaces, with the digests of
// the last version the agent acknowledged and of the one in flight.
type storedFile struct {
	path     string
	put      func(i int) (method, url string, body []byte)
	acked    string
	inflight string
}

func sum(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }

// digestIn is the sha256 of a file in the VM, or "missing".
func digestIn(a *amphora, path string) string {
	out := strings.TrimSpace(a.MustExec("sha256sum " + path + " 2>/dev/null | cut -d' ' -f1 || true"))
	if out == "" {
		return "missing"
	}
	return out
}

// testPowerLoss pulls the VM's plug (QEMU quit) in the middle of a loop of
// HAProxy config, certificate and agent config uploads, then powers it on:
// every stored file must be the last acknowledged version or the one in
// flight, never empty, torn or older, and the load balancer must serve
// again with no controller call. Certificates live on a RAM file system
// (as upstream's certs-ramfs), so after a power loss they may only be
// gone, not torn.
func testPowerLoss(t *testing.T, a *amphora, n *vmNet) {
	cycles := powerCycles(t)
	ca, err := devpki.NewAuthority("power-loss CA")
	if err != nil {
		t.Fatal(err)
	}
	var pems [][]byte
	for i := range 4 {
		c, err := ca.Server(fmt.Sprintf("pl-%d.example.org", i))
		if err != nil {
			t.Fatal(err)
		}
		pems = append(pems, c.Combined())
	}
	status, _, hapCfg := a.env.Do("GET", "/1.0/loadbalancer/"+ctrlutil.HAPLB+"/haproxy", nil)
	if status != 200 {
		t.Fatalf("GET haproxy config: %d %s", status, hapCfg)
	}
	agentCfg := []byte(a.MustExec("cat /etc/octavia/amphora-agent.conf"))
	certDir := "/var/lib/octavia/certs/" + ctrlutil.HAPLB
	ramCerts := strings.Contains(a.MustExec("findmnt -n -o FSTYPE --target /var/lib/octavia/certs || true"), "tmpfs")

	version := func(base []byte, i int) []byte {
		return append(bytes.Clone(base), fmt.Sprintf("\n# power-loss upload %d\n", i)...)
	}
	files := []*storedFile{
		{path: "/var/lib/octavia/" + ctrlutil.HAPLB + "/haproxy.cfg", put: func(i int) (string, string, []byte) {
			return "PUT", "/1.0/loadbalancer/" + a.env.AmphoraID + "/" + ctrlutil.HAPLB + "/haproxy", version(hapCfg, i)
		}},
		{path: certDir + "/power-loss.pem", put: func(i int) (string, string, []byte) {
			return "PUT", "/1.0/loadbalancer/" + ctrlutil.HAPLB + "/certificates/power-loss.pem", pems[i%len(pems)]
		}},
		{path: "/etc/octavia/amphora-agent.conf", put: func(i int) (string, string, []byte) {
			return "PUT", "/1.0/config", version(agentCfg, i)
		}},
	}
	for _, f := range files {
		f.acked = digestIn(a, f.path)
	}

	start := time.Now()
	for cycle := range cycles {
		var (
			mu       sync.Mutex
			acked    int
			failure  string
			poweroff bool
		)
		// Cut after a different number of acknowledged uploads each cycle
		// (so each kind is in flight in turn), at once or a little later.
		want := 3 + cycle%6
		done, reached := make(chan struct{}), make(chan struct{})
		client := a.env.Client()
		// Bounded: at most 300 uploads a cycle; the power goes long before.
		go func() {
			defer close(done)
			for i := range 300 {
				f := files[i%len(files)]
				method, path, body := f.put(cycle*1000 + i)
				mu.Lock()
				f.inflight = sum(body)
				mu.Unlock()
				req, _ := http.NewRequest(method, a.env.URL(path), bytes.NewReader(body))
				resp, err := client.Do(req)
				if err != nil {
					return // the power went
				}
				msg, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				mu.Lock()
				if resp.StatusCode/100 != 2 {
					if !poweroff {
						failure = fmt.Sprintf("%s %s: %d %s", method, path, resp.StatusCode, msg)
					}
					mu.Unlock()
					return
				}
				f.acked, f.inflight = f.inflight, ""
				acked++
				if acked == want {
					close(reached)
				}
				mu.Unlock()
			}
		}()
		select {
		case <-reached:
		case <-done:
		case <-time.After(2 * time.Minute):
			t.Fatalf("cycle %d: not %d acknowledged uploads within 2 minutes", cycle, want)
		}
		<-time.After(time.Duration(cycle%2*(cycle*37%150)) * time.Millisecond)
		mu.Lock()
		poweroff = true
		mu.Unlock()
		a.PowerOff()
		<-done
		if failure != "" {
			t.Fatalf("cycle %d: upload refused before the power went: %s", cycle, failure)
		}
		var inFlight []string
		for _, f := range files {
			if f.inflight != "" {
				inFlight = append(inFlight, f.path)
			}
		}

		off := time.Now()
		a.PowerOn()
		a.WaitGuest(vmBootWait)
		a.waitActive(vmBootWait)
		booted := time.Since(off)
		for _, f := range files {
			got := digestIn(a, f.path)
			ok := got == f.acked || (f.inflight != "" && got == f.inflight)
			if ramCerts && strings.HasPrefix(f.path, certDir) {
				ok = got == "missing"
			}
			if !ok {
				t.Fatalf("cycle %d: %s after the power loss has digest %s, want the acknowledged %s or the in-flight %q\n%s",
					cycle, f.path, got, f.acked, f.inflight, a.MustExec("ls -la "+f.path+"; head -c 300 "+f.path+" | od -c | head"))
			}
			// What is on disk now is what the next cycle must keep.
			f.acked, f.inflight = got, ""
		}
		// No controller call since the power-on: HAProxy is back from the
		// stored files alone.
		waitServed(t, n, time.Minute)
		t.Logf("cycle %d: %d uploads acknowledged, power cut during %v; agent active %v after power-on, files intact, VIP serves",
			cycle, acked, inFlight, booted.Round(time.Second))
	}
	t.Logf("%d power cuts in %v", cycles, time.Since(start).Round(time.Second))
}
