//go:build bench

package bench_test

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestBenchHeartbeatCPUSameBeats measures the heartbeat CPU of the agent
// and the baseline (AMPHORA_BENCH_BASELINE_BIN, required) for 1 LB × 10 ×
// 250 over the same beats: both run the LB at once and are measured over
// one window, so that load from elsewhere on the machine falls on both.
// (TestBenchHeartbeatCPU measures them one after the other, and the
// baseline while the agent still heartbeats.) AMPHORA_BENCH_WINDOWS
// (default 3) windows of 20 heartbeats each are printed.
//
//	AMPHORA_BENCH_OUT=1 AMPHORA_AGENT_BIN=$PWD/bin/amphora-agent AMPHORA_BENCH_BASELINE_BIN=/tmp/agent-base \
//	  go test -tags bench -run '^TestBenchHeartbeatCPUSameBeats$' -v ./cmd/amphora-agent/tiers/bench/
func TestBenchHeartbeatCPUSameBeats(t *testing.T) {
	if os.Getenv("AMPHORA_BENCH_OUT") == "" || os.Getenv("AMPHORA_BENCH_BASELINE_BIN") == "" {
		t.Skip("AMPHORA_BENCH_OUT or AMPHORA_BENCH_BASELINE_BIN is not set")
	}
	windows := 3
	if w, err := strconv.Atoi(os.Getenv("AMPHORA_BENCH_WINDOWS")); err == nil && w > 0 {
		windows = w
	}
	bins := benchBinaries(t)
	agents, err := startAgents(t, bins)
	if err != nil {
		t.Fatal(err)
	}
	lb := benchUUID(0xcd, 1)
	c := headlineCell
	var shapes []lbShape
	for _, a := range agents {
		shapes = append(shapes, lbShape{id: lb, listeners: c.listeners, members: c.members, firstPort: 21000,
			base: a.e.Path("lib"), crtDir: a.e.Path("lib", "certs")})
	}
	cfgs, err := renderConfigs(agents[0].e.AmphoraID, shapes)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range agents {
		if err := a.apply(lb, cfgs[i], "start"); err != nil {
			t.Fatalf("%s: %v", bins[i].name, err)
		}
	}
	for w := range windows {
		type fig struct {
			stat, sched time.Duration
			got         int
			err         error
		}
		figs := make([]fig, len(agents))
		var wg sync.WaitGroup
		for i, a := range agents {
			wg.Go(func() {
				var f fig
				f.stat, f.sched, _, f.got, f.err = a.heartbeatCPU(c.beats)
				figs[i] = f
			})
		}
		wg.Wait()
		line := fmt.Sprintf("window %d (%d heartbeats):", w+1, c.beats)
		for i, f := range figs {
			line += fmt.Sprintf("  %s %s; %s (%d sent, err %v)", bins[i].name, fmtDur(f.stat), fmtDur(f.sched), f.got, f.err)
		}
		t.Log(line)
	}
}
