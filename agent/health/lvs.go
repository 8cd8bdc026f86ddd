package health

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/amphora-agent/amphora-agent/keepalived"
	"github.com/amphora-agent/amphora-agent/keepalived/ipvs"
)

// lvsOpen is every reported LVS listener's status, as upstream.
const lvsOpen = "OPEN"

// KernelLVS is the LVSSource of an amphora: the listeners whose keepalived
// runs, matched against the kernel's IPVS table (read once per heartbeat,
// and only while a listener has a virtual server), as
// keepalived.LVSLayout.LVSStates lays out (agent/health/README.md, "UDP
// and SCTP listeners").
//
// While Busy says the agent itself is starting, restarting or restoring a
// listener's keepalived, a listener that was in the previous reading is
// reported from its last live reading (at most MaxBusyStandIn after it):
// the health manager would otherwise mark it and its pool OFFLINE for
// the few seconds a controller's reload takes. Use it by pointer.
type KernelLVS struct {
	Layout keepalived.LVSLayout
	IPVS   ipvs.Reader
	// Busy reports whether an operation of the agent on listener id's
	// keepalived is under way (keepalived.LVS.Busy); nil: never.
	Busy func(id string) bool
	// Now is the stand-in's clock (time.Now when nil).
	Now func() time.Time

	mu   sync.Mutex
	last map[string]lvsLast // the listeners of the previous reading
}

// lvsLast is a listener's last live reading and when it was taken.
type lvsLast struct {
	listener ListenerReading
	pool     *PoolReading
	at       time.Time
}

func (k *KernelLVS) LVS(ctx context.Context) (Reading, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := time.Now
	if k.Now != nil {
		now = k.Now
	}
	// Asked before and after the read, so that an operation that begins
	// or ends while the kernel is read still counts.
	busy := k.busy(nil)
	states, err := k.Layout.LVSStates(ctx, k.IPVS)
	busy = k.busy(busy)
	at := now()
	var r Reading
	next := make(map[string]lvsLast, len(states))
	for _, s := range states {
		if prev, ok := k.last[s.ID]; ok && busy[s.ID] && at.Sub(prev.at) <= MaxBusyStandIn {
			next[s.ID] = prev // what a half-started keepalived shows is no reading
			continue
		}
		next[s.ID] = liveLVS(s, at)
	}
	for id, prev := range k.last {
		if _, ok := next[id]; !ok && busy[id] && at.Sub(prev.at) <= MaxBusyStandIn {
			next[id] = prev
		}
	}
	// In id order, as LVSStates lists them: the builder reuses a message's
	// pools only when they come in the same order.
	ids := make([]string, 0, len(next))
	for id := range next {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		l := next[id]
		r.Listeners = append(r.Listeners, l.listener)
		if l.pool != nil {
			r.Pools = append(r.Pools, *l.pool)
		}
	}
	k.last = next
	return r, err
}

// busy adds to seen the remembered listeners Busy calls busy now.
func (k *KernelLVS) busy(seen map[string]bool) map[string]bool {
	if k.Busy == nil {
		return seen
	}
	for id := range k.last {
		if k.Busy(id) {
			if seen == nil {
				seen = map[string]bool{}
			}
			seen[id] = true
		}
	}
	return seen
}

// liveLVS is the heartbeat's reading of one listener's state.
func liveLVS(s keepalived.LVSListenerState, at time.Time) lvsLast {
	l := lvsLast{at: at, listener: ListenerReading{ID: s.ID, Status: lvsOpen,
		Bin: s.Stats.InBytes, Bout: s.Stats.OutBytes, Scur: s.ActiveConns, Stot: s.Stats.Conns}}
	if s.Pool != nil {
		p := PoolReading{Key: s.Pool.ID, Status: s.Pool.Status, Members: make([]MemberReading, 0, len(s.Pool.Members))}
		for _, m := range s.Pool.Members {
			p.Members = append(p.Members, MemberReading{ID: m.ID, Status: m.Status})
		}
		l.pool = &p
	}
	return l
}
