package health

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/amphora-agent/amphora-agent/haproxy/stats"
)

// lbsSource is a set of load balancers whose listeners, running state
// and stats socket a test changes between cycles.
type lbsSource struct {
	mu        sync.Mutex
	listeners map[string][]string // by LB, in order
	stopped   map[string]bool
	wedged    map[string]bool
}

func (s *lbsSource) LoadBalancers() ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.listeners)), nil
}

func (s *lbsSource) State(lb string) LBState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return LBState{Running: !s.stopped[lb]}
}

func (s *lbsSource) ShowStat(_ context.Context, lb string, _ *StatScratch) ([]stats.Row, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wedged[lb] {
		return nil, &stats.Error{Socket: lb + ".sock", Command: "show stat -1 -1 -1", Err: errors.New("connection refused")}
	}
	var b strings.Builder
	b.WriteString("# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,weight,act,bck,\n")
	for i, l := range s.listeners[lb] {
		fmt.Fprintf(&b, "%s,FRONTEND,,,0,1,100,%d,100,200,0,0,0,,,,,OPEN,,,,\n", l, i+1)
	}
	return stats.ParseStat([]byte(b.String() + "\n"))
}

func (s *lbsSource) edit(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn()
}

// The counters file keeps an entry only while its listener may still be
// counting: a listener dropped from a running load balancer's config (a
// reload restarts HAProxy's counters anyway), a deleted or stopped load
// balancer's listeners and an LVS listener no longer running lose theirs;
// a load balancer whose stats socket fails keeps its listeners' entries
// (its HAProxy still counts), an LVS reading that came with an error drops
// nothing, and entries from an earlier run that this one never saw are
// left alone. Otherwise every listener ever created would stay in the
// file and in memory (make soak found it growing by 70 bytes a listener).
func TestCountersOfGoneListenersDropped(t *testing.T) {
	base := t.TempDir()
	if err := os.WriteFile(CountersPath(base), []byte(`{"from-before": {"bin": 1, "bout": 2, "ereq": 0, "stot": 3}}`), 0o640); err != nil {
		t.Fatal(err)
	}
	src := &lbsSource{
		listeners: map[string][]string{"a": {"a1", "a2"}, "b": {"b1"}, "c": {"c1"}},
		stopped:   map[string]bool{}, wedged: map[string]bool{},
	}
	lvs := &lvsReading{r: Reading{Listeners: []ListenerReading{{ID: "udp1", Status: StatusOpen, Stot: 1}}}}
	s := New(Options{Config: testConfig(base), HAProxy: src, LVS: lvs, ReadRetryBudget: 1})
	ctx := context.Background()
	entries := func() string {
		s.Cycle(ctx)
		c, err := LoadCounters(CountersPath(base))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(slices.Sorted(maps.Keys(c.m)), " ")
	}
	for _, step := range []struct {
		what string
		do   func()
		want string
	}{
		{"first cycle", func() {}, "a1 a2 b1 c1 from-before udp1"},
		{"a2 deleted from a's config", func() { src.listeners["a"] = []string{"a1"} }, "a1 b1 c1 from-before udp1"},
		{"b's stats socket fails", func() { src.wedged["b"] = true }, "a1 b1 c1 from-before udp1"},
		{"b's stats socket fails again (b left out)", func() {}, "a1 b1 c1 from-before udp1"},
		{"b deleted", func() { delete(src.listeners, "b") }, "a1 c1 from-before udp1"},
		{"c stopped", func() { src.stopped["c"] = true }, "a1 from-before udp1"},
		{"LVS read with an error, without udp1", func() { lvs.r, lvs.err = Reading{}, errors.New("partial") }, "a1 from-before udp1"},
		{"LVS read without udp1", func() { lvs.err = nil }, "a1 from-before"},
	} {
		src.edit(step.do)
		if got := entries(); got != step.want {
			t.Fatalf("%s: counters of %q, want %q", step.what, got, step.want)
		}
	}
}
