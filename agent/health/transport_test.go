package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/config"
)

// Each heartbeat goes to exactly one destination, rotating in list order;
// a changed list restarts the rotation at its first entry (§7.9).
func TestSenderRoundRobin(t *testing.T) {
	a, b, c := listen(t, "udp4", "127.0.0.1:0"), listen(t, "udp4", "127.0.0.1:0"), listen(t, "udp4", "127.0.0.1:0")
	cfg := testConfig(t.TempDir(), a.dest(), b.dest(), c.dest())
	s := newSender(t, cfg, nil, nil)
	ctx := context.Background()
	for range 5 {
		s.Cycle(ctx)
	}
	got := [][]uint64{a.queued(testKey), b.queued(testKey), c.queued(testKey)}
	if want := [][]uint64{{0, 3}, {1, 4}, {2}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("seqs per destination %v, want %v", got, want)
	}
	// Same list again (a new snapshot): the rotation goes on.
	s.SetConfig(withConfig(cfg, func(*config.Config) {}))
	s.Cycle(ctx)
	if got := c.queued(testKey); !reflect.DeepEqual(got, []uint64{5}) {
		t.Fatalf("unchanged list: c got %v, want [5]", got)
	}
	// A new list starts over at its head.
	s.SetConfig(withConfig(cfg, func(cf *config.Config) { cf.ControllerIPPortList = []string{c.dest(), b.dest()} }))
	for range 3 {
		s.Cycle(ctx)
	}
	got = [][]uint64{a.queued(testKey), b.queued(testKey), c.queued(testKey)}
	if want := [][]uint64{nil, {7}, {6, 8}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after the list changed: %v, want %v", got, want)
	}
}

// The destination forms of controller_ip_port_list (§7.10): a.b.c.d:p,
// [v6]:p, unbracketed v6:p, fe80::…%zone:p and host names; IPv4 targets
// use the AF_INET socket and IPv6 targets the AF_INET6 one.
func TestSenderDestinationForms(t *testing.T) {
	v4 := listen(t, "udp4", "127.0.0.1:0")
	v6 := listen(t, "udp6", "[::1]:0")
	p4 := v4.conn.LocalAddr().(*net.UDPAddr).Port
	p6 := v6.conn.LocalAddr().(*net.UDPAddr).Port
	conf := fmt.Sprintf("[health_manager]\ncontroller_ip_port_list = 127.0.0.1:%d, [::1]:%d, ::1:%d, fe80::1%%lo:5555, localhost:%d, 2001:db8::10:5555\n", p4, p6, p6, p4)
	cfg, _, err := config.Load([]config.Source{{Name: "t.conf", Data: []byte(conf)}})
	if err != nil {
		t.Fatal(err)
	}
	wantItems := []string{
		fmt.Sprintf("127.0.0.1:%d", p4), fmt.Sprintf("[::1]:%d", p6), fmt.Sprintf("[::1]:%d", p6),
		"[fe80::1%lo]:5555", fmt.Sprintf("localhost:%d", p4), "[2001:db8::10]:5555",
	}
	if !reflect.DeepEqual(cfg.ControllerIPPortList, wantItems) {
		t.Fatalf("parsed %q, want %q", cfg.ControllerIPPortList, wantItems)
	}
	s := newSender(t, withConfig(testConfig(t.TempDir()), func(c *config.Config) {
		c.ControllerIPPortList = cfg.ControllerIPPortList
	}), nil, nil)
	ctx := context.Background()
	for _, c := range []struct {
		item string
		want netip.AddrPort
	}{
		{wantItems[0], netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(p4))},
		{wantItems[1], netip.AddrPortFrom(netip.MustParseAddr("::1"), uint16(p6))},
		{wantItems[3], netip.MustParseAddrPort("[fe80::1%lo]:5555")},
		{wantItems[5], netip.MustParseAddrPort("[2001:db8::10]:5555")},
		{"[::ffff:127.0.0.1]:99", netip.MustParseAddrPort("127.0.0.1:99")},
	} {
		got, err := s.resolve(ctx, c.item)
		if err != nil || got != c.want {
			t.Errorf("resolve(%s) = %v, %v; want %v", c.item, got, err, c.want)
		}
	}
	if got, err := s.resolve(ctx, wantItems[4]); err != nil || !got.Addr().IsLoopback() || got.Port() != uint16(p4) {
		t.Errorf("resolve(%s) = %v, %v", wantItems[4], got, err)
	}

	// Send the first two (v4, then v6) and check which socket carried each.
	s.Cycle(ctx)
	s.Cycle(ctx)
	if got := v4.queued(testKey); !reflect.DeepEqual(got, []uint64{0}) {
		t.Errorf("IPv4 receiver got %v", got)
	}
	if got := v6.queued(testKey); !reflect.DeepEqual(got, []uint64{1}) {
		t.Errorf("IPv6 receiver got %v", got)
	}
	if s.v4 == nil || s.v6 == nil {
		t.Fatal("a socket per family was not opened")
	}
	if a := s.v4.LocalAddr().(*net.UDPAddr); a.IP.To4() == nil {
		t.Errorf("IPv4 socket bound to %v", a)
	}
	if a := s.v6.LocalAddr().(*net.UDPAddr); a.IP.To4() != nil {
		t.Errorf("IPv6 socket bound to %v", a)
	}
}

// failingDNS makes host name lookups fail at once.
var failingDNS = &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
	return nil, errors.New("no DNS in this test")
}}

// Resolution and send errors are logged (rate-limited) and never stop the
// loop; an empty destination list logs and sends nothing (§7.11).
func TestSenderErrorsNeverFatal(t *testing.T) {
	hm := listen(t, "udp4", "127.0.0.1:0")
	base := t.TempDir()
	log, logs := observed()
	cfg := testConfig(base, "no-such-host.invalid:5555", "127.0.0.1:0", hm.dest())
	cfg.HeartbeatInterval = 10 * time.Millisecond
	s := newSender(t, cfg, log, nil)
	s.resolver = failingDNS

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	// Rotation: the unresolvable name falls through to the next entry
	// (send fails: port 0), then hm, then the name again → port 0 ...
	var seqs []uint64
	for len(seqs) < 5 {
		// Every 10 ms on an idle machine; the bound only ends a hang.
		seqs = append(seqs, hm.next(30*time.Second, testKey).Seq)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Fatalf("seqs %v not increasing", seqs)
		}
	}
	if n := logs.FilterMessage("cannot resolve heartbeat destination").Len(); n != 1 {
		t.Errorf("%d resolution errors logged over %d heartbeats, want 1 (rate-limited)", n, seqs[len(seqs)-1])
	}
	sendErrs := logs.FilterMessage("heartbeat not sent").All()
	if len(sendErrs) != 1 || !strings.Contains(fmt.Sprint(sendErrs[0].ContextMap()["error"]), "invalid argument") {
		t.Errorf("send errors logged: %v, want one EINVAL", sendErrs)
	}

	// No destination at all: logged, nothing sent; the message is still
	// built (seq consumed) and the counters persisted, as upstream.
	log2, logs2 := observed()
	empty := testConfig(t.TempDir())
	s2 := newSender(t, empty, log2, nil)
	s2.Cycle(context.Background())
	s2.Cycle(context.Background())
	if n := logs2.FilterMessage("no heartbeat destination: [health_manager] controller_ip_port_list is empty").Len(); n != 1 {
		t.Errorf("empty list logged %d times, want 1", n)
	}
	if _, err := os.Stat(CountersPath(empty.BasePath)); err != nil {
		t.Errorf("counter file: %v", err)
	}
	s2.SetConfig(withConfig(empty, func(c *config.Config) { c.ControllerIPPortList = []string{hm.dest()} }))
	s2.Cycle(context.Background())
	if m := hm.next(time.Second, testKey); m.Seq != 2 {
		t.Errorf("seq %d after two cycles without destination, want 2", m.Seq)
	}
}
