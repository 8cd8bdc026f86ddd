package metrics

import (
	"bytes"
	"strings"
	"testing"

	"github.com/amphora-agent/amphora-agent/keepalived"
	"github.com/amphora-agent/amphora-agent/keepalived/ipvs"
)

// The listener keepalived's tests read from a config Octavia's templater
// rendered (two members in the kernel, one of them drained, one disabled,
// an IPv6 one whose virtual service is missing), as the metrics page
// shows it.
func TestLVSMetrics(t *testing.T) {
	const tListener, tPool = "udp-listener", "udp-pool"
	const tM1, tM2, tM3, tM4 = "member-up", "member-drained", "member-disabled", "member-v6-down"
	st := ipvs.Stats{Conns: 5, InPkts: 5, OutPkts: 4, InBytes: 180, OutBytes: 320}
	states := []keepalived.LVSListenerState{{ID: tListener, Found: true, Stats: st, ActiveConns: 1,
		Pool: &keepalived.LVSPoolState{ID: tPool, Status: keepalived.PoolUp, Members: []keepalived.LVSMemberState{
			{ID: tM1, Status: keepalived.MemberUp, InKernel: true, Weight: 1, ActiveConns: 1, InActConns: 4, Stats: st},
			{ID: tM2, Status: keepalived.MemberDrain, InKernel: true, Weight: 0},
			{ID: tM3, Status: keepalived.MemberMaint},
			{ID: tM4, Status: keepalived.MemberDown},
		}}}}
	pool := `pool="` + tPool + ":" + tListener + `"`
	cases := map[string][]string{
		"octavia_listener_status": {
			`octavia_listener_status{listener="` + tListener + `",state="DOWN"} 0`,
			`octavia_listener_status{listener="` + tListener + `",state="UP"} 1`},
		"octavia_listener_bytes_in_total":    {`octavia_listener_bytes_in_total{listener="` + tListener + `"} 180`},
		"octavia_listener_connections_total": {`octavia_listener_connections_total{listener="` + tListener + `"} 5`},
		"octavia_pool_active_members":        {`octavia_pool_active_members{` + pool + `} 1`},
		"octavia_member_weight": {
			`octavia_member_weight{` + pool + `,member="` + tM1 + `"} 1`,
			`octavia_member_weight{` + pool + `,member="` + tM2 + `"} 0`},
		"octavia_member_bytes_out_total": {`octavia_member_bytes_out_total{` + pool + `,member="` + tM1 + `"} 320`,
			`octavia_member_bytes_out_total{` + pool + `,member="` + tM2 + `"} 0`},
		"octavia_member_status": func() []string {
			var out []string
			for _, m := range []struct{ id, state string }{{tM1, "UP"}, {tM2, "DRAIN"}, {tM3, "MAINT"}, {tM4, "DOWN"}} {
				for _, s := range []string{"DOWN", "UP", "MAINT", "DRAIN", "NOLB"} {
					v := "0"
					if s == m.state {
						v = "1"
					}
					out = append(out, `octavia_member_status{`+pool+`,member="`+m.id+`",state="`+s+`"} `+v)
				}
			}
			return out
		}(),
		// Families IPVS has nothing for.
		"octavia_member_check_failures_total": nil,
		"octavia_loadbalancer_listeners":      nil,
	}
	for family, want := range cases {
		var b bytes.Buffer
		if err := LVSSource(states).WriteSamples(&b, family); err != nil {
			t.Fatal(err)
		}
		got := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
		if len(want) == 0 {
			if b.Len() != 0 {
				t.Errorf("%s: %q", family, b.String())
			}
			continue
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s:\n got %s\nwant %s", family, strings.Join(got, "\n     "), strings.Join(want, "\n     "))
		}
	}
}
