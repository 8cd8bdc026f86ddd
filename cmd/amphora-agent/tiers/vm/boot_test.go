//go:build vm

package vm_test

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/health"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/ctrlutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/vm"
)

// bootImage is one image the boot bench powers on: ours as bake.sh makes
// it, or build.sh's upstream-agent variant (Debian's octavia-agent).
type bootImage struct {
	name, unit string
	img        vm.Image
}

// bootRun is what one power-on measured.
type bootRun struct {
	api, heartbeat time.Duration // from power-on
	loader         time.Duration // power-on to the kernel's start: firmware and boot loader
	memAvailKiB    int           // /proc/meminfo once cloud-init is done
	agentRSSKiB    int           // the agent unit's processes
	haproxyRSSKiB  int           // HAProxy's processes (with 50 listeners)
	analyze        string        // systemd-analyze: firmware, kernel, userspace
}

// moreListeners is how many HTTP listeners the bench adds to the first
// one for the memory figure "under a load balancer with 50 listeners".
const moreListeners = 49

// TestVMBootToReady is a bench, not a check (make bench-boot): it powers
// on our image and the Python agent's image AMPHORA_BOOT_RUNS times each,
// in turns so that a change in the host's load falls on both, with the
// config drive Octavia's ComputeCreate makes, and prints the time from
// power-on until the agent's API answers the controller and until the
// first heartbeat arrives (the moments Octavia's worker and health manager
// see), the guest's MemAvailable once cloud-init is done, the agent's
// resident memory, and systemd-analyze's view of the last boot. The last
// boot of each image then serves a load balancer of 50 HTTP listeners
// rendered by Octavia's own driver, and the same memory figures are taken
// again. Nothing here is asserted beyond the image doing its job.
func TestVMBootToReady(t *testing.T) {
	runs, _ := strconv.Atoi(os.Getenv("AMPHORA_BOOT_RUNS"))
	if runs <= 0 {
		t.Skip("AMPHORA_BOOT_RUNS is not set (make bench-boot sets it)")
	}
	path := os.Getenv("AMPHORA_IMAGE")
	if path == "" {
		t.Fatal("AMPHORA_IMAGE is not set (make bench-boot bakes the image and sets it)")
	}
	ctrlutil.RequireOctavia(t)
	images := []bootImage{
		{name: "ours", unit: "amphora-agent.service", img: vm.Baked(t, path)},
		{name: "upstream", unit: "octavia-agent.service", img: vm.BuildImageVariant(t, "upstream-agent")},
	}
	results := map[string][]bootRun{}
	chains, loaded := map[string]string{}, map[string]bootRun{}
	for i := range runs {
		for _, b := range images {
			last := i == runs-1
			t.Run(fmt.Sprintf("%s-%d", b.name, i+1), func(t *testing.T) {
				r, chain, lb := bootOnce(t, b, last)
				results[b.name] = append(results[b.name], r)
				if last {
					chains[b.name], loaded[b.name] = chain, lb
				}
			})
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "boot to ready, Debian %s, %d MiB guests, QEMU %s, median of %d (each run in brackets):\n",
		vm.Suite(), vm.MemoryMB(), vm.Accel(images[0].img), runs)
	row := func(label string, f func(bootRun) string) {
		fmt.Fprintf(&out, "  %-34s", label)
		for _, b := range images {
			rs := results[b.name]
			vals := make([]string, len(rs))
			for j, r := range rs {
				vals[j] = f(r)
			}
			fmt.Fprintf(&out, " %-10s %-28s", b.name+":", medianOf(vals)+" ["+strings.Join(vals, " ")+"]")
		}
		out.WriteString("\n")
	}
	secs := func(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }
	mib := func(kib int) string { return fmt.Sprintf("%dMiB", kib/1024) }
	row("power-on → kernel (BIOS, GRUB)", func(r bootRun) string { return secs(r.loader) })
	row("power-on → API answers", func(r bootRun) string { return secs(r.api) })
	row("power-on → first heartbeat", func(r bootRun) string { return secs(r.heartbeat) })
	row("MemAvailable after boot", func(r bootRun) string { return mib(r.memAvailKiB) })
	row("agent resident (its unit)", func(r bootRun) string { return mib(r.agentRSSKiB) })
	fmt.Fprintf(&out, "  with 50 HTTP listeners (last run):")
	for _, b := range images {
		fmt.Fprintf(&out, "  %s: MemAvailable %s, agent %s, HAProxy %s;", b.name,
			mib(loaded[b.name].memAvailKiB), mib(loaded[b.name].agentRSSKiB), mib(loaded[b.name].haproxyRSSKiB))
	}
	out.WriteString("\n")
	for _, b := range images {
		if rs := results[b.name]; len(rs) > 0 { // a failed boot has none
			fmt.Fprintf(&out, "%s, last run: %s\n%s\n", b.name, strings.TrimSpace(rs[len(rs)-1].analyze), chains[b.name])
		}
	}
	t.Logf("\n%s", out.String())
}

// medianOf is the middle value of figures that share a unit suffix
// ("12.3s", "410MiB").
func medianOf(vals []string) string {
	type fig struct {
		v float64
		s string
	}
	figs := make([]fig, 0, len(vals))
	for _, s := range vals {
		v, _ := strconv.ParseFloat(strings.TrimRight(s, "sMiB"), 64)
		figs = append(figs, fig{v, s})
	}
	slices.SortFunc(figs, func(a, b fig) int { return cmp.Compare(a.v, b.v) })
	if len(figs) == 0 {
		return "-"
	}
	return figs[len(figs)/2].s
}

// bootOnce powers on one amphora of b and measures it; with loaded it
// then serves 50 listeners and measures memory again.
func bootOnce(t *testing.T, b bootImage, loaded bool) (bootRun, string, bootRun) {
	img := b.img
	a := createAmphora(t, "amp-boot-"+b.name, "SINGLE", vmCreate{Timezone: "UTC", Image: &img})
	var r bootRun
	apiDone, hbDone := make(chan time.Duration, 1), make(chan time.Duration, 1)
	go func() { apiDone <- waitAPI(a, vmBootWait) }()
	go func() {
		if a.hb.Next(a.started.Add(vmBootWait)) == nil {
			hbDone <- 0
			return
		}
		hbDone <- time.Since(a.started)
	}()
	r.api, r.heartbeat = <-apiDone, <-hbDone
	if r.api == 0 || r.heartbeat == 0 {
		a.WaitGuest(time.Minute)
		_, out, _ := a.Exec(t.Context(), "systemctl --failed --no-pager; journalctl -b --no-pager -u "+b.unit+" | tail -30")
		t.Fatalf("%s: API after %v, first heartbeat after %v (0: none within %v)\n%s", b.name, r.api, r.heartbeat, vmBootWait, out)
	}
	t.Logf("%s: API answers %.1fs after power-on, first heartbeat %.1fs", b.name, r.api.Seconds(), r.heartbeat.Seconds())
	a.WaitGuest(vmBootWait)
	// The guest's uptime counts from the kernel's start: the rest of the
	// time since power-on went to the firmware and the boot loader (less
	// the guest agent's round trip, a fraction of a second).
	asked := time.Now()
	up, err := strconv.ParseFloat(strings.Fields(a.MustExec("cat /proc/uptime"))[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	r.loader = asked.Sub(a.started) - time.Duration(up*float64(time.Second))
	a.WaitFor(vmBootWait, "cloud-init's final stage done", `[ -e /var/lib/cloud/instance/boot-finished ]`)
	// systemd-analyze answers once the boot's jobs are all done.
	r.analyze = a.WaitFor(vmBootWait, "the boot finished", "systemd-analyze 2>/dev/null | head -n1 | grep .")
	chain := a.MustExec("systemd-analyze critical-chain --no-pager " + b.unit + " 2>&1 | tail -n +2; " +
		"echo; echo \"initramfs $(du -h /boot/initrd.img-* | cut -f1), units enabled: $(systemctl list-unit-files --state=enabled --no-legend | wc -l)\"; " +
		"echo; journalctl -b -o short-monotonic --no-pager -u " + b.unit + " | cut -c1-160 | head -n 12")
	r.memAvailKiB, r.agentRSSKiB = guestMemory(t, a, b.unit)
	if !loaded {
		return r, chain, bootRun{}
	}

	n := newDataPlane(t)
	n.attach(t, a, "SINGLE", "203.0.113.4", "198.51.100.20")
	// 100 connections each: 5,000 in all, as an operator's modest listeners.
	ctl := lbController(t, a, "--more-listeners", strconv.Itoa(moreListeners), "--connection-limit", "100")
	ctl.Run("create", nil)
	ctl.Run("start", nil)
	waitServed(t, n, 2*time.Minute)
	a.hb.WaitFor(3*time.Minute, vmKey, "50 listeners", func(m health.Message) bool { return len(m.Listeners) == moreListeners+1 })
	var lb bootRun
	lb.memAvailKiB, lb.agentRSSKiB = guestMemory(t, a, b.unit)
	lb.haproxyRSSKiB, _ = strconv.Atoi(strings.TrimSpace(a.MustExec(`ps -C haproxy -o rss= | awk '{s+=$1} END {print s+0}'`)))
	return r, chain, lb
}

// waitAPI polls the agent's API as the controller's driver does (its
// root, mutual TLS) and returns how long after power-on it first
// answered 200, 0 if not within timeout.
func waitAPI(a *amphora, timeout time.Duration) time.Duration {
	c := a.env.Client()
	c.Timeout = 3 * time.Second
	for time.Since(a.started) < timeout {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.env.URL("/"), nil)
		resp, err := c.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(a.started)
			}
		}
		time.Sleep(250 * time.Millisecond) // the poll's pace, as the driver's retry interval
	}
	return 0
}

// guestMemory is the guest's MemAvailable and the resident memory of the
// processes in unit's cgroup but HAProxy and keepalived, in KiB: this
// agent supervises them in its own cgroup, the Python agent in units of
// their own, and the figure is the agent's alone either way.
func guestMemory(t *testing.T, a *amphora, unit string) (memAvail, rss int) {
	t.Helper()
	out := a.MustExec(`awk '/^MemAvailable:/ {print $2}' /proc/meminfo; ` +
		`cg=$(systemctl show -P ControlGroup ` + unit + `); ` +
		`ps -o comm=,rss= -p "$(tr '\n' , </sys/fs/cgroup$cg/cgroup.procs | sed 's/,$//')" | ` +
		`awk '$1 != "haproxy" && $1 != "keepalived" {s+=$2} END {print s+0}'`)
	f := strings.Fields(out)
	if len(f) != 2 {
		t.Fatalf("memory figures: %q", out)
	}
	memAvail, _ = strconv.Atoi(f[0])
	rss, _ = strconv.Atoi(f[1])
	return memAvail, rss
}
