package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/amphora-agent/amphora-agent/agent/config"
	"github.com/amphora-agent/amphora-agent/agent/health/healthtest"
	"github.com/amphora-agent/amphora-agent/agent/tick"
	"github.com/amphora-agent/amphora-agent/haproxy/stats"
)

const testKey = "insecure"

// receiver is a health manager's socket on loopback.
type receiver struct {
	t    testing.TB
	conn *net.UDPConn
}

func listen(t testing.TB, network, addr string) *receiver {
	t.Helper()
	ua, err := net.ResolveUDPAddr(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.ListenUDP(network, ua)
	if err != nil {
		t.Skipf("cannot listen on %s %s: %v", network, addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return &receiver{t: t, conn: conn}
}

// dest is the receiver as a controller_ip_port_list item.
func (r *receiver) dest() string { return r.conn.LocalAddr().String() }

// next waits up to timeout for a datagram and decodes it with key.
func (r *receiver) next(timeout time.Duration, key string) Message {
	r.t.Helper()
	d := r.raw(timeout)
	if d == nil {
		r.t.Fatalf("no heartbeat on %s within %v", r.dest(), timeout)
	}
	m, err := healthtest.Decode[Message](d, key)
	if err != nil {
		r.t.Fatalf("heartbeat on %s: %v", r.dest(), err)
	}
	return m
}

// raw returns the next datagram, or nil when none came within timeout.
func (r *receiver) raw(timeout time.Duration) []byte {
	buf := make([]byte, 1<<16)
	r.conn.SetReadDeadline(time.Now().Add(timeout))
	n, _, err := r.conn.ReadFromUDP(buf)
	if err != nil {
		return nil
	}
	return buf[:n]
}

// queued drains what is already queued: loopback delivery completes
// within sendto, so a short read deadline finds everything sent so far.
func (r *receiver) queued(key string) []uint64 {
	r.t.Helper()
	var seqs []uint64
	for {
		d := r.raw(20 * time.Millisecond)
		if d == nil {
			return seqs
		}
		m, err := healthtest.Decode[Message](d, key)
		if err != nil {
			r.t.Fatal(err)
		}
		seqs = append(seqs, m.Seq)
	}
}

func testConfig(base string, dests ...string) *config.Config {
	return &config.Config{
		BasePath:             base,
		AmphoraID:            sampleAmphora,
		HeartbeatKey:         testKey,
		HeartbeatInterval:    time.Hour,
		ControllerIPPortList: dests,
		Topology:             config.TopologySingle,
	}
}

func observed() (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	return zap.New(core), logs
}

func newSender(t *testing.T, cfg *config.Config, log *zap.Logger, src HAProxySource) *Sender {
	t.Helper()
	if log == nil {
		log = zap.NewNop()
	}
	return New(Options{Config: cfg, Log: log, HAProxy: src, LVS: NoLVS{}})
}

func withConfig(cfg *config.Config, edit func(*config.Config)) *config.Config {
	c := *cfg
	edit(&c)
	return &c
}

// beat is a heartbeat as the Sent hook saw it: decoded, and when it left.
type beat struct {
	msg Message
	at  time.Time
}

// beatLog collects what a sender hands to the kernel, for tests that run
// the loop in a synctest bubble, where reading the receiving socket would
// not count as waiting.
type beatLog struct {
	t     testing.TB
	mu    sync.Mutex
	beats []beat
}

func (l *beatLog) sent(_ string, datagram []byte) {
	m, err := healthtest.Decode[Message](datagram, testKey)
	if err != nil {
		l.t.Error(err)
		return
	}
	l.mu.Lock()
	l.beats = append(l.beats, beat{m, time.Now()})
	l.mu.Unlock()
}

func (l *beatLog) all() []beat {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.beats)
}

// runInBubble starts s.Run in the current synctest bubble and returns a
// stop that ends it and checks it returned nil.
func runInBubble(t *testing.T, s *Sender) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// Without load balancers the first heartbeat (empty listeners and pools)
// goes out at start-up, then one at each instant of heartbeat_interval; a
// new interval applies to the wait under way (§7.8). The loop runs in a
// synctest bubble: its clock is fake and moves only when every goroutine
// waits, so the instants are exact.
func TestSenderRunsAtStartAndEveryInterval(t *testing.T) {
	hm := listen(t, "udp4", "127.0.0.1:0")
	cfg := testConfig(t.TempDir(), hm.dest()) // interval: one hour
	synctest.Test(t, func(t *testing.T) {
		log := &beatLog{t: t}
		s := New(Options{Config: cfg, LVS: NoLVS{}, Sent: log.sent})
		start := time.Now()
		stop := runInBubble(t, s)
		synctest.Wait()
		want := Message{ID: sampleAmphora, Seq: 0, Listeners: map[string]Listener{}, Pools: map[string]Pool{}, Ver: 3}
		if b := log.all(); len(b) != 1 || !reflect.DeepEqual(b[0].msg, want) || !b[0].at.Equal(start) {
			t.Fatalf("at start: heartbeats %+v, want one at once: %+v", b, want)
		}
		// With an hour to wait, only a new interval brings the next one.
		const every = 50 * time.Millisecond
		s.SetConfig(withConfig(cfg, func(c *config.Config) { c.HeartbeatInterval = every }))
		time.Sleep(4 * every)
		synctest.Wait()
		stop()
		beats := log.all()
		if len(beats) != 5 {
			t.Fatalf("%d heartbeats in %v at a %v interval, want 1 + 4", len(beats), 4*every, every)
		}
		for i, b := range beats[1:] {
			prev := beats[i].at
			if want := tick.Next(prev, every); b.msg.Seq != uint64(i+1) || !b.at.Equal(want) ||
				len(b.msg.Listeners) != 0 || len(b.msg.Pools) != 0 {
				t.Fatalf("heartbeat %+v at %v after %v, want seq %d at %v and nothing to report", b.msg, b.at, prev, i+1, want)
			}
		}
	})
}

// The key is read from the live configuration for every datagram (§7.4).
func TestSenderKeyFromLiveConfig(t *testing.T) {
	hm := listen(t, "udp4", "127.0.0.1:0")
	cfg := testConfig(t.TempDir(), hm.dest())
	s := newSender(t, cfg, nil, nil)
	ctx := context.Background()
	s.Cycle(ctx)
	if m := hm.next(time.Second, testKey); m.Seq != 0 {
		t.Fatalf("seq %d", m.Seq)
	}
	s.SetConfig(withConfig(cfg, func(c *config.Config) { c.HeartbeatKey = "rotated" }))
	s.Cycle(ctx)
	d := hm.raw(time.Second)
	if _, _, err := healthtest.Unwrap(d, testKey); err == nil {
		t.Fatal("the heartbeat after the key change verifies with the old key")
	}
	if m, err := healthtest.Decode[Message](d, "rotated"); err != nil || m.Seq != 1 {
		t.Fatalf("with the new key: %+v, %v", m, err)
	}
}

// With a VRRP configuration, keepalived must run: a missing, unreadable or
// dead pid stops the heartbeat with a log line saying why, and consumes no
// sequence number (§7.6, §7.12).
func TestKeepalivedGate(t *testing.T) {
	hm := listen(t, "udp4", "127.0.0.1:0")
	base := t.TempDir()
	log, logs := observed()
	s := newSender(t, testConfig(base, hm.dest()), log, nil)
	ctx := context.Background()

	// No VRRP config: no gate, even without keepalived.
	s.Cycle(ctx)
	if m := hm.next(time.Second, testKey); m.Seq != 0 {
		t.Fatalf("seq %d", m.Seq)
	}
	vrrp := filepath.Join(base, "vrrp")
	if err := os.MkdirAll(vrrp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vrrp, "octavia-keepalived.conf"), []byte("vrrp_instance x {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pidPath := filepath.Join(vrrp, "octavia-keepalived.pid")
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, pid, why string
	}{
		{"missing pid file", "", "its pid file " + pidPath + " is missing"},
		{"garbage pid", "keepalived\n", "its pid file " + pidPath + " is unreadable"},
		{"dead pid", strconv.Itoa(dead.Process.Pid) + "\n", "but not running (pid " + strconv.Itoa(dead.Process.Pid)},
	} {
		os.Remove(pidPath)
		if c.pid != "" {
			if err := os.WriteFile(pidPath, []byte(c.pid), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		s.limit.reset("gate")
		before := logs.Len()
		s.Cycle(ctx)
		entries := logs.All()[before:]
		if len(entries) != 1 || entries[0].Level != zapcore.ErrorLevel || !strings.Contains(entries[0].Message, c.why) ||
			!strings.Contains(entries[0].Message, "no heartbeat sent") {
			t.Errorf("%s: logged %v, want one error containing %q", c.name, entries, c.why)
		}
	}
	// keepalived alive (our own pid stands in): heartbeats resume, and the
	// gated cycles consumed no sequence number.
	if err := os.WriteFile(pidPath, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.Cycle(ctx)
	if got := hm.queued(testKey); !reflect.DeepEqual(got, []uint64{1}) {
		t.Fatalf("after the gate: %v, want [1]", got)
	}
	if logs.FilterMessage("keepalived is running again; heartbeats resume").Len() != 1 {
		t.Error("no log line when heartbeats resume")
	}
}

// bigSource reports one LB with many members under random-looking ids.
type bigSource struct{ rows []stats.Row }

func (b bigSource) LoadBalancers() ([]string, error) { return []string{"lb"}, nil }
func (b bigSource) State(string) LBState             { return LBState{Running: true} }
func (b bigSource) ShowStat(context.Context, string, *StatScratch) ([]stats.Row, error) {
	return b.rows, nil
}

// uuid returns a deterministic but incompressible-looking UUID.
func uuid(n int) string {
	h := uint64(n)*0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019
	h2 := h*0xBF58476D1CE4E5B9 ^ h>>31
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", uint32(h), uint16(h>>32), uint16(h>>48)&0xfff, uint16(h2)&0xfff, h2>>16&0xffffffffffff)
}

// readingOf parses a `show stat` answer into a Reading, as a heartbeat
// does.
func readingOf(tb testing.TB, csv []byte) Reading {
	tb.Helper()
	rows, err := stats.ParseStat(csv)
	if err != nil {
		tb.Fatal(err)
	}
	r, err := FromRows(rows)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// sampleCSV renders `show stat` for listeners × members per listener.
func sampleCSV(listeners, members int) []byte {
	var b strings.Builder
	b.WriteString("# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,weight,act,bck,\n")
	n := 0
	for l := range listeners {
		lid := uuid(n)
		n++
		fmt.Fprintf(&b, "%s,FRONTEND,,,3,12,50000,%d,%d,%d,0,0,4,,,,,OPEN,,,,\n", lid, 1000+l, 48211+l, 991132+l)
		pool := uuid(n) + ":" + lid
		n++
		for m := range members {
			status := "UP"
			if m%7 == 3 {
				status = "DOWN"
			}
			fmt.Fprintf(&b, "%s,%s,0,0,0,2,,%d,320011,6601200,,0,,0,0,0,0,%s,1,1,0,\n", pool, uuid(n), m, status)
			n++
		}
		fmt.Fprintf(&b, "%s,BACKEND,0,0,0,2,5000,1516,482113,9911321,0,0,,0,0,0,0,UP,1,1,0,\n", pool)
	}
	b.WriteString("\n")
	return []byte(b.String())
}

// A heartbeat that does not fit in one UDP datagram is logged as an error
// with what it carries (§7.28); the loop goes on.
func TestDatagramTooLarge(t *testing.T) {
	rows, err := stats.ParseStat(sampleCSV(10, 400))
	if err != nil {
		t.Fatal(err)
	}
	hm := listen(t, "udp4", "127.0.0.1:0")
	log, logs := observed()
	var sent int
	s := New(Options{Config: testConfig(t.TempDir(), hm.dest()), Log: log, HAProxy: bigSource{rows}, LVS: NoLVS{},
		Sent: func(string, []byte) { sent++ }})
	s.Cycle(context.Background())
	var big []observer.LoggedEntry
	for _, e := range logs.FilterLevelExact(zapcore.ErrorLevel).All() {
		if strings.Contains(e.Message, "more than one UDP datagram can carry (65507)") {
			big = append(big, e)
		}
	}
	if len(big) != 1 {
		t.Fatalf("oversize errors: %v", logs.All())
	}
	f := big[0].ContextMap()
	if f["load_balancers"] != int64(1) || f["listeners"] != int64(10) || f["pools"] != int64(10) || f["members"] != int64(4000) {
		t.Errorf("counts in the log line: %v", f)
	}
	if n, _ := f["bytes"].(int64); n <= MaxDatagram {
		t.Errorf("bytes %v", f["bytes"])
	}
	if sent != 0 || logs.FilterMessage("heartbeat not sent").Len() != 1 {
		t.Errorf("sent %d; send errors %v", sent, logs.FilterMessage("heartbeat not sent").All())
	}
	t.Logf("%s (%v bytes)", big[0].Message, f["bytes"])
}

// The sender persists the counters after every message and a new sender
// (an agent restart) loads them: it sends zero growth, not the totals the
// HM would count twice (§7.18).
func TestSenderCountersAcrossRestart(t *testing.T) {
	base := t.TempDir()
	hm := listen(t, "udp4", "127.0.0.1:0")
	src := bigSource{sampleRows(t, "")}
	const http = "1e2d3c4b-5a69-4788-9a0b-c1d2e3f4a5b6"

	first := New(Options{Config: testConfig(base, hm.dest()), HAProxy: src, LVS: NoLVS{}})
	first.Cycle(context.Background())
	if got := stats5(hm.next(time.Second, testKey).Listeners[http]); got != [5]int64{9911321, 482113, 3, 1520, 4} {
		t.Fatalf("first agent: %v", got)
	}
	data, err := os.ReadFile(CountersPath(base))
	if err != nil || string(data) != string(readTestdata(t, "spec-counters.json")) {
		t.Fatalf("counter file %s, %v", data, err)
	}
	if st, _ := os.Stat(CountersPath(base)); st.Mode().Perm() != 0o640 {
		t.Errorf("mode %v", st.Mode().Perm())
	}

	restarted := New(Options{Config: testConfig(base, hm.dest()), HAProxy: src, LVS: NoLVS{}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- restarted.Run(ctx) }()
	m := hm.next(5*time.Second, testKey)
	cancel()
	<-done
	if m.Seq != 0 {
		t.Errorf("restarted agent starts at seq %d", m.Seq)
	}
	if got := stats5(m.Listeners[http]); got != [5]int64{0, 0, 3, 0, 0} {
		t.Fatalf("restarted agent resent totals: %v, want only conns", got)
	}
}

// Without amphora_id nothing is sent (the HM would treat an unknown id as
// a zombie amphora), and no sequence number is used.
func TestSenderNeedsAmphoraID(t *testing.T) {
	hm := listen(t, "udp4", "127.0.0.1:0")
	log, logs := observed()
	cfg := testConfig(t.TempDir(), hm.dest())
	cfg.AmphoraID = ""
	s := newSender(t, cfg, log, nil)
	s.Cycle(context.Background())
	s.Cycle(context.Background())
	if n := logs.FilterMessage("no heartbeat sent: [amphora_agent] amphora_id is not set").Len(); n != 1 {
		t.Errorf("logged %d times, want 1 (rate-limited)", n)
	}
	s.SetConfig(withConfig(cfg, func(c *config.Config) { c.AmphoraID = sampleAmphora }))
	s.Cycle(context.Background())
	if got := hm.queued(testKey); !reflect.DeepEqual(got, []uint64{0}) {
		t.Fatalf("heartbeats %v, want [0]", got)
	}
}

// lvsReading stands in for the keepalived LVS source.
type lvsReading struct {
	r   Reading
	err error
}

func (l lvsReading) LVS(context.Context) (Reading, error) { return l.r, l.err }

// LVS listeners join the message after the HAProxy ones, with deltas from
// the same counter state, and their pools keep the bare pool id (§7.16);
// an LVS error is logged and what was read is still reported.
func TestLVSListenersInMessage(t *testing.T) {
	hm := listen(t, "udp4", "127.0.0.1:0")
	log, logs := observed()
	lvs := lvsReading{
		r: Reading{
			Listeners: []ListenerReading{{ID: "udp-listener", Status: StatusOpen, Bin: 5460, Bout: 10920, Scur: 0, Stot: 42}},
			Pools: []PoolReading{{Key: "6c7d8e9f-pool", Status: "UP", Members: []MemberReading{
				{ID: "m1", Status: "UP"}, {ID: "m2", Status: "DOWN"}, {ID: "m3", Status: "MAINT"}}}},
		},
		err: errors.New("ipvsadm: partial output"),
	}
	s := New(Options{Config: testConfig(t.TempDir(), hm.dest()), Log: log, HAProxy: bigSource{sampleRows(t, "")}, LVS: lvs})
	s.Cycle(context.Background())
	m := hm.next(time.Second, testKey)
	if len(m.Listeners) != 3 || stats5(m.Listeners["udp-listener"]) != [5]int64{10920, 5460, 0, 42, 0} {
		t.Fatalf("listeners %+v", m.Listeners)
	}
	want := Pool{Status: "UP", Members: map[string]string{"m1": "UP", "m2": "DOWN", "m3": "MAINT"}}
	if !reflect.DeepEqual(m.Pools["6c7d8e9f-pool"], want) || len(m.Pools) != 3 {
		t.Fatalf("pools %+v", m.Pools)
	}
	if logs.FilterMessage("LVS listeners").Len() != 1 {
		t.Error("the LVS error was not logged")
	}
}
