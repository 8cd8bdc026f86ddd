//go:build interop

package interop_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/health"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/ctrlutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/hbutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/lvsutil"
)

const (
	ilUDPListener = "c1000001-0000-4000-8000-000000000001"
	ilUDPPool     = "c1000002-0000-4000-8000-000000000002"
	ilUDPMember1  = "c1000003-0000-4000-8000-000000000003"
	ilUDPMember2  = "c1000004-0000-4000-8000-000000000004"
	ilSCTPList    = "c2000001-0000-4000-8000-000000000001"
	ilSCTPPool    = "c2000002-0000-4000-8000-000000000002"
	ilSCTPMon     = "c2000003-0000-4000-8000-000000000003"
	ilSCTPMember  = "c2000004-0000-4000-8000-000000000004"
)

// lvsCreateResult is what the lvs-create phase returns: the keepalived
// configs the driver uploaded, by listener id.
type lvsCreateResult struct {
	LVSConfigs map[string]string `json:"lvs_configs"`
}

// A load balancer with an HTTP listener gains a UDP and an SCTP listener
// through the real controller driver: update_amphora_listeners sends all
// three (keepalived configs rendered by Octavia's LVS templater), then the
// driver's reload, get_all_listeners and delete_listener for the LVS ones,
// none raising. The heartbeats report the LVS listeners and pools and the
// real health-manager code puts their statuses where the controller
// expects them.
//
// This host's kernel has no IPVS, and keepalived's checker exits at once
// without it (taking keepalived down), so here keepalived_cmd runs the real
// keepalived with --vrrp: configs are checked, started, restarted, stopped
// and deleted by the agent as on an amphora, but nothing programs IPVS and
// no checker runs. What is testable here is therefore what needs no
// kernel table: the listeners OPEN with zero counters, each pool under its
// bare id, a pool without monitor UP with its members "no check", a
// disabled member MAINT, a monitored pool with no real server DOWN with
// its members RESTARTING (no checker pid file yet). Counters and
// UP/DOWN from the kernel's table are the VM tier's (TestVMSingleAmphora).
func TestInteropLVSListeners(t *testing.T) {
	const key = "interop-lvs"
	hm := hbutil.NewReceiver(t)
	wrapper := filepath.Join(t.TempDir(), "keepalived")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\nexec /usr/sbin/keepalived --vrrp \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var base string
	f := newHAPFixture(t, func(f *hapFixture) []string {
		m := f.lb.Members[0].Addr
		return []string{"--namespace", f.ns, "--lvs-spec", lvsutil.SpecArg(t,
			lvsutil.Listener{ID: ilUDPListener, Protocol: "UDP", Port: 5353, PoolID: ilUDPPool, Members: []lvsutil.Member{
				{ID: ilUDPMember1, Address: m, Port: 5353, Weight: 1, Enabled: true},
				{ID: ilUDPMember2, Address: f.lb.Members[1].Addr, Port: 5353, Weight: 1, Enabled: false}}},
			lvsutil.Listener{ID: ilSCTPList, Protocol: "SCTP", Port: 3868, PoolID: ilSCTPPool,
				Monitor: &lvsutil.Monitor{ID: ilSCTPMon, Delay: 2, Timeout: 1, Fall: 1},
				Members: []lvsutil.Member{{ID: ilSCTPMember, Address: m, Port: 3868, Weight: 1, Enabled: true}}},
		)}
	}, func(f *hapFixture) {
		base = f.base
		f.env.Extra += fmt.Sprintf("keepalived_cmd = %s\n\n[health_manager]\ncontroller_ip_port_list = %s\nheartbeat_interval = 1\nheartbeat_key = %s\n",
			wrapper, hm.Addr(), key)
	})
	defer f.finish()
	lvsDir := filepath.Join(base, "lvs")
	t.Cleanup(func() { lvsutil.KillKeepalived(t, lvsDir) })

	f.ctl.Run("create", nil)
	create := f.ctl.Run("lvs-create", nil)
	// Each LVS listener: upload then reload (which starts it); then the
	// HAProxy config and its reload.
	want := []string{"get_api_version", "get_info", "upload_udp_config", "reload_listener", "upload_udp_config", "reload_listener",
		"upload_config", "reload_listener"}
	if got := create.CallNames(); !reflect.DeepEqual(got, want) {
		t.Fatalf("lvs-create: the driver called %v, want %v", got, want)
	}
	res := hapResult[lvsCreateResult](t, create)
	for _, id := range []string{ilUDPListener, ilSCTPList} {
		stored, err := os.ReadFile(filepath.Join(lvsDir, "octavia-keepalivedlvs-"+id+".conf"))
		if err != nil || string(stored) != res.LVSConfigs[id] || !strings.Contains(string(stored), "net_namespace "+f.ns) {
			t.Fatalf("listener %s: stored config differs from the upload (%v):\n%s", id, err, stored)
		}
		if pid := lvsutil.Pid(lvsDir, id); pid == 0 || !f.inNamespace(pid) {
			t.Fatalf("listener %s: no keepalived running in %s (pid %d)\n%s", id, f.ns, pid, f.env.Output())
		}
	}

	// The driver's reload of the load balancer reloads each LVS listener:
	// in place (SIGHUP), as this host's keepalived (2.2.2 or later:
	// bookworm's 2.2.7) applies member changes on a reload.
	before := lvsutil.Pid(lvsDir, ilUDPListener)
	reload := f.ctl.Run("lvs-reload", nil)
	if got := reload.CallNames(); !slices.Contains(got, "reload_listener") || !slices.Contains(got, "get_all_listeners") {
		t.Fatalf("lvs-reload: %v", got)
	}
	f.checkListeners(hapResult[map[string][]map[string]any](t, reload)["listeners"],
		// SCTP listeners are "UDP" too, as upstream says.
		map[string]string{ctrlutil.HAPListener: "HTTP", ilUDPListener: "UDP", ilSCTPList: "UDP"})
	if after := lvsutil.Pid(lvsDir, ilUDPListener); after == 0 || after != before {
		t.Errorf("reload replaced the UDP listener's keepalived (%d, then %d) instead of reloading it", before, after)
	}

	// Heartbeats: three listeners, the LVS ones OPEN with zero counters
	// (no kernel table), pools under their bare ids.
	wantPools := map[string]health.Pool{
		ilUDPPool:  {Status: "UP", Members: map[string]string{ilUDPMember1: "no check", ilUDPMember2: "MAINT"}},
		ilSCTPPool: {Status: "DOWN", Members: map[string]string{ilSCTPMember: "RESTARTING"}},
	}
	settled := func(m health.Message) bool {
		for id, p := range wantPools {
			if !reflect.DeepEqual(m.Pools[id], p) {
				return false
			}
		}
		return len(m.Listeners) == 3 && m.Listeners[ilUDPListener].Status == "OPEN" && m.Listeners[ilSCTPList].Status == "OPEN"
	}
	m, datagram := hm.WaitFor(30*time.Second, key, "the LVS listeners and pools", settled)
	if m.Listeners[ilUDPListener].Stats != (health.Stats{}) {
		t.Errorf("UDP listener counters without IPVS: %+v", m.Listeners[ilUDPListener].Stats)
	}

	// The health manager, with the controller's database view of the LB.
	const unknown = "NOT_YET_KNOWN"
	dbLB := map[string]any{
		"id": ctrlutil.HAPLB, "enabled": true, "provisioning_status": "ACTIVE", "operating_status": unknown,
		"listeners": map[string]any{
			ctrlutil.HAPListener: map[string]any{"operating_status": unknown, "protocol": "HTTP", "enabled": true},
			ilUDPListener:        map[string]any{"operating_status": unknown, "protocol": "UDP", "enabled": true},
			ilSCTPList:           map[string]any{"operating_status": unknown, "protocol": "SCTP", "enabled": true},
		},
		"pools": map[string]any{
			ilUDPPool: map[string]any{"operating_status": unknown, "members": map[string]any{
				ilUDPMember1: map[string]any{"operating_status": unknown}, ilUDPMember2: map[string]any{"operating_status": unknown}}},
			ilSCTPPool: map[string]any{"operating_status": unknown, "members": map[string]any{
				ilSCTPMember: map[string]any{"operating_status": unknown}}},
		},
	}
	r := hmReceive(t, key, [][]byte{datagram}, dbLB)[0]
	s := r.Status
	t.Logf("health manager on %+v:\n%+v", m, s)
	if !s.HealthRefreshed {
		t.Errorf("listener count gate: the health manager did not refresh the amphora's health (3 listeners sent)")
	}
	for _, id := range []string{ctrlutil.HAPListener, ilUDPListener, ilSCTPList} {
		if s.Listeners[id] != "ONLINE" {
			t.Errorf("listener %s: %q, want ONLINE", id, s.Listeners[id])
		}
	}
	if s.Pools[ilUDPPool] != "ONLINE" || s.Pools[ilSCTPPool] != "ERROR" {
		t.Errorf("pools: %v; want UDP ONLINE, SCTP ERROR", s.Pools)
	}
	if s.Members[ilUDPMember1] != "NO_MONITOR" || s.Members[ilUDPMember2] != "OFFLINE" {
		t.Errorf("UDP members: %v; want NO_MONITOR, OFFLINE", s.Members)
	}
	if st, ok := s.Members[ilSCTPMember]; ok {
		t.Errorf("a RESTARTING member's status was written: %s", st)
	}
	if s.LoadBalancerStat[ctrlutil.HAPLB] != "ERROR" {
		t.Errorf("load balancer: %v, want ERROR (a pool is DOWN)", s.LoadBalancerStat)
	}
	var udpRecord bool
	for _, rec := range r.Stats.Records {
		udpRecord = udpRecord || rec.ListenerID == ilUDPListener && rec.AmphoraID == f.env.AmphoraID
	}
	if len(r.Stats.Records) != 3 || !udpRecord {
		t.Errorf("statistics records: %+v", r.Stats.Records)
	}

	// delete_listener for each LVS listener: keepalived stops, its files go.
	del := f.ctl.Run("lvs-delete", nil)
	got := hapResult[map[string][]map[string]any](t, del)["listeners"]
	f.checkListeners(got, map[string]string{ctrlutil.HAPListener: "HTTP"})
	for _, id := range []string{ilUDPListener, ilSCTPList} {
		if _, err := os.Stat(filepath.Join(lvsDir, "octavia-keepalivedlvs-"+id+".conf")); !os.IsNotExist(err) {
			t.Errorf("listener %s: config left after delete: %v", id, err)
		}
	}
	hm.WaitFor(30*time.Second, key, "only the HTTP listener", func(m health.Message) bool {
		_, udp := m.Pools[ilUDPPool]
		return len(m.Listeners) == 1 && !udp
	})
}
