//go:build bench

package promex

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/haproxy/stats/haproxytest"
)

const (
	benchListeners = 50
	benchMembers   = 200 // per listener's pool
	benchRuns      = 15
	benchPyRuns    = 1
)

// make bench's scrape figures: what translating HAProxy's exporter page
// costs for a load balancer of 50 listeners × 200 members, next to what
// HAProxy itself takes to export that page, and upstream's Python
// translation of it. Figures only; written to $AMPHORA_BENCH_OUT/metrics.txt.
func TestBenchScrape(t *testing.T) {
	out := os.Getenv("AMPHORA_BENCH_OUT")
	if out == "" {
		t.Skip("AMPHORA_BENCH_OUT is not set (make bench sets it)")
	}
	haproxytest.Binary(t)
	exporter := haproxytest.FreePort(t)
	p := haproxytest.Start(t, haproxytest.Options{Config: benchConfig(exporter)})
	defer p.Stop()
	addr := fmt.Sprintf("127.0.0.1:%d", exporter)

	// HAProxy's time: request sent → last byte of the page, on loopback;
	// and the CPU its worker spent on those exports.
	worker := childOf(t, p.Pid())
	var page []byte
	hapCPU0 := procCPU(t, worker)
	hap := median(benchRuns, func() { page = fetchPage(t, addr) })
	hapCPU := (procCPU(t, worker) - hapCPU0) / benchRuns
	if n := bytes.Count(page, []byte("haproxy_server_weight{")); n != benchListeners*benchMembers {
		t.Fatalf("the page has %d members, want %d", n, benchListeners*benchMembers)
	}

	// The translation alone, from memory to nowhere, with a translator
	// reused as the server reuses them.
	var tr Translator
	var translated countingWriter
	tr.Translate(&translated, bytes.NewReader(page))
	ownCPU0 := selfCPU()
	trans := median(benchRuns, func() {
		if err := tr.Translate(io.Discard, bytes.NewReader(page)); err != nil {
			t.Fatal(err)
		}
	})
	transCPU := (selfCPU() - ownCPU0) / benchRuns
	// A scrape as the agent serves it: the page translated while HAProxy
	// sends it.
	streamed := median(benchRuns, func() {
		if err := streamPage(addr, &tr); err != nil {
			t.Fatal(err)
		}
	})

	// What one translation allocates: it does not grow with the page.
	allocs := testing.AllocsPerRun(5, func() { tr.Translate(io.Discard, bytes.NewReader(page)) })
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	tr.Translate(io.Discard, bytes.NewReader(page))
	runtime.ReadMemStats(&after)
	var fresh Translator
	var fb, fa runtime.MemStats
	runtime.ReadMemStats(&fb)
	fresh.Translate(io.Discard, bytes.NewReader(page))
	runtime.ReadMemStats(&fa)

	py := "n/a (python3-octavia not installed)"
	pyRatio := ""
	pagePath := filepath.Join(out, "haproxy-page.txt")
	if err := os.WriteFile(pagePath, page, 0o644); err != nil {
		t.Fatal(err)
	}
	if o, err := exec.Command("/usr/bin/python3", "testdata/upstream_translate.py", "--time", strconv.Itoa(benchPyRuns), pagePath).Output(); err == nil {
		if s, err := strconv.ParseFloat(strings.TrimSpace(string(o)), 64); err == nil {
			d := time.Duration(s * float64(time.Second))
			py = fmtDuration(d)
			pyRatio = fmt.Sprintf(" (%.0fx the agent's)", float64(d)/float64(trans))
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "PROMETHEUS listener scrape, %d listeners × %d members: HAProxy's page %.1f MiB (%d lines) → Octavia's %.1f MiB\n",
		benchListeners, benchMembers, float64(len(page))/(1<<20), bytes.Count(page, []byte("\n")), float64(translated.n)/(1<<20))
	fmt.Fprintf(&b, "  HAProxy's exporter, request → last byte (median of %d)   %s\n", benchRuns, fmtDuration(hap))
	fmt.Fprintf(&b, "  agent's translation of that page (median of %d)          %s  = %.2fx HAProxy's time\n", benchRuns, fmtDuration(trans), float64(trans)/float64(hap))
	fmt.Fprintf(&b, "  CPU time per scrape: HAProxy's exporter %s, the agent's translation %s  = %.2fx\n",
		fmtDuration(hapCPU), fmtDuration(transCPU), float64(transCPU)/float64(hapCPU))
	fmt.Fprintf(&b, "  HAProxy's page translated as it arrives (median of %d)     %s  = %.2fx HAProxy's time\n", benchRuns, fmtDuration(streamed), float64(streamed)/float64(hap))
	fmt.Fprintf(&b, "  allocated per translation: %.0f allocs, %.1f KiB (%.1f KiB with a new translator)\n",
		allocs, float64(after.TotalAlloc-before.TotalAlloc)/1024, float64(fa.TotalAlloc-fb.TotalAlloc)/1024)
	fmt.Fprintf(&b, "  upstream prometheus-proxy's translation (Python, median of %d)  %s%s\n", benchPyRuns, py, pyRatio)
	if err := os.WriteFile(filepath.Join(out, "metrics.txt"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
}

// benchConfig: the shape Octavia renders, listeners with a pool each, no
// health checks (nothing to reach), and the exporter's frontend.
func benchConfig(exporter int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "global\n    maxconn 100\n\ndefaults\n    mode http\n    timeout connect 5s\n    timeout client 50s\n    timeout server 50s\n\n")
	fmt.Fprintf(&b, "frontend prometheus-exporter-internal-endpoint\n    bind 127.0.0.1:%d\n    http-request use-service prometheus-exporter if { path /metrics }\n    http-request reject\n\n", exporter)
	id := func(kind, n int) string { return fmt.Sprintf("%08x-0000-4000-8000-%012x", kind, n) }
	for l := 0; l < benchListeners; l++ {
		listener, pool := id(1, l), id(2, l)
		fmt.Fprintf(&b, "frontend %s\n    maxconn 10\n    bind 127.0.0.1:%d\n    default_backend %s:%s\n\n", listener, 20000+l, pool, listener)
		fmt.Fprintf(&b, "backend %s:%s\n    balance roundrobin\n", pool, listener)
		for m := 0; m < benchMembers; m++ {
			fmt.Fprintf(&b, "    server %s 127.0.0.1:%d weight 1\n", id(3, l*benchMembers+m), 30000+m)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// streamPage translates the exporter's page as it is read, as the agent's
// endpoint does.
func streamPage(addr string, tr *Translator) error {
	c, body, err := openPage(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	return tr.Translate(io.Discard, body)
}

// childOf finds the one child of pid (the master's worker).
func childOf(t *testing.T, pid int) int {
	t.Helper()
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		child, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		if f := statFields(stat); len(f) > 2 && f[1] == strconv.Itoa(pid) {
			return child
		}
	}
	t.Fatalf("no worker under HAProxy master %d", pid)
	return 0
}

// statFields: /proc/<pid>/stat after the command name, from field 3 on.
func statFields(stat []byte) []string {
	i := bytes.LastIndexByte(stat, ')')
	return strings.Fields(string(stat[i+1:]))
}

// procCPU is the user and system time pid has used (clock ticks of 10 ms).
func procCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := statFields(stat)
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// selfCPU is the user and system time of this process.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func median(runs int, f func()) time.Duration {
	took := make([]time.Duration, runs)
	for i := range took {
		start := time.Now()
		f()
		took[i] = time.Since(start)
	}
	slices.Sort(took)
	return took[runs/2]
}

func fmtDuration(d time.Duration) string {
	if d >= time.Second {
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}

type countingWriter struct{ n int }

func (c *countingWriter) Write(p []byte) (int, error) { c.n += len(p); return len(p), nil }
