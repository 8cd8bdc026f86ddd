package health

import (
	"context"
	"net/netip"
	"os"
	"reflect"
	"strconv"
	"testing"

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
