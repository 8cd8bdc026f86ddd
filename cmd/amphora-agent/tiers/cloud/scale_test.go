//go:build cloud

package cloud_test

import (
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/cloud"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/vm"
)

// What one amphora VM costs the host beyond its guest memory: QEMU's TCG
// translation cache (up to 1 GiB by QEMU's default) and device model.
// Six VMs that had booted and served a listener held 1687-1695 MiB each
// here, 920 MiB beyond their guest memory; and what the control plane
// (950 MiB measured), the test and the host keep for themselves.
const (
	scaleVMOverheadMiB = 1000
	scaleReserveMiB    = 4096
)

// scaleVMsPerCore is how many amphora VMs booting at once one host core
// carries under TCG. Memory is not what binds here: 15 VMs fit this
// machine's 24 GiB, but 15 booted at once on two cores were still in
// early boot after 10 minutes (systemd-networkd's start job at 8 of its
// 9.5 minutes, no agent reachable, load average 17), far past what the
// worker waits for an agent.
const scaleVMsPerCore = 3

// TestCloudScale creates as many SINGLE load balancers as this machine's
// memory holds, all in one go, each with an HTTP listener: every one
// ACTIVE and ONLINE, each listener answered by HAProxy through its VIP,
// and the health manager's amphora_health rows fresh for every amphora
// while they all run. CLOUD_SCALE=N asks for N load balancers;
// CLOUD_SCALE=max for what the machine holds: the smaller of what its
// memory fits (MemAvailable less a reserve, over what one VM costs) and
// what its cores boot at once under TCG. Opt-in: the boots take many
// minutes on two cores.
func TestCloudScale(t *testing.T) {
	want := os.Getenv("CLOUD_SCALE")
	if want == "" {
		t.Skip("set CLOUD_SCALE=N or CLOUD_SCALE=max to run (N amphora VMs at once)")
	}
	boot := amphoraVMs(t)
	perVM := boot.MemoryMB
	if perVM == 0 {
		perVM = vm.MemoryMB()
	}
	perVM += scaleVMOverheadMiB
	avail := memAvailableMiB(t)
	memFits := (avail - scaleReserveMiB) / perVM
	cpuFits := runtime.NumCPU() * scaleVMsPerCore
	fits := min(memFits, cpuFits)
	t.Logf("memory: %d MiB available, %d MiB kept for the control plane and the host, %d MiB per amphora VM "+
		"(%d MiB guest + %d MiB QEMU/TCG) → %d VMs fit; CPU: %d cores × %d VMs booting at once under TCG → %d; "+
		"so %d", avail, scaleReserveMiB, perVM, perVM-scaleVMOverheadMiB, scaleVMOverheadMiB, memFits,
		runtime.NumCPU(), scaleVMsPerCore, cpuFits, fits)
	n := fits
	if want != "max" {
		var err error
		if n, err = strconv.Atoi(want); err != nil || n < 1 {
			t.Fatalf("CLOUD_SCALE=%q: want a count or max", want)
		}
		if n > fits {
			t.Fatalf("CLOUD_SCALE=%d: only %d amphora VMs fit this machine (memory %d, cores %d)", n, fits, memFits, cpuFits)
		}
	}

	cp := cloud.Start(t, cloud.Options{VMs: boot})
	s := newScene(cp)
	created := time.Now()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = createLB(t, cp, fmt.Sprintf("lb-scale-%d", i))
	}
	t.Logf("%d creates sent in %.1fs", n, time.Since(created).Seconds())
	active := waitAllLBs(t, cp, ids, "ACTIVE", time.Duration(n)*4*time.Minute+10*time.Minute)
	var took []float64
	for _, id := range ids {
		took = append(took, active[id].Sub(created).Seconds())
	}
	slices.Sort(took)
	t.Logf("%d load balancers ACTIVE: first after %.0fs, median %.0fs, last %.0fs", n, took[0], took[n/2], took[n-1])

	lbs := map[string]apiLB{}
	listened := time.Now()
	for i, id := range ids {
		lbs[id] = waitLB(t, cp, id, "ACTIVE", time.Minute)
		s.cli(t, "loadbalancer", "listener", "create", "--name", fmt.Sprintf("l-scale-%d", i), "--protocol", "HTTP",
			"--protocol-port", "80", id)
	}
	waitAllLBs(t, cp, ids, "ACTIVE", time.Duration(n)*time.Minute+5*time.Minute)
	t.Logf("%d listeners (one per load balancer, created at once) → all ACTIVE in %.0fs", n, time.Since(listened).Seconds())

	// No pool: HAProxy itself answers 503 on each VIP, which shows the
	// listener runs on the load balancer's own amphora.
	client := cp.NS.HTTPClient(false)
	for _, id := range ids {
		vip := lbs[id].VIPAddress
		cloud.WaitFor(t, 2*time.Minute, "HAProxy answering on "+vip, func() bool {
			resp, err := client.Get("http://" + vip + "/")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusServiceUnavailable
		})
	}
	for _, id := range ids {
		if lb := waitLB(t, cp, id, "ACTIVE", time.Minute); lb.OperatingStatus != "ONLINE" {
			t.Errorf("load balancer %s is %s, want ONLINE", id, lb.OperatingStatus)
		}
	}

	var amps []apiAmphora
	for _, id := range ids {
		a := amphoraeOf(t, s, id)
		if len(a) != 1 {
			t.Fatalf("load balancer %s has %d amphorae, want 1", id, len(a))
		}
		amps = append(amps, a[0])
	}
	checkScaleHeartbeats(t, cp, amps)
	logScaleMemory(t, cp, amps)

	deleted := time.Now()
	for _, id := range ids {
		s.rest(t, "DELETE", "/v2/lbaas/loadbalancers/"+id+"?cascade=true", nil, nil)
	}
	waitAllLBs(t, cp, ids, "DELETED", time.Duration(n)*time.Minute+5*time.Minute)
	t.Logf("%d cascade deletes → all gone in %.0fs", n, time.Since(deleted).Seconds())
	if v := len(cp.VMs()); v != 0 {
		t.Errorf("%d VMs left after the deletes", v)
	}
}

// waitAllLBs polls every load balancer until each is in state want (or
// gone, for "DELETED") and returns when each got there; one in ERROR
// fails the test.
func waitAllLBs(t *testing.T, cp *cloud.ControlPlane, ids []string, want string, timeout time.Duration) map[string]time.Time {
	t.Helper()
	reached := map[string]time.Time{}
	deadline := time.Now().Add(timeout)
	for len(reached) < len(ids) {
		var got struct {
			LBs []apiLB `json:"loadbalancers"`
		}
		if _, err := cp.API("GET", "/v2/lbaas/loadbalancers", cloudProject, nil, &got); err != nil {
			t.Logf("listing load balancers: %v", err)
		}
		status := map[string]string{}
		for _, lb := range got.LBs {
			status[lb.ID] = lb.ProvisioningStatus
		}
		now := time.Now()
		for _, id := range ids {
			st, listed := status[id]
			if _, done := reached[id]; done {
				continue
			}
			if st == "ERROR" {
				t.Fatalf("load balancer %s went to ERROR waiting for %s", id, want)
			}
			if st == want || (want == "DELETED" && !listed && got.LBs != nil) {
				reached[id] = now
			}
		}
		if now.After(deadline) {
			t.Fatalf("%d of %d load balancers %s within %v: %v", len(reached), len(ids), want, timeout, status)
		}
		time.Sleep(2 * time.Second)
	}
	return reached
}

// checkScaleHeartbeats reads amphora_health four times over a minute
// while every amphora runs: each row must be fresh each time. It prints
// each amphora's oldest age and the spread.
func checkScaleHeartbeats(t *testing.T, cp *cloud.ControlPlane, amps []apiAmphora) {
	t.Helper()
	oldest := map[string]int{}
	for round := range 4 {
		if round > 0 {
			time.Sleep(15 * time.Second) // the ages are sampled over a minute, not waited for
		}
		rows := heartbeatRows(t, cp)
		for _, a := range amps {
			b, ok := rows[a.ID]
			if !ok {
				t.Errorf("round %d: amphora %s has no amphora_health row", round, a.ID)
				continue
			}
			oldest[a.ID] = max(oldest[a.ID], b.age)
		}
	}
	var ages []int
	var lines []string
	for _, a := range amps {
		ages = append(ages, oldest[a.ID])
		lines = append(lines, fmt.Sprintf("%s %ds", a.ID[:8], oldest[a.ID]))
		if age := time.Duration(oldest[a.ID]) * time.Second; age > heartbeatFresh {
			t.Errorf("amphora %s: heartbeat row %v old, want under %v", a.ID, age, heartbeatFresh)
		}
	}
	slices.Sort(ages)
	t.Logf("amphora_health over a minute, oldest age per amphora: %s (median %ds, worst %ds)",
		strings.Join(lines, ", "), ages[len(ages)/2], ages[len(ages)-1])
}

// logScaleMemory prints what the VMs take from the host and what the
// agent takes in each.
func logScaleMemory(t *testing.T, cp *cloud.ControlPlane, amps []apiAmphora) {
	t.Helper()
	vms := cp.VMs()
	var hostMiB, agentKiB []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, a := range amps {
		v := vms[a.ComputeID]
		if v == nil {
			continue
		}
		hostMiB = append(hostMiB, v.HostRSSKiB()/1024)
		wg.Go(func() {
			out := v.MustExec("ps -o rss= -C amphora-agent")
			if kib, err := strconv.Atoi(strings.TrimSpace(out)); err == nil {
				mu.Lock()
				agentKiB = append(agentKiB, kib)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(hostMiB)
	slices.Sort(agentKiB)
	if len(hostMiB) == 0 || len(agentKiB) == 0 {
		t.Fatalf("no memory figures: %d VMs, %d agents", len(hostMiB), len(agentKiB))
	}
	t.Logf("QEMU RSS per VM: median %d MiB, largest %d MiB; the agent's RSS: median %.1f MiB, largest %.1f MiB; "+
		"host MemAvailable now %d MiB", hostMiB[len(hostMiB)/2], hostMiB[len(hostMiB)-1],
		float64(agentKiB[len(agentKiB)/2])/1024, float64(agentKiB[len(agentKiB)-1])/1024, memAvailableMiB(t))
	t.Logf("control plane memory:\n%s", strings.Join(cp.Memory(), "\n"))
}

// memAvailableMiB is the host's MemAvailable.
func memAvailableMiB(t *testing.T) int {
	t.Helper()
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemAvailable:" {
			kib, _ := strconv.Atoi(f[1])
			return kib / 1024
		}
	}
	t.Fatal("no MemAvailable in /proc/meminfo")
	return 0
}
