package health

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/haproxy"
	"github.com/amphora-agent/amphora-agent/haproxy/stats/haproxytest"
)

// BenchmarkHeartbeatCycle is one whole heartbeat cycle of the sender (LB
// listing, pid check, `show stat` from a real HAProxy, message, zlib,
// HMAC, counter file, send) for 1 LB × 10 listeners × 250 members (make
// bench; skipped without haproxy). Member ids are random-looking UUIDs.
func BenchmarkHeartbeatCycle(b *testing.B) { benchmarkCycle(b, 0) }

// BenchmarkHeartbeatCycleSpaced is BenchmarkHeartbeatCycle with a cycle
// every 50 ms instead of back to back: between heartbeats the running
// agent is idle, and what the Go runtime does when it wakes from idle
// (its sysmon thread, handing work between threads) is part of a
// heartbeat's cost that back-to-back cycles hide.
func BenchmarkHeartbeatCycleSpaced(b *testing.B) { benchmarkCycle(b, 50*time.Millisecond) }

// benchmarkCycle runs cycles back to back, or one every spacing.
func benchmarkCycle(b *testing.B, spacing time.Duration) {
	const lb = "5e0b1a29-8c7d-4e6f-90a1-b2c3d4e5f607"
	const listeners, members = 10, 250
	base := haproxytest.ShortDir(b)
	layout := haproxy.Layout{Base: base}
	if err := os.MkdirAll(layout.Dir(lb), 0o755); err != nil {
		b.Fatal(err)
	}
	var cfg strings.Builder
	cfg.WriteString(haproxytest.Preamble(200, layout.SocketPath(lb)))
	n := 1000
	for range listeners {
		lid, pool := uuid(n), uuid(n+1)
		n += 2
		fmt.Fprintf(&cfg, "frontend %s\n    bind 127.0.0.1:%d\n    default_backend %s:%s\nbackend %s:%s\n",
			lid, haproxytest.FreePort(b), pool, lid, pool, lid)
		for range members {
			fmt.Fprintf(&cfg, "    server %s 127.0.0.1:9 weight 1\n", uuid(n))
			n++
		}
	}
	haproxytest.Start(b, haproxytest.Options{
		Config: cfg.String(), Dir: base, ConfigPath: layout.ConfigPath(lb), PidFile: layout.PidPath(lb),
		StatsSocket: layout.SocketPath(lb),
	})
	hm := listen(b, "udp4", "127.0.0.1:0")
	var size int
	s := New(Options{Config: testConfig(base, hm.dest()), LVS: NoLVS{}, Sent: func(_ string, d []byte) { size = len(d) }})
	ctx := context.Background()
	s.Cycle(ctx)
	if size == 0 {
		b.Fatal("no heartbeat sent")
	}
	b.ReportAllocs()
	var tick <-chan time.Time
	if spacing > 0 {
		t := time.NewTicker(spacing)
		defer t.Stop()
		tick = t.C
	}
	cpu0, flt0 := processCPU(b)
	for b.Loop() {
		if tick != nil {
			<-tick
		}
		s.Cycle(ctx)
	}
	// The wall time includes HAProxy writing the answer; the agent's own
	// cost is its CPU time (all threads, the GC's too).
	cpu1, flt1 := processCPU(b)
	b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	// A page fault is a few µs of the kernel's time, counted in cpu-ns.
	b.ReportMetric(float64(flt1-flt0)/float64(b.N), "minflt/op")
	b.ReportMetric(float64(size), "datagram-bytes")
}

// processCPU is the user and system CPU time this process has used, and
// its minor page faults.
func processCPU(b *testing.B) (time.Duration, int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Minflt
}
