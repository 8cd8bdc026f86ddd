package health

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/config"
	"github.com/amphora-agent/amphora-agent/agent/tick"
	"github.com/amphora-agent/amphora-agent/haproxy"
	"github.com/amphora-agent/amphora-agent/keepalived"
	"github.com/amphora-agent/amphora-agent/keepalived/ipvs"
)

// logEvery is how often one kind of trouble may be logged.
const logEvery = time.Minute

// Options configure a Sender. Only Config is required.
type Options struct {
	// Config is the configuration at start; SetConfig replaces it.
	// base_path is read from it once (it needs a restart upstream too).
	Config *config.Config
	Log    *zap.Logger
	// HAProxy defaults to LayoutSource over base_path, in the states
	// HAProxyState reports.
	HAProxy HAProxySource
	// HAProxyState is the default source's LayoutSource.StateOf: the
	// supervisor's word on whether an LB's HAProxy runs and whether the
	// agent is busy with it.
	HAProxyState func(lb string) (running, busy bool)
	// LVS defaults to KernelLVS over base_path/lvs and the IPVS table of
	// the configured network namespace.
	LVS LVSSource
	// LVSBusy is the default LVS source's KernelLVS.Busy: whether the
	// agent is (re)starting a listener's keepalived.
	LVSBusy func(id string) bool
	// ReadRetryBudget bounds the retries of one LB's stats read
	// (DefaultReadRetryBudget when zero).
	ReadRetryBudget time.Duration
	// ReadDeadline is how long a cycle waits for an LB's stats before its
	// last reading stands in (half the interval, at most 2 s, when zero).
	ReadDeadline time.Duration
	// SlowReadLimit is how long one LB's stats read may take before the
	// LB counts as unresponsive (the interval within 5 to 10 s when zero).
	SlowReadLimit time.Duration
	// Sent, when set, is called after each datagram is handed to the
	// kernel (tests and metrics); datagram is only valid during the call.
	Sent func(dest string, datagram []byte)
}

// Sender is the heartbeat loop. Run it once; SetConfig and Forget may be
// called from any goroutine.
type Sender struct {
	log          *zap.Logger
	haproxy      HAProxySource
	lvs          LVSSource
	base         string
	retryBudget  time.Duration
	readDeadline time.Duration
	slowRead     time.Duration
	sent         func(string, []byte)

	cfg     atomic.Pointer[config.Config]
	changed chan struct{}

	// lastCycle is when Run last finished a cycle, for a watchdog to tell
	// a slow loop from a stuck one; a time.Time keeps the monotonic
	// reading, so a clock step at boot does not look like a stall.
	lastCycle atomic.Pointer[time.Time]

	// Used by the loop goroutine only.
	builder  *Builder
	enc      Encoder
	dests    []string // the controller_ip_port_list the rotation runs over
	next     int      // index of the next destination
	v4, v6   *net.UDPConn
	limit    limiter
	gated    bool
	resolver *net.Resolver

	// state is what status shows.
	state stateRecord

	mu  sync.Mutex
	lbs map[string]*lbRead // per listed LB: what its reads keep
}

// New prepares a sender; Run starts it.
func New(o Options) *Sender {
	s := &Sender{
		log:          o.Log,
		haproxy:      o.HAProxy,
		lvs:          o.LVS,
		base:         o.Config.BasePath,
		retryBudget:  o.ReadRetryBudget,
		readDeadline: o.ReadDeadline,
		slowRead:     o.SlowReadLimit,
		sent:         o.Sent,
		changed:      make(chan struct{}, 1),
		limit:        limiter{every: logEvery},
		lbs:          map[string]*lbRead{},
		resolver:     net.DefaultResolver,
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	if s.haproxy == nil {
		s.haproxy = LayoutSource{Layout: haproxy.Layout{Base: s.base}, StateOf: o.HAProxyState}
	}
	if s.lvs == nil {
		s.lvs = &KernelLVS{Layout: keepalived.LVSLayout{Base: s.base}, IPVS: ipvs.Kernel{Namespace: o.Config.Namespace}, Busy: o.LVSBusy}
	}
	if s.retryBudget <= 0 {
		s.retryBudget = DefaultReadRetryBudget
	}
	s.cfg.Store(o.Config)
	return s
}

// SetConfig makes cfg the configuration of the next heartbeat: its key,
// destinations, amphora id, and interval (the wait already under way is
// re-timed to the new interval). Subscribe it to Agent.OnConfig.
func (s *Sender) SetConfig(cfg *config.Config) {
	if cfg == nil {
		return
	}
	s.cfg.Store(cfg)
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// Run sends the first heartbeat at once and then one per
// heartbeat_interval (re-read every cycle) until ctx ends. Nothing that
// goes wrong in a cycle stops the loop.
func (s *Sender) Run(ctx context.Context) error {
	counters, err := LoadCounters(CountersPath(s.base))
	if err != nil {
		s.log.Warn("heartbeat counter file unusable; counters start from zero", zap.Error(err))
	}
	s.builder = reusing(counters)
	defer s.closeSockets()
	s.log.Info("heartbeat sender starting", zap.String("counter_file", CountersPath(s.base)))
	for {
		s.Cycle(ctx)
		end := time.Now()
		s.lastCycle.Store(&end)
		for {
			// The next instant of the interval shared with the agent's
			// other periodic work (agent/tick), so the agent wakes once
			// for all of it.
			wait := time.Until(tick.Next(end, interval(s.cfg.Load())))
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				s.log.Info("heartbeat sender stopped")
				return nil
			case <-s.changed:
				timer.Stop()
				continue
			case <-timer.C:
			}
			break
		}
	}
}

// LastCycle is when Run last finished a cycle, sent or not (zero before
// the first). May be called from any goroutine.
func (s *Sender) LastCycle() time.Time {
	if t := s.lastCycle.Load(); t != nil {
		return *t
	}
	return time.Time{}
}

func interval(cfg *config.Config) time.Duration {
	if cfg.HeartbeatInterval <= 0 {
		return time.Second
	}
	return cfg.HeartbeatInterval
}

// Cycle is one iteration: gate, build, persist counters, send. Run calls
// it; it is exported for tests that drive the loop step by step. It must
// not run concurrently with itself or Run.
func (s *Sender) Cycle(ctx context.Context) {
	if s.builder == nil {
		counters, _ := LoadCounters(CountersPath(s.base))
		s.builder = reusing(counters)
	}
	cfg := s.cfg.Load()
	now := time.Now()
	if reason := keepalivedGate(s.base); reason != "" {
		s.state.withheld(reason)
		s.gated = true
		if ok, n := s.limit.allow("gate", now); ok {
			s.log.Error("no heartbeat sent: "+reason+"; the controller will fail this amphora over",
				zap.Int("suppressed_since_last_log", n))
		}
		return
	}
	if s.gated {
		s.gated = false
		s.limit.reset("gate")
		s.log.Info("keepalived is running again; heartbeats resume")
	}
	if cfg.AmphoraID == "" {
		s.state.withheld("[amphora_agent] amphora_id is not set")
		if ok, n := s.limit.allow("id", now); ok {
			s.log.Error("no heartbeat sent: [amphora_agent] amphora_id is not set", zap.Int("suppressed_since_last_log", n))
		}
		return
	}

	msg, c := s.build(ctx, cfg)
	s.state.update(func(st *State) { st.Suppressed, st.Seq = "", msg.Seq })
	if err := s.builder.Counters().Save(CountersPath(s.base)); err != nil {
		if ok, n := s.limit.allow("counters", now); ok {
			s.log.Warn("cannot persist heartbeat counters", zap.Error(err), zap.Int("suppressed_since_last_log", n))
		}
	}
	data, err := s.enc.Encode(msg, cfg.HeartbeatKey)
	if err != nil {
		s.log.Error("cannot encode heartbeat", zap.Error(err))
		return
	}
	fields := []zap.Field{zap.Uint64("seq", msg.Seq), zap.Int("bytes", len(data)),
		zap.Int("load_balancers", c.LoadBalancers), zap.Int("listeners", c.Listeners),
		zap.Int("pools", c.Pools), zap.Int("members", c.Members)}
	if len(data) > MaxDatagram {
		s.log.Error(fmt.Sprintf("heartbeat is %d bytes, more than one UDP datagram can carry (%d); the health manager will not receive it",
			len(data), MaxDatagram), fields...)
	}
	s.send(ctx, cfg, data, fields)
}

// build reads every running LB and the LVS listeners and assembles the
// message (agent/health/README.md, "The message").
func (s *Sender) build(ctx context.Context, cfg *config.Config) (Message, counts) {
	lbs, err := s.haproxy.LoadBalancers()
	if err != nil {
		s.log.Error("cannot list load balancers", zap.Error(err))
	}
	s.pruneCache(lbs)
	readings, reported := s.readAll(ctx, lbs, cfg)
	lvs, err := s.lvs.LVS(ctx)
	if err != nil {
		if ok, n := s.limit.allow("lvs:"+err.Error(), time.Now()); ok {
			s.log.Error("LVS listeners", zap.Error(err), zap.Int("suppressed_since_last_log", n))
		}
	}
	readings = append(readings, lvs)
	msg := s.builder.Build(cfg.AmphoraID, readings...)
	s.dropGoneCounters(msg, lvs, err)
	return msg, countReadings(reported, readings)
}
