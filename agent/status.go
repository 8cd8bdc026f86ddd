package agent

import (
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/procwatch"
	"github.com/amphora-agent/amphora-agent/agent/status"
)

// outcomes remembers, per load balancer, the last reload and why the last
// refused config was refused, for `amphora-agent status`.
type outcomes struct {
	mu       sync.Mutex
	reloads  map[string]status.Reload
	refusals map[string]string
}

func (o *outcomes) reload(lb string, err error) {
	r := status.Reload{At: time.Now().UTC(), OK: err == nil, Result: "ok"}
	if err != nil {
		r.Result = "failed: " + err.Error()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.reloads == nil {
		o.reloads = map[string]status.Reload{}
	}
	o.reloads[lb] = r
	if err != nil {
		o.refusedLocked(lb, err)
	}
}

func (o *outcomes) refused(lb string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.refusedLocked(lb, err)
}

func (o *outcomes) refusedLocked(lb string, err error) {
	if o.refusals == nil {
		o.refusals = map[string]string{}
	}
	o.refusals[lb] = err.Error()
}

func (o *outcomes) forget(lb string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.reloads, lb)
	delete(o.refusals, lb)
}

// SetReady records that the start-up restore is over and the API serves.
func (a *Agent) SetReady() { a.ready.Store(true) }

// Live is what the running agent adds to `amphora-agent status`: its own
// process, the daemons' restart records, the last reloads and refusals.
// The caller adds the version and the heartbeat sender's state.
func (a *Agent) Live() status.Live {
	l := status.Live{
		Pid:         os.Getpid(),
		StartedAt:   a.started,
		ConfigFiles: a.files,
		Ready:       a.ready.Load(),
		Daemons:     map[string]status.History{},
		Goroutines:  runtime.NumGoroutine(),
	}
	add := func(key string, h procwatch.History) {
		l.Daemons[key] = status.History{Respawns: h.Restarts, LastExit: h.LastExit, LastExitAt: h.LastExitAt}
	}
	// The real supervisors keep histories; unit tests' fakes need not.
	each := func(kind string, runner any, ids func() ([]string, error)) {
		s, ok := runner.(interface {
			History(string) (procwatch.History, bool)
		})
		list, err := ids()
		if !ok || err != nil {
			return
		}
		for _, id := range list {
			if h, ok := s.History(id); ok {
				add(status.DaemonKey(kind, id), h)
			}
		}
	}
	each("haproxy", a.lbs, a.haproxyLayout().LoadBalancers)
	each("lvs", a.lvs, a.lvsLayout().Listeners)
	if v, ok := a.vrrp.(interface{ History() procwatch.History }); ok {
		add(status.DaemonKey("vrrp", ""), v.History())
	}
	a.outcomes.mu.Lock()
	l.Reloads = cloneMap(a.outcomes.reloads)
	l.Refusals = cloneMap(a.outcomes.refusals)
	a.outcomes.mu.Unlock()
	return l
}

func cloneMap[V any](m map[string]V) map[string]V {
	out := make(map[string]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
