package keepalived

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/keepalived/ipvs"
)

const (
	tListener = "5b6c7d8e-0000-4000-8000-000000000001"
	tPool     = "6c7d8e9f-0000-4000-8000-000000000002"
	tM1       = "8e9fa0b1-0000-4000-8000-000000000001"
	tM2       = "8e9fa0b1-0000-4000-8000-000000000002"
	tM3       = "8e9fa0b1-0000-4000-8000-000000000003"
	tM4       = "8e9fa0b1-0000-4000-8000-000000000004"
)

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func TestParseLVSConfig(t *testing.T) {
	got := ParseLVSConfig(readTestdata(t, "lvs_udp_hm_dualstack.conf"))
	want := LVSConfig{
		Protocol:      "UDP",
		VIPs:          []netip.AddrPort{ap("203.0.113.10:53"), ap("[2001:db8::10]:53")},
		PoolID:        tPool,
		HealthMonitor: true,
		Members: []LVSMember{
			{ID: tM1, Addr: ap("198.51.100.31:53")},
			{ID: tM2, Addr: ap("198.51.100.32:53")},
			{ID: tM3, Disabled: true},
			{ID: tM4, Addr: ap("[2001:db8:1::31]:53")},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	for name, want := range map[string]LVSConfig{
		"lvs_listener_disabled.conf": {Disabled: true},
		"lvs_no_pool.conf":           {},
		"lvs_pool_disabled.conf":     {Protocol: "UDP", VIPs: []netip.AddrPort{ap("203.0.113.10:53")}, HealthMonitor: false},
	} {
		if got := ParseLVSConfig(readTestdata(t, name)); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %+v, want %+v", name, got, want)
		}
	}
	if c := ParseLVSConfig(readTestdata(t, "lvs_udp_nohm.conf")); c.HealthMonitor || len(c.Members) != 3 || c.PoolID != tPool {
		t.Errorf("without a health monitor: %+v", c)
	}
}

type fakeIPVS struct {
	table ipvs.Table
	err   error
	reads int
}

func (f *fakeIPVS) Read(context.Context) (ipvs.Table, error) {
	f.reads++
	return f.table, f.err
}

// lvsFixture lays out one running listener (the test's own pid) with the
// given config, its check pid file older or newer than the config.
func lvsFixture(t *testing.T, conf string, restarting bool) LVSLayout {
	t.Helper()
	l := LVSLayout{Base: t.TempDir()}
	if err := os.MkdirAll(l.Dir(), 0o755); err != nil {
		t.Fatal(err)
	}
	f := l.Files(tListener)
	if err := os.WriteFile(f.Config, readTestdata(t, conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.Pid, []byte(pidString()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.CheckPid, []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	cfgTime, checkTime := now.Add(-time.Minute), now
	if restarting {
		cfgTime, checkTime = now, now.Add(-time.Minute)
	}
	os.Chtimes(f.Config, cfgTime, cfgTime)
	os.Chtimes(f.CheckPid, checkTime, checkTime)
	return l
}

func pidString() string { return strconv.Itoa(os.Getpid()) + "\n" }

func udpService(vip string, st ipvs.Stats, dests ...ipvs.Dest) ipvs.Service {
	return ipvs.Service{Key: ipvs.Key{Protocol: "UDP", Addr: ap(vip)}, Scheduler: "wrr", Stats: st, Dests: dests}
}

func memberStatuses(p *LVSPoolState) map[string]string {
	m := map[string]string{}
	for _, ms := range p.Members {
		m[ms.ID] = ms.Status
	}
	return m
}

// The cases of health-and-config §2.6, on configs Octavia's templater
// rendered.
func TestLVSStates(t *testing.T) {
	s4 := ipvs.Stats{Conns: 42, InPkts: 84, OutPkts: 84, InBytes: 5460, OutBytes: 10920}
	s6 := ipvs.Stats{Conns: 1, InPkts: 2, OutPkts: 2, InBytes: 100, OutBytes: 200}
	m1 := ipvs.Dest{Addr: ap("198.51.100.31:53"), Forward: "Masq", Weight: 1, ActiveConn: 2, InActConn: 3, Stats: s4}
	m2drain := ipvs.Dest{Addr: ap("198.51.100.32:53"), Forward: "Masq", Weight: 0}
	m4 := ipvs.Dest{Addr: ap("[2001:db8:1::31]:53"), Forward: "Masq", Weight: 3, ActiveConn: 1, Stats: s6}
	full := ipvs.Table{Services: []ipvs.Service{
		// Another listener's service on the same port, other protocol.
		{Key: ipvs.Key{Protocol: "SCTP", Addr: ap("203.0.113.10:53")}, Stats: ipvs.Stats{Conns: 999}},
		udpService("203.0.113.10:53", s4, m1, m2drain),
		udpService("[2001:db8::10]:53", s6, m4),
	}}
	cases := []struct {
		name       string
		conf       string
		table      ipvs.Table
		restarting bool
		found      bool
		stats      ipvs.Stats
		active     uint64
		pool       string // "" no pool entry
		members    map[string]string
	}{
		{name: "worked example: up, drain, maint, IPv6 up", conf: "lvs_udp_hm_dualstack.conf", table: full, found: true,
			stats: ipvs.Stats{Conns: 43, InPkts: 86, OutPkts: 86, InBytes: 5560, OutBytes: 11120}, active: 3,
			pool: PoolUp, members: map[string]string{tM1: MemberUp, tM2: MemberDrain, tM3: MemberMaint, tM4: MemberUp}},
		{name: "a member keepalived removed is DOWN", conf: "lvs_udp_hm_dualstack.conf", found: true,
			table: ipvs.Table{Services: []ipvs.Service{udpService("203.0.113.10:53", s4, m1), udpService("[2001:db8::10]:53", s6)}},
			stats: ipvs.Stats{Conns: 43, InPkts: 86, OutPkts: 86, InBytes: 5560, OutBytes: 11120}, active: 2,
			pool: PoolUp, members: map[string]string{tM1: MemberUp, tM2: MemberDown, tM3: MemberMaint, tM4: MemberDown}},
		{name: "... RESTARTING while the config is newer than the checker", conf: "lvs_udp_hm_dualstack.conf", restarting: true, found: true,
			table: ipvs.Table{Services: []ipvs.Service{udpService("203.0.113.10:53", s4, m1)}}, stats: s4, active: 2,
			pool: PoolUp, members: map[string]string{tM1: MemberUp, tM2: MemberRestarting, tM3: MemberMaint, tM4: MemberRestarting}},
		{name: "no real server and a monitor: pool DOWN", conf: "lvs_udp_hm_dualstack.conf", found: true,
			table: ipvs.Table{Services: []ipvs.Service{udpService("203.0.113.10:53", s4)}}, stats: s4,
			pool: PoolDown, members: map[string]string{tM1: MemberDown, tM2: MemberDown, tM3: MemberMaint, tM4: MemberDown}},
		{name: "no virtual service in the kernel: zeros", conf: "lvs_udp_hm_dualstack.conf",
			pool: PoolDown, members: map[string]string{tM1: MemberDown, tM2: MemberDown, tM3: MemberMaint, tM4: MemberDown}},
		{name: "no monitor: no check", conf: "lvs_udp_nohm.conf", found: true,
			table: ipvs.Table{Services: []ipvs.Service{udpService("203.0.113.10:53", s4, m1, m2drain)}}, stats: s4, active: 2,
			pool: PoolUp, members: map[string]string{tM1: MemberNoCheck, tM2: MemberDrain, tM3: MemberMaint}},
		{name: "no monitor, no real server: pool UP, no check", conf: "lvs_udp_nohm.conf", found: true,
			table: ipvs.Table{Services: []ipvs.Service{udpService("203.0.113.10:53", s4)}}, stats: s4,
			pool: PoolUp, members: map[string]string{tM1: MemberNoCheck, tM2: MemberNoCheck, tM3: MemberMaint}},
		{name: "disabled pool: no pool entry", conf: "lvs_pool_disabled.conf", table: full, found: true, stats: s4, active: 2},
		{name: "no pool: zeros, no pool entry", conf: "lvs_no_pool.conf", table: full},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := lvsFixture(t, c.conf, c.restarting)
			r := &fakeIPVS{table: c.table}
			states, err := l.LVSStates(context.Background(), r)
			if err != nil || len(states) != 1 {
				t.Fatalf("%+v %v", states, err)
			}
			s := states[0]
			if s.ID != tListener || s.Found != c.found || s.Stats != c.stats || s.ActiveConns != c.active {
				t.Fatalf("listener %+v, want found %v stats %+v active %d", s, c.found, c.stats, c.active)
			}
			if c.pool == "" {
				if s.Pool != nil {
					t.Fatalf("pool entry %+v, want none", s.Pool)
				}
				return
			}
			if s.Pool == nil || s.Pool.ID != tPool || s.Pool.Status != c.pool {
				t.Fatalf("pool %+v, want %s %s", s.Pool, tPool, c.pool)
			}
			if got := memberStatuses(s.Pool); !reflect.DeepEqual(got, c.members) {
				t.Fatalf("members %v, want %v", got, c.members)
			}
		})
	}
}

func TestLVSStatesCountersPerMember(t *testing.T) {
	l := lvsFixture(t, "lvs_udp_hm_dualstack.conf", false)
	st := ipvs.Stats{Conns: 5, InPkts: 5, OutPkts: 4, InBytes: 180, OutBytes: 320}
	r := &fakeIPVS{table: ipvs.Table{Services: []ipvs.Service{udpService("203.0.113.10:53", st,
		ipvs.Dest{Addr: ap("198.51.100.31:53"), Weight: 1, ActiveConn: 1, InActConn: 4, Stats: st})}}}
	states, err := l.LVSStates(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	m := states[0].Pool.Members[0]
	if m.ID != tM1 || !m.InKernel || m.Stats != st || m.ActiveConns != 1 || m.InActConns != 4 || m.Weight != 1 {
		t.Fatalf("member %+v", m)
	}
	if other := states[0].Pool.Members[1]; other.InKernel || other.Stats != (ipvs.Stats{}) {
		t.Fatalf("a member not in the kernel has counters: %+v", other)
	}
}

func TestLVSStatesSkipsAndReadsOnce(t *testing.T) {
	l := lvsFixture(t, "lvs_udp_hm_dualstack.conf", false)
	// A disabled listener (running) and a stopped one are not reported.
	for id, conf := range map[string]string{
		"11111111-0000-4000-8000-000000000001": "lvs_listener_disabled.conf",
		"22222222-0000-4000-8000-000000000002": "lvs_udp_nohm.conf",
	} {
		f := l.Files(id)
		os.WriteFile(f.Config, readTestdata(t, conf), 0o644)
		if strings.HasPrefix(id, "1") {
			os.WriteFile(f.Pid, []byte(pidString()), 0o644)
		}
	}
	r := &fakeIPVS{}
	states, err := l.LVSStates(context.Background(), r)
	if err != nil || len(states) != 1 || states[0].ID != tListener || r.reads != 1 {
		t.Fatalf("%+v %v, %d reads", states, err, r.reads)
	}

	// Nothing with a virtual server: the kernel is not read.
	l = lvsFixture(t, "lvs_no_pool.conf", false)
	r = &fakeIPVS{}
	if states, err := l.LVSStates(context.Background(), r); err != nil || len(states) != 1 || r.reads != 0 {
		t.Fatalf("%+v %v, %d reads", states, err, r.reads)
	}

	// A failed read: listeners still OPEN with zeros, no pool; the error says why.
	l = lvsFixture(t, "lvs_udp_hm_dualstack.conf", false)
	r = &fakeIPVS{err: errors.New("ipvsadm: not found")}
	states, err = l.LVSStates(context.Background(), r)
	if err == nil || len(states) != 1 || states[0].Pool != nil || states[0].Found {
		t.Fatalf("%+v %v", states, err)
	}
}
