package health

import (
	"context"

	"github.com/amphora-agent/amphora-agent/keepalived"
	"github.com/amphora-agent/amphora-agent/keepalived/ipvs"
)

// lvsOpen is every reported LVS listener's status, as upstream.
const lvsOpen = "OPEN"

// KernelLVS is the LVSSource of an amphora: the listeners whose keepalived
// runs, matched against the kernel's IPVS table (read once per heartbeat,
// and only while a listener has a virtual server), as
// keepalived.LVSLayout.LVSStates lays out (health-and-config §2.6).
type KernelLVS struct {
	Layout keepalived.LVSLayout
	IPVS   ipvs.Reader
}

func (k KernelLVS) LVS(ctx context.Context) (Reading, error) {
	states, err := k.Layout.LVSStates(ctx, k.IPVS)
	var r Reading
	for _, s := range states {
		r.Listeners = append(r.Listeners, ListenerReading{ID: s.ID, Status: lvsOpen,
			Bin: s.Stats.InBytes, Bout: s.Stats.OutBytes, Scur: s.ActiveConns, Stot: s.Stats.Conns})
		if s.Pool == nil {
			continue
		}
		p := PoolReading{Key: s.Pool.ID, Status: s.Pool.Status, Members: make([]MemberReading, 0, len(s.Pool.Members))}
		for _, m := range s.Pool.Members {
			p.Members = append(p.Members, MemberReading{ID: m.ID, Status: m.Status})
		}
		r.Pools = append(r.Pools, p)
	}
	return r, err
}
