package ipvs

import (
	"context"
	"net/netip"
	"os"
	"reflect"
	"testing"
)

func key(proto, addr string) Key { return Key{Protocol: proto, Addr: netip.MustParseAddrPort(addr)} }

// The recorded files come from a bookworm amphora VM (testdata/record.sh):
// a TCP, an IPv4 and an IPv6 UDP, an empty UDP and a persistent SCTP
// service, and a firewall-mark one; five datagrams sent to each UDP VIP.
func TestRecordedKernelOutput(t *testing.T) {
	proc, err := os.ReadFile("testdata/proc_net_ip_vs.txt")
	if err != nil {
		t.Fatal(err)
	}
	stats, err := os.ReadFile("testdata/ipvsadm_stats_exact.txt")
	if err != nil {
		t.Fatal(err)
	}
	table, err := ParseProc(proc)
	if err != nil {
		t.Fatal(err)
	}
	counted, err := ParseStats(stats)
	if err != nil {
		t.Fatal(err)
	}
	Merge(&table, counted)

	five := func(in, out uint64) Stats { return Stats{Conns: 5, InPkts: 5, OutPkts: 5, InBytes: in, OutBytes: out} }
	want := Table{Services: []Service{
		{Key: key("TCP", "203.0.113.10:80"), Scheduler: "rr", Stats: Stats{1, 1, 1, 60, 40}, Dests: []Dest{
			{Addr: netip.MustParseAddrPort("198.51.100.31:80"), Forward: "Masq", Weight: 1, InActConn: 1, Stats: Stats{1, 1, 1, 60, 40}}}},
		{Key: key("UDP", "203.0.113.10:54"), Scheduler: "lc"},
		{Key: key("UDP", "203.0.113.10:53"), Scheduler: "rr", Stats: five(180, 320), Dests: []Dest{
			{Addr: netip.MustParseAddrPort("198.51.100.32:53"), Forward: "Masq", Weight: 0},
			{Addr: netip.MustParseAddrPort("198.51.100.31:53"), Forward: "Masq", Weight: 1, InActConn: 5, Stats: five(180, 320)}}},
		{Key: key("UDP", "[2001:db8::10]:53"), Scheduler: "wrr", Stats: five(270, 510), Dests: []Dest{
			{Addr: netip.MustParseAddrPort("[2001:db8:1::31]:53"), Forward: "Masq", Weight: 3, InActConn: 5, Stats: five(270, 510)}}},
		{Key: key("SCTP", "203.0.113.10:3868"), Scheduler: "sh", Dests: []Dest{
			{Addr: netip.MustParseAddrPort("198.51.100.31:3868"), Forward: "Masq", Weight: 1}}},
	}}
	if !reflect.DeepEqual(table, want) {
		t.Fatalf("got  %+v\nwant %+v", table, want)
	}
	if s := table.Service(key("UDP", "[2001:db8::10]:53")); s == nil || s.Scheduler != "wrr" {
		t.Fatalf("Service lookup: %+v", s)
	}
	if s := table.Service(key("SCTP", "203.0.113.10:53")); s != nil {
		t.Fatalf("a UDP service found as SCTP: %+v", s)
	}
}

func TestParseErrors(t *testing.T) {
	for name, in := range map[string]string{
		"proc short address": "UDP  CB0071:0035 rr\n",
		"proc bad weight":    "UDP  CB00710A:0035 rr\n  -> C000021F:0035 Masq x 0 0\n",
		"proc no port":       "UDP  CB00710A rr\n",
	} {
		if _, err := ParseProc([]byte(in)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	for name, in := range map[string]string{
		"stats without --exact": "UDP  203.0.113.10:53   5K 5 5 180 320\n",
		"stats short line":      "UDP  203.0.113.10:53   5 5 5\n",
		"stats bad address":     "UDP  203.0.113.300:53   5 5 5 180 320\n",
	} {
		if _, err := ParseStats([]byte(in)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

// Without the ip_vs module (this host's kernel) there is no table: empty,
// not an error.
func TestKernelWithoutIPVS(t *testing.T) {
	if _, err := os.Stat("/proc/net/ip_vs"); err == nil {
		t.Skip("this kernel has IPVS loaded")
	}
	table, err := Kernel{}.Read(context.Background())
	if err != nil || len(table.Services) != 0 {
		t.Fatalf("%+v %v", table, err)
	}
}
