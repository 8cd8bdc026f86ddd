package metrics

import (
	"context"
	"io"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/metrics/promex"
	"github.com/amphora-agent/amphora-agent/keepalived"
	"github.com/amphora-agent/amphora-agent/keepalived/ipvs"
)

// LVSSource is one scrape's reading of the UDP and SCTP listeners for the
// metrics page of PROMETHEUS listeners: their IPVS counters under the
// Octavia families HAProxy's series are translated to (package promex),
// with the same labels (listener; pool as "<pool>:<listener>", the shape
// of HAProxy's backend names; member). Upstream's prometheus-proxy leaves
// these listeners out.
type LVSSource []keepalived.LVSListenerState

// lvsStates are the state labels HAProxy 2.6 exports, in its order.
var (
	lvsListenerStates = []string{"DOWN", "UP"}
	lvsMemberStates   = []string{"DOWN", "UP", "MAINT", "DRAIN", "NOLB"}
)

// WriteSamples writes the sample lines of one Octavia family (it is a
// promex.Source). Families IPVS has no counter for get nothing.
func (m LVSSource) WriteSamples(w io.Writer, family string) error {
	var b []byte
	for _, l := range m {
		b = appendLVSSamples(b, l, family)
	}
	if len(b) == 0 {
		return nil
	}
	_, err := w.Write(b)
	return err
}

// The counters each level has, by Octavia family.
var (
	lvsListenerCounters = map[string]func(keepalived.LVSListenerState) uint64{
		"octavia_listener_current_sessions":  func(l keepalived.LVSListenerState) uint64 { return l.ActiveConns },
		"octavia_listener_sessions_total":    func(l keepalived.LVSListenerState) uint64 { return l.Stats.Conns },
		"octavia_listener_connections_total": func(l keepalived.LVSListenerState) uint64 { return l.Stats.Conns },
		"octavia_listener_bytes_in_total":    func(l keepalived.LVSListenerState) uint64 { return l.Stats.InBytes },
		"octavia_listener_bytes_out_total":   func(l keepalived.LVSListenerState) uint64 { return l.Stats.OutBytes },
	}
	lvsPoolCounters = map[string]func(keepalived.LVSListenerState) uint64{
		"octavia_pool_current_sessions":          func(l keepalived.LVSListenerState) uint64 { return l.ActiveConns },
		"octavia_pool_sessions_total":            func(l keepalived.LVSListenerState) uint64 { return l.Stats.Conns },
		"octavia_pool_connection_attempts_total": func(l keepalived.LVSListenerState) uint64 { return l.Stats.Conns },
		"octavia_pool_bytes_in_total":            func(l keepalived.LVSListenerState) uint64 { return l.Stats.InBytes },
		"octavia_pool_bytes_out_total":           func(l keepalived.LVSListenerState) uint64 { return l.Stats.OutBytes },
		"octavia_pool_active_members": func(l keepalived.LVSListenerState) uint64 {
			var n uint64
			for _, m := range l.Pool.Members {
				if m.InKernel && m.Weight > 0 {
					n++
				}
			}
			return n
		},
	}
	// Only members the kernel has as real servers have counters.
	lvsMemberCounters = map[string]func(keepalived.LVSMemberState) uint64{
		"octavia_member_current_sessions":          func(m keepalived.LVSMemberState) uint64 { return m.ActiveConns },
		"octavia_member_sessions_total":            func(m keepalived.LVSMemberState) uint64 { return m.Stats.Conns },
		"octavia_member_connection_attempts_total": func(m keepalived.LVSMemberState) uint64 { return m.Stats.Conns },
		"octavia_member_bytes_in_total":            func(m keepalived.LVSMemberState) uint64 { return m.Stats.InBytes },
		"octavia_member_bytes_out_total":           func(m keepalived.LVSMemberState) uint64 { return m.Stats.OutBytes },
		"octavia_member_weight":                    func(m keepalived.LVSMemberState) uint64 { return uint64(max(m.Weight, 0)) },
	}
)

// appendLVSSamples appends the samples of one family for listener l, its
// pool and its members.
func appendLVSSamples(b []byte, l keepalived.LVSListenerState, family string) []byte {
	listener := `listener="` + escapeLabel(l.ID) + `"`
	if family == "octavia_listener_status" {
		state := "DOWN"
		if l.Found {
			state = "UP"
		}
		b = appendStates(b, family, listener, lvsListenerStates, state)
	} else if v := lvsListenerCounters[family]; v != nil {
		b = appendSample(b, family, listener, v(l))
	}
	if l.Pool == nil {
		return b
	}
	pool := `pool="` + escapeLabel(l.Pool.ID+":"+l.ID) + `"`
	if family == "octavia_pool_status" {
		b = appendStates(b, family, pool, lvsListenerStates, l.Pool.Status)
	} else if v := lvsPoolCounters[family]; v != nil {
		b = appendSample(b, family, pool, v(l))
	}
	v := lvsMemberCounters[family]
	for _, m := range l.Pool.Members {
		member := pool + `,member="` + escapeLabel(m.ID) + `"`
		if family == "octavia_member_status" {
			b = appendStates(b, family, member, lvsMemberStates, memberState(m.Status))
		} else if v != nil && m.InKernel {
			b = appendSample(b, family, member, v(m))
		}
	}
	return b
}

// appendStates writes one sample per state label, 1 for the current one,
// as HAProxy exports its status families.
func appendStates(b []byte, family, labels string, states []string, current string) []byte {
	for _, s := range states {
		v := uint64(0)
		if s == current {
			v = 1
		}
		b = appendSample(b, family, labels+`,state="`+s+`"`, v)
	}
	return b
}

// memberState is a member's heartbeat status as HAProxy's state label:
// unchecked members count as UP, as HAProxy reports its unchecked servers,
// and a listener waiting for its restart as DOWN.
func memberState(status string) string {
	switch status {
	case keepalived.MemberUp, keepalived.MemberNoCheck:
		return "UP"
	case keepalived.MemberDrain:
		return "DRAIN"
	case keepalived.MemberMaint:
		return "MAINT"
	}
	return "DOWN"
}

func appendSample(b []byte, family, labels string, v uint64) []byte {
	b = append(b, family...)
	b = append(b, '{')
	b = append(b, labels...)
	b = append(b, "} "...)
	b = strconv.AppendUint(b, v, 10)
	return append(b, '\n')
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// escapeLabel escapes a label value for the text format.
func escapeLabel(v string) string { return labelEscaper.Replace(v) }

// LVSSeries gives each scrape the UDP and SCTP listeners' series: the
// IPVS table read once (only while such a listener runs). A failed read
// leaves those series out of that scrape and is logged.
func LVSSeries(layout keepalived.LVSLayout, table ipvs.Reader, log *zap.Logger) func(context.Context) []promex.Source {
	return func(ctx context.Context) []promex.Source {
		states, err := layout.LVSStates(ctx, table)
		if err != nil {
			log.Warn("metrics: reading the UDP and SCTP listeners", zap.Error(err))
		}
		if len(states) == 0 {
			return nil
		}
		return []promex.Source{LVSSource(states)}
	}
}
