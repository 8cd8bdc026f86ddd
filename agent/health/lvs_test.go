package health

import (
	"context"
	"net/netip"
	"os"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/keepalived"
	"github.com/amphora-agent/amphora-agent/keepalived/ipvs"
)

type fakeIPVS ipvs.Table

func (f fakeIPVS) Read(context.Context) (ipvs.Table, error) { return ipvs.Table(f), nil }

// A running LVS listener rendered by Octavia's templater becomes an OPEN
// listener with IPVS's counters as deltas (the same counter state as
// HAProxy's) and a pool under its bare id; no error once LVS is read.
func TestKernelLVSInMessage(t *testing.T) {
	const id, pool = "5b6c7d8e-0000-4000-8000-000000000001", "6c7d8e9f-0000-4000-8000-000000000002"
	conf, err := os.ReadFile("../../keepalived/testdata/lvs_udp_nohm.conf")
	if err != nil {
		t.Fatal(err)
	}
	l := keepalived.LVSLayout{Base: t.TempDir()}
	f := l.Files(id)
	os.MkdirAll(l.Dir(), 0o755)
	os.WriteFile(f.Config, conf, 0o644)
	os.WriteFile(f.Pid, []byte(strconv.Itoa(os.Getpid())), 0o644)
	os.WriteFile(f.CheckPid, []byte("1"), 0o644)

	st := ipvs.Stats{Conns: 42, InPkts: 84, OutPkts: 84, InBytes: 5460, OutBytes: 10920}
	table := ipvs.Table{Services: []ipvs.Service{{Key: ipvs.Key{Protocol: "UDP", Addr: netip.MustParseAddrPort("203.0.113.10:53")}, Stats: st,
		Dests: []ipvs.Dest{{Addr: netip.MustParseAddrPort("198.51.100.31:53"), Weight: 1, ActiveConn: 2, Stats: st}}}}}
	src := KernelLVS{Layout: l, IPVS: fakeIPVS(table)}
	b := NewBuilder(nil)
	r, err := src.LVS(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m := b.Build("amp", r)
	if got := m.Listeners[id]; got != (Listener{Status: "OPEN", Stats: Stats{TX: 10920, RX: 5460, Conns: 2, TotConns: 42}}) {
		t.Fatalf("listener %+v", got)
	}
	want := Pool{Status: "UP", Members: map[string]string{
		"8e9fa0b1-0000-4000-8000-000000000001": "no check",
		"8e9fa0b1-0000-4000-8000-000000000002": "DOWN",
		"8e9fa0b1-0000-4000-8000-000000000003": "MAINT"}}
	if !reflect.DeepEqual(m.Pools[pool], want) || len(m.Pools) != 1 {
		t.Fatalf("pools %+v", m.Pools)
	}
	// The next heartbeat sends what IPVS counted since.
	table.Services[0].Stats = ipvs.Stats{Conns: 50, InBytes: 6000, OutBytes: 12000}
	src.IPVS = fakeIPVS(table)
	r, _ = src.LVS(context.Background())
	if got := b.Build("amp", r).Listeners[id].Stats; got != (Stats{TX: 1080, RX: 540, Conns: 2, TotConns: 8}) {
		t.Fatalf("second heartbeat %+v", got)
	}
}

// While the agent restarts a listener's keepalived (a controller's reload
// of any listener restarts them all), the listener, its pool and members
// are reported from the last live reading instead of dropping out, which
// made the health manager write them OFFLINE; the moment the operation
// ends, live readings resume, so a keepalived that did not come back
// drops out as before. A listener never read, one whose keepalived died
// on its own, and a stand-in older than MaxBusyStandIn are reported live.
func TestKernelLVSStandsInWhileRestarting(t *testing.T) {
	const id, pool = "5b6c7d8e-0000-4000-8000-000000000001", "6c7d8e9f-0000-4000-8000-000000000002"
	const other = "5b6c7d8e-0000-4000-8000-000000000009"
	conf, err := os.ReadFile("../../keepalived/testdata/lvs_udp_nohm.conf")
	if err != nil {
		t.Fatal(err)
	}
	l := keepalived.LVSLayout{Base: t.TempDir()}
	os.MkdirAll(l.Dir(), 0o755)
	running := func(id string, on bool) {
		f := l.Files(id)
		if !on {
			os.Remove(f.Pid)
			return
		}
		os.WriteFile(f.Config, conf, 0o644)
		os.WriteFile(f.Pid, []byte(strconv.Itoa(os.Getpid())), 0o644)
		os.WriteFile(f.CheckPid, []byte("1"), 0o644)
	}
	vip, member := netip.MustParseAddrPort("203.0.113.10:53"), netip.MustParseAddrPort("198.51.100.31:53")
	table := func(conns uint64) fakeIPVS {
		st := ipvs.Stats{Conns: conns, InBytes: 100 * conns, OutBytes: 200 * conns}
		return fakeIPVS{Services: []ipvs.Service{{Key: ipvs.Key{Protocol: "UDP", Addr: vip}, Stats: st,
			Dests: []ipvs.Dest{{Addr: member, Weight: 1, ActiveConn: 1, Stats: st}}}}}
	}
	busy := map[string]bool{}
	now := time.Unix(1_800_000_000, 0)
	src := &KernelLVS{Layout: l, IPVS: table(10), Busy: func(id string) bool { return busy[id] },
		Now: func() time.Time { return now }}
	b := NewBuilder(nil)
	heartbeat := func() Message {
		t.Helper()
		now = now.Add(10 * time.Second)
		r, err := src.LVS(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return b.Build("amp", r)
	}
	upMembers := map[string]string{"8e9fa0b1-0000-4000-8000-000000000001": "no check",
		"8e9fa0b1-0000-4000-8000-000000000002": "DOWN", "8e9fa0b1-0000-4000-8000-000000000003": "MAINT"}
	want := func(m Message, stats Stats, members map[string]string) {
		t.Helper()
		if got, ok := m.Listeners[id]; !ok || got != (Listener{Status: "OPEN", Stats: stats}) {
			t.Fatalf("listener %+v (present %v), want OPEN %+v", got, ok, stats)
		}
		if got := m.Pools[pool]; !reflect.DeepEqual(got, Pool{Status: "UP", Members: members}) {
			t.Fatalf("pool %+v", got)
		}
	}
	absent := func(m Message, why string) {
		t.Helper()
		if _, ok := m.Listeners[id]; ok || len(m.Pools) != 0 {
			t.Fatalf("%s: listener reported: %+v %+v", why, m.Listeners, m.Pools)
		}
	}

	running(id, true)
	want(heartbeat(), Stats{TX: 2000, RX: 1000, Conns: 1, TotConns: 10}, upMembers)

	// Restart: stopped, then started with an IPVS table not yet filled.
	busy[id] = true
	running(id, false)
	want(heartbeat(), Stats{Conns: 1}, upMembers)
	running(id, true)
	src.IPVS = fakeIPVS{}
	want(heartbeat(), Stats{Conns: 1}, upMembers)
	// Done: the live reading at once.
	busy[id] = false
	src.IPVS = table(3)
	want(heartbeat(), Stats{TX: 600, RX: 300, Conns: 1, TotConns: 3}, upMembers)

	// A restart that fails: in while it runs, out once it failed.
	busy[id] = true
	running(id, false)
	want(heartbeat(), Stats{Conns: 1}, upMembers)
	busy[id] = false
	absent(heartbeat(), "after a failed restart")
	// Out stays out, though an operation (a start) begins: the last live
	// reading is only used for a listener in the previous heartbeat.
	busy[id] = true
	absent(heartbeat(), "start of a stopped listener")
	busy[id] = false

	// keepalived died on its own: the respawn is not the agent's operation.
	running(id, true)
	want(heartbeat(), Stats{Conns: 1}, upMembers)
	running(id, false)
	absent(heartbeat(), "keepalived died")

	// A listener never read before is reported as it is.
	busy[other] = true
	running(other, false)
	if m := heartbeat(); len(m.Listeners) != 0 {
		t.Fatalf("never read: %+v", m.Listeners)
	}

	// Bounded: an operation that outlasts MaxBusyStandIn stops standing in.
	running(id, true)
	heartbeat()
	busy[id] = true
	running(id, false)
	var n int
	for ; n < 10; n++ {
		if _, ok := heartbeat().Listeners[id]; !ok {
			break
		}
	}
	if n != int(MaxBusyStandIn/(10*time.Second)) {
		t.Fatalf("stood in for %d heartbeats 10 s apart, want %v", n, MaxBusyStandIn)
	}
}
