//go:build interop

package interop_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/amphora-agent/amphora-agent/agent/health"
	"github.com/amphora-agent/amphora-agent/agent/health/healthtest"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/ctrlutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/hbutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/haproxy"
	"github.com/amphora-agent/amphora-agent/haproxy/stats/haproxytest"
)

// hmReport is what testdata/hm_receive.py prints per datagram.
type hmReport struct {
	Size    int            `json:"size"`
	Decoded map[string]any `json:"decoded"`
	Stats   struct {
		Deltas  bool `json:"deltas"`
		Records []struct {
			ListenerID        string `json:"listener_id"`
			AmphoraID         string `json:"amphora_id"`
			BytesIn           int64  `json:"bytes_in"`
			BytesOut          int64  `json:"bytes_out"`
			ActiveConnections int64  `json:"active_connections"`
			TotalConnections  int64  `json:"total_connections"`
			RequestErrors     int64  `json:"request_errors"`
		} `json:"records"`
	} `json:"stats"`
	Status struct {
		HealthRefreshed  bool              `json:"health_refreshed"`
		LookedUpAmphora  string            `json:"looked_up_amphora"`
		Listeners        map[string]string `json:"listeners"`
		Pools            map[string]string `json:"pools"`
		Members          map[string]string `json:"members"`
		LoadBalancerStat map[string]string `json:"loadbalancer"`
	} `json:"status"`
	WrongKey string `json:"wrong_key"`
}

// Heartbeats of the running binary, reporting a real HAProxy whose members
// are UP, DOWN, draining, disabled and unmonitored, go through the real
// health manager code (python3-octavia): status_message.unwrap_envelope
// with the configured key accepts them, heartbeat_udp.update_stats reads
// their statistics, UpdateHealthDb._update_health turns them into the
// statuses Octavia shows; the same datagrams are rejected with another key.
func TestInteropHeartbeatHealthManager(t *testing.T) {
	ctrlutil.RequireOctavia(t)
	const key = "interop-Key_42"
	hm := hbutil.NewReceiver(t)
	env := testenv.New(t)
	env.Extra = fmt.Sprintf("[health_manager]\ncontroller_ip_port_list = %s\nheartbeat_interval = 1\nheartbeat_key = %s\n", hm.Addr(), key)

	// A running load balancer laid out in the agent's base_path the way
	// upstream finds one (config, pid file, stats socket), started by the
	// test on loopback so that no root is needed.
	base := env.Path("lib")
	layout := haproxy.Layout{Base: base}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") }))
	t.Cleanup(up.Close)
	closed := freeLoopbackPort(t)
	upAddr := up.Listener.Addr().String()
	members := []hbutil.Member{
		{ID: "a0000001-0000-4000-8000-000000000001", Addr: upAddr, Weight: 1, Check: true},                 // UP
		{ID: "a0000002-0000-4000-8000-000000000002", Addr: closed, Weight: 1, Check: true},                 // DOWN
		{ID: "a0000003-0000-4000-8000-000000000003", Addr: upAddr, Weight: 0, Check: true},                 // DRAIN
		{ID: "a0000004-0000-4000-8000-000000000004", Addr: upAddr, Weight: 1, Check: true, Disabled: true}, // MAINT
		{ID: "a0000005-0000-4000-8000-000000000005", Addr: upAddr, Weight: 1},                              // no check
	}
	front := freeLoopbackPort(t)
	cfg := hbutil.Config(t, base, front, members)
	// Not under the agent's supervision: user nobody would need root.
	cfg = strings.Replace(cfg, "    user nobody\n", "", 1)
	testenv.WriteFile(t, layout.ConfigPath(hbutil.LB), cfg)
	hp := haproxytest.Start(t, haproxytest.Options{
		Config: cfg, ConfigPath: layout.ConfigPath(hbutil.LB), PidFile: layout.PidPath(hbutil.LB),
		StatsSocket: layout.SocketPath(hbutil.LB),
	})
	env.Start()
	want := map[string]string{
		members[0].ID: "UP", members[1].ID: "DOWN", members[2].ID: "DRAIN", members[3].ID: "MAINT", members[4].ID: "no check",
	}
	poolKey := hbutil.Pool + ":" + hbutil.Listener
	settled := func(m health.Message) bool {
		return reflect.DeepEqual(m.Pools[poolKey].Members, want) && m.Listeners[hbutil.Listener].Status == "OPEN"
	}
	hm.WaitFor(hbutil.Wait, key, "all member statuses settled", settled)
	// Some traffic, so that the statistics path carries numbers: the three
	// sessions show up as deltas in the following heartbeats.
	const requests = 3
	for range requests {
		resp, err := http.Get("http://" + front + "/")
		if err != nil {
			t.Fatalf("request through HAProxy: %v\n%s", err, hp.Output())
		}
		resp.Body.Close()
	}
	var datagrams [][]byte
	var msgs []health.Message
	var total int64
	for len(datagrams) < 3 {
		m, d := hm.WaitFor(hbutil.Wait, key, "all member statuses settled", settled)
		datagrams, msgs = append(datagrams, bytes.Clone(d)), append(msgs, m)
		total += m.Listeners[hbutil.Listener].Stats.TotConns
	}
	t.Logf("HAProxy master %d; heartbeat seq %d: %+v", hp.Pid(), msgs[0].Seq, msgs[0])

	// The controller's view of this LB, as the HM loads it from its DB;
	// operating statuses none of the outcomes equals, so every status the
	// HM derives is written and recorded.
	const unknown = "NOT_YET_KNOWN"
	dbMembers := map[string]any{}
	for _, m := range members {
		dbMembers[m.ID] = map[string]any{"operating_status": unknown}
	}
	dbLB := map[string]any{
		"id": hbutil.LB, "enabled": true, "provisioning_status": "ACTIVE", "operating_status": unknown,
		"listeners": map[string]any{hbutil.Listener: map[string]any{"operating_status": unknown, "protocol": "HTTP", "enabled": true}},
		"pools":     map[string]any{hbutil.Pool: map[string]any{"operating_status": unknown, "members": dbMembers}},
	}
	reports := hmReceive(t, key, datagrams, dbLB)

	for i, r := range reports {
		m := msgs[i]
		// unwrap_envelope decoded what Go decoded.
		ours, _, err := healthtest.Unwrap(datagrams[i], key)
		if err != nil {
			t.Fatal(err)
		}
		var want map[string]any
		json.Unmarshal(ours, &want)
		if !reflect.DeepEqual(r.Decoded, want) {
			t.Errorf("datagram %d: unwrap_envelope gave\n%v\nwant\n%v", i, r.Decoded, want)
		}
		// The fields heartbeat_udp.py reads: id, ver, listeners with
		// status and stats (rx, tx, conns, totconns, ereq), pools with
		// status and members; seq is present though unread.
		keys := []string{}
		for k := range r.Decoded {
			keys = append(keys, k)
		}
		if len(r.Decoded) != 5 || r.Decoded["ver"] != float64(3) || r.Decoded["id"] != env.AmphoraID {
			t.Errorf("datagram %d: top-level keys %v", i, keys)
		}
		// Statistics path: one record per listener, counted as deltas.
		if !r.Stats.Deltas || len(r.Stats.Records) != 1 {
			t.Fatalf("datagram %d: stats %+v", i, r.Stats)
		}
		rec, st := r.Stats.Records[0], m.Listeners[hbutil.Listener].Stats
		if rec.ListenerID != hbutil.Listener || rec.AmphoraID != env.AmphoraID || rec.BytesIn != st.RX || rec.BytesOut != st.TX ||
			rec.ActiveConnections != st.Conns || rec.TotalConnections != st.TotConns || rec.RequestErrors != st.Ereq {
			t.Errorf("datagram %d: stats record %+v from %+v", i, rec, st)
		}
		// Status path: the amphora's health refreshed (listener count
		// matches), listener ONLINE, and each member status mapped.
		s := r.Status
		wantMembers := map[string]string{
			members[0].ID: "ONLINE", members[1].ID: "ERROR", members[2].ID: "DRAINING",
			members[3].ID: "OFFLINE", members[4].ID: "NO_MONITOR",
		}
		if !s.HealthRefreshed || s.LookedUpAmphora != env.AmphoraID ||
			!reflect.DeepEqual(s.Listeners, map[string]string{hbutil.Listener: "ONLINE"}) ||
			!reflect.DeepEqual(s.Pools, map[string]string{hbutil.Pool: "DEGRADED"}) ||
			!reflect.DeepEqual(s.Members, wantMembers) ||
			!reflect.DeepEqual(s.LoadBalancerStat, map[string]string{hbutil.LB: "DEGRADED"}) {
			t.Errorf("datagram %d: health manager status updates %+v", i, s)
		}
		if r.WrongKey != "InvalidHMACException" {
			t.Errorf("datagram %d with a wrong key: %s", i, r.WrongKey)
		}
	}
	t.Logf("health manager: %+v", reports[0].Status)
	if total != requests {
		t.Errorf("totconns over the three heartbeats after %d requests: %d", requests, total)
	}
}

// An empty heartbeat (no load balancer) is what a fresh amphora sends; the
// real receiver accepts it with the configured key and the default key
// "None" is what an unset heartbeat_key signs with.
func TestInteropHeartbeatUnsetKey(t *testing.T) {
	ctrlutil.RequireOctavia(t)
	hm := hbutil.NewReceiver(t)
	env := testenv.New(t)
	env.Extra = fmt.Sprintf("[health_manager]\ncontroller_ip_port_list = %s\nheartbeat_interval = 1\nheartbeat_key = None\n", hm.Addr())
	env.Start()
	_, d := hm.WaitFor(hbutil.Wait, "None", "a heartbeat signed with the key None", func(health.Message) bool { return true })
	ctx, cancel := context.WithTimeout(context.Background(), ctrlutil.ScriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctrlutil.DebianPython, "-c", `
import binascii, json, sys
from octavia.amphorae.backends.health_daemon import status_message
from octavia.common import exceptions
d = binascii.unhexlify(sys.argv[1])
obj = status_message.unwrap_envelope(d, str(None))
try:
    status_message.unwrap_envelope(d, "insecure")
    wrong = "accepted"
except exceptions.InvalidHMACException as e:
    wrong = type(e).__name__
print(json.dumps({"obj": obj, "wrong": wrong}))
`, hex.EncodeToString(d))
	cmd.Env = ctrlutil.PythonEnv()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var got struct {
		Obj   map[string]any `json:"obj"`
		Wrong string         `json:"wrong"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if got.Obj["id"] != env.AmphoraID || fmt.Sprint(got.Obj["listeners"]) != "map[]" || fmt.Sprint(got.Obj["pools"]) != "map[]" || got.Wrong != "InvalidHMACException" {
		t.Fatalf("receiver saw %+v", got)
	}
}

func freeLoopbackPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// hmReceive runs testdata/hm_receive.py: the real health
// manager code on each datagram, against dbLB as the controller's
// database holds the load balancer; one report per datagram.
func hmReceive(t *testing.T, key string, datagrams [][]byte, dbLB map[string]any) []hmReport {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("testdata", "hm_receive.py"))
	if err != nil {
		t.Fatal(err)
	}
	var hexes []string
	for _, d := range datagrams {
		hexes = append(hexes, hex.EncodeToString(d))
	}
	req, _ := json.Marshal(map[string]any{"key": key, "wrong_key": key + "x", "datagrams": hexes, "db_lb": dbLB})
	ctx, cancel := context.WithTimeout(context.Background(), ctrlutil.ScriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctrlutil.DebianPython, script)
	cmd.Env = ctrlutil.PythonEnv()
	cmd.Stdin = bytes.NewReader(req)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("health manager script: %v\n%s", err, stderr.String())
	}
	var reports []hmReport
	if err := json.Unmarshal(stdout.Bytes(), &reports); err != nil || len(reports) != len(datagrams) {
		t.Fatalf("report %q: %v", stdout.String(), err)
	}
	return reports
}
