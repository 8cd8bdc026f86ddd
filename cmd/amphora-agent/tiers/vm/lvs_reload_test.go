//go:build vm

package vm_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/health"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/ctrlutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/lvsutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
)

// oldKeepalived is a keepalived_cmd that says it is keepalived 2.0.10 and
// runs the image's: the agent then restarts listeners on reload, as it did
// for every keepalived before it read the version.
const oldKeepalived = "/usr/local/sbin/keepalived-2.0.10"

// lvsChange is one change of the UDP listener sent by the controller's
// driver, and what it must lead to: the real servers of the UDP VIP in
// IPVS (address:port -> weight) and the members' statuses in the
// heartbeats.
type lvsChange struct {
	name    string
	udp     lvsutil.Listener
	ipvs    map[string]string
	members map[string]string
}

func udpMember(addr string) string { return fmt.Sprintf("%s:%d", addr, vmUDPPort) }

// udpListenerChanges are the changes Octavia makes to a UDP listener's
// pool, from udpListenerSpec and back to it.
func udpListenerChanges() []lvsChange {
	base := udpListenerSpec()
	with := func(f func(l *lvsutil.Listener)) lvsutil.Listener {
		l := udpListenerSpec()
		l.Members = slices.Clone(base.Members)
		f(&l)
		return l
	}
	m1, m2 := udpMember(vmServerIP), udpMember(vmServer2IP)
	up := map[string]string{vmUDPMember1: "UP", vmUDPMember2: "UP"}
	return []lvsChange{
		{"member-removed", with(func(l *lvsutil.Listener) { l.Members = l.Members[:1] }),
			map[string]string{m1: "1"}, map[string]string{vmUDPMember1: "UP"}},
		{"member-added", base, map[string]string{m1: "1", m2: "1"}, up},
		{"member-reweighted", with(func(l *lvsutil.Listener) { l.Members[0].Weight = 3 }),
			map[string]string{m1: "3", m2: "1"}, up},
		{"monitor-removed", with(func(l *lvsutil.Listener) { l.Members[0].Weight = 3; l.Monitor = nil }),
			map[string]string{m1: "3", m2: "1"}, map[string]string{vmUDPMember1: "no check", vmUDPMember2: "no check"}},
		{"monitor-added-changed", with(func(l *lvsutil.Listener) {
			l.Members[0].Weight = 3
			l.Monitor = &lvsutil.Monitor{ID: vmUDPMonitor, Delay: 3, Timeout: 3, Fall: 1}
		}), map[string]string{m1: "3", m2: "1"}, up},
	}
}

// ipvsReals are the real servers of the UDP VIP in the guest's IPVS table
// (ipvsadm -Ln), address:port -> weight.
func (a *amphora) ipvsReals() (map[string]string, string) {
	table := a.MustExec("ip netns exec amphora-haproxy ipvsadm -Ln")
	reals := map[string]string{}
	in := false
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && (f[0] == "UDP" || f[0] == "TCP" || f[0] == "SCTP"):
			in = f[0] == "UDP" && f[1] == fmt.Sprintf("%s:%d", vmVIP, vmUDPPort)
		case in && len(f) >= 4 && f[0] == "->":
			reals[f[1]] = f[3]
		}
	}
	return reals, table
}

func (a *amphora) waitIPVS(t *testing.T, timeout time.Duration, what string, want map[string]string) {
	t.Helper()
	var table string
	defer func() {
		if t.Failed() {
			t.Logf("%s: the last IPVS table:\n%s", what, table)
		}
	}()
	testenv.WaitFor(t, timeout, what+": IPVS "+fmt.Sprint(want), func() bool {
		var got map[string]string
		got, table = a.ipvsReals()
		return maps.Equal(got, want)
	})
}

// lvsKeepalived are the pids of the UDP and the SCTP listeners'
// keepalived.
func (a *amphora) lvsKeepalived() string {
	return strings.Join(strings.Fields(a.MustExec(fmt.Sprintf("cat /var/lib/octavia/lvs/octavia-keepalivedlvs-%s.pid /var/lib/octavia/lvs/octavia-keepalivedlvs-%s.pid", vmUDPListener, vmSCTPList))), ",")
}

// noneKept: none of the pids of before (as lvsKeepalived gives
// them) is in after.
func noneKept(before, after string) bool {
	b, a := strings.Split(before, ","), strings.Split(after, ",")
	for i := range b {
		if i < len(a) && a[i] == b[i] {
			return false
		}
	}
	return true
}

// asks asks a listener through the VIP, a new flow each time, until
// stopped, counting the asks that got no answer and the longest run of
// them.
type asks struct {
	ok, failed, run, longest atomic.Int64
	stop, done               chan struct{}
}

func startAsks(t *testing.T, ask func() (string, error)) *asks {
	u := &asks{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(u.done)
		for {
			select {
			case <-u.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := ask(); err != nil {
				u.failed.Add(1)
				if r := u.run.Add(1); r > u.longest.Load() {
					u.longest.Store(r)
				}
				continue
			}
			u.ok.Add(1)
			u.run.Store(0)
		}
	}()
	t.Cleanup(u.halt)
	return u
}

// counts are the asks so far: answered, unanswered, the longest run of
// unanswered ones.
type counts struct{ ok, failed, longest int64 }

func (u *asks) counts() counts { return counts{u.ok.Load(), u.failed.Load(), u.longest.Load()} }

func (c counts) since(before counts) counts {
	return counts{c.ok - before.ok, c.failed - before.failed, c.longest}
}

func (c counts) String() string {
	return fmt.Sprintf("%d of %d unanswered (longest run %d)", c.failed, c.ok+c.failed, c.longest)
}

func (u *asks) halt() {
	select {
	case <-u.stop:
	default:
		close(u.stop)
	}
	<-u.done
}

// flaps counts the heartbeats that would turn the UDP pool or a member
// ERROR (DOWN) or leave the listener out, other than those the test asked
// for by stopping a member.
type flaps struct{ heartbeats, bad int }

func (f *flaps) see(m health.Message, expectDown string) {
	f.heartbeats++
	p, ok := m.Pools[vmUDPPool]
	if !ok || p.Status != "UP" {
		f.bad++
		return
	}
	for id, st := range p.Members {
		if (st == "DOWN" || st == "RESTARTING") && id != expectDown {
			f.bad++
			return
		}
	}
}

// testUDPListenerChanges sends the UDP listener's changes twice while a
// client asks through the VIP: first with the agent told keepalived is
// 2.0.10 (each reload a restart, as before), then with the image's own
// keepalived (2.2.7: each reload a SIGHUP). Each change must reach IPVS
// and the heartbeats either way; a member that is down across a reload
// must stay down and come back when it answers again (keepalived issue
// #1163). The failed asks are printed, not asserted.
func testUDPListenerChanges(t *testing.T, a *amphora, n *vmNet, ctl *ctrlutil.HAPController, specFile string) {
	conf := "/etc/octavia/amphora-agent.conf"
	restartAgent := func() {
		t.Helper()
		old := a.mainPID()
		a.MustExec("systemctl restart amphora-agent.service")
		a.waitNewAgent(old, 2*time.Minute)
	}
	send := func(udp lvsutil.Listener) {
		t.Helper()
		data, err := json.Marshal([]lvsutil.Listener{udp, sctpListenerSpec()})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(specFile, data, 0o600); err != nil {
			t.Fatal(err)
		}
		ctl.Run("lvs-update", nil)
	}
	type figures struct {
		udp, sctp, udpDown counts
		flaps              flaps
		took               time.Duration
	}
	results := map[string]figures{}
	for _, mode := range []string{"restart", "sighup"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "restart" {
				a.MustExec(fmt.Sprintf("printf '#!/bin/sh\\n[ \"$1\" = --version ] && { echo \"Keepalived v2.0.10 (11/12,2018)\" >&2; exit 0; }\\nexec /usr/sbin/keepalived \"$@\"\\n' > %s && chmod 755 %s", oldKeepalived, oldKeepalived))
				a.MustExec(fmt.Sprintf("sed -i '/^\\[amphora_agent\\]/a keepalived_cmd = %s' %s", oldKeepalived, conf))
				t.Cleanup(func() { a.MustExec(fmt.Sprintf("sed -i '\\#^keepalived_cmd = %s#d' %s", oldKeepalived, conf)) })
			} else {
				a.MustExec(fmt.Sprintf("sed -i '\\#^keepalived_cmd = %s#d' %s", oldKeepalived, conf))
			}
			restartAgent()
			udpServed(t, n, time.Minute, "udp-member-1", "udp-member-2")
			a.udpMembers(t, time.Minute, "UP", "UP")
			a.sctpMembers(t, time.Minute, "UP", "UP")

			var fl flaps
			udp, sctp := startAsks(t, n.udpAsk), startAsks(t, n.sctpAsk)
			start := time.Now()
			for _, c := range udpListenerChanges() {
				pids := a.lvsKeepalived()
				at := time.Now()
				send(c.udp)
				a.waitIPVS(t, time.Minute, c.name, c.ipvs)
				a.hb.WaitFor(time.Minute, vmKey, c.name+": members "+fmt.Sprint(c.members), func(m health.Message) bool {
					fl.see(m, "")
					p, ok := m.Pools[vmUDPPool]
					return ok && reflect.DeepEqual(p.Members, c.members) && m.Listeners[vmUDPListener].Status == "OPEN"
				})
				now := a.lvsKeepalived()
				t.Logf("%s: %s in IPVS and the heartbeats after %v (UDP,SCTP keepalived %s → %s)", mode, c.name, time.Since(at).Round(100*time.Millisecond), pids, now)
				switch {
				case mode == "restart" && !noneKept(pids, now):
					t.Errorf("%s: %s: keepalived %s → %s; want both restarted", mode, c.name, pids, now)
				case mode == "sighup" && now != pids:
					t.Errorf("%s: %s: keepalived %s → %s; want both reloaded in place", mode, c.name, pids, now)
				}
			}
			changes := figures{udp: udp.counts(), sctp: sctp.counts(), flaps: fl, took: time.Since(start)}

			// A member down across a reload: it stays out of IPVS and DOWN,
			// and comes back once it answers again (asks to it go
			// unanswered until its check takes it out).
			n.udp[1].Stop()
			a.udpMembers(t, time.Minute, "UP", "DOWN")
			back := lvsChange{name: "reweighted-while-member-down", udp: udpListenerSpec(),
				ipvs: map[string]string{udpMember(vmServerIP): "1"}, members: map[string]string{vmUDPMember1: "UP", vmUDPMember2: "DOWN"}}
			send(back.udp)
			a.waitIPVS(t, time.Minute, back.name, back.ipvs)
			a.hb.WaitFor(time.Minute, vmKey, back.name, func(m health.Message) bool {
				return reflect.DeepEqual(m.Pools[vmUDPPool].Members, back.members)
			})
			if err := n.udp[1].Start(); err != nil {
				t.Fatal(err)
			}
			a.waitIPVS(t, time.Minute, "member 2 answering again", map[string]string{udpMember(vmServerIP): "1", udpMember(vmServer2IP): "1"})
			a.udpMembers(t, time.Minute, "UP", "UP")
			udp.halt()
			sctp.halt()
			changes.udpDown = udp.counts().since(changes.udp)
			results[mode] = changes
			t.Logf("%s: across 5 listener changes in %v, through the VIP: UDP %v, SCTP %v (2 s and 3 s timeouts); %d of %d heartbeats with the UDP pool or a member DOWN or RESTARTING, or the pool missing; then UDP with a member stopped and a reload: %v",
				mode, changes.took.Round(time.Second), changes.udp, changes.sctp, fl.bad, fl.heartbeats, changes.udpDown)
		})
	}
	for _, mode := range []string{"restart", "sighup"} {
		r := results[mode]
		t.Logf("%-7s across the 5 changes: UDP %v; SCTP %v; %d of %d heartbeats flapping", mode, r.udp, r.sctp, r.flaps.bad, r.flaps.heartbeats)
	}
	t.Logf("%s", a.MustExec("journalctl -u amphora-agent.service -o cat --no-pager | grep -i \"keepalived's version\" | tail -3"))
}

// lvsSpecFile writes the first --lvs-spec-file: the listeners of spec.
func lvsSpecFile(t *testing.T, spec string) string {
	path := filepath.Join(t.TempDir(), "lvs-spec.json")
	if err := os.WriteFile(path, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
