package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/config"
	"github.com/amphora-agent/amphora-agent/haproxy"
	"github.com/amphora-agent/amphora-agent/haproxy/stats"
	"github.com/amphora-agent/amphora-agent/keepalived"
)

// Defaults of the stats read retry: a read that fails fast (socket refused
// or closed without an answer, as during a reload) is retried with growing
// pauses for up to ReadRetryBudget.
const (
	DefaultReadRetryBudget = time.Second
	firstRetryPause        = 20 * time.Millisecond
	// stopConfirm is how long an LB that was running must look stopped
	// before it counts as stopped: a reloading master unlinks or truncates
	// its pid file and writes it again.
	stopConfirm    = 250 * time.Millisecond
	resolveTimeout = 2 * time.Second
	logEvery       = time.Minute
)

// Options configure a Sender. Only Config is required.
type Options struct {
	// Config is the configuration at start; SetConfig replaces it.
	// base_path is read from it once (it needs a restart upstream too).
	Config *config.Config
	Log    *zap.Logger
	// HAProxy defaults to LayoutSource over base_path.
	HAProxy HAProxySource
	// LVS defaults to PendingLVS over base_path/lvs.
	LVS LVSSource
	// ReadRetryBudget bounds the retries of one LB's stats read
	// (DefaultReadRetryBudget when zero).
	ReadRetryBudget time.Duration
	// Sent, when set, is called after each datagram is handed to the
	// kernel (tests and metrics); datagram is only valid during the call.
	Sent func(dest string, datagram []byte)
}

// Sender is the heartbeat loop. Run it once; SetConfig and Forget may be
// called from any goroutine.
type Sender struct {
	log         *zap.Logger
	haproxy     HAProxySource
	lvs         LVSSource
	base        string
	retryBudget time.Duration
	sent        func(string, []byte)

	cfg     atomic.Pointer[config.Config]
	changed chan struct{}

	// Used by the loop goroutine only.
	builder  *Builder
	enc      Encoder
	dests    []string // the controller_ip_port_list the rotation runs over
	next     int      // index of the next destination
	v4, v6   *net.UDPConn
	limit    limiter
	gated    bool
	resolver *net.Resolver

	cacheMu sync.Mutex
	cache   map[string]*cached // per LB seen running: its last good reading
}

// New prepares a sender; Run starts it.
func New(o Options) *Sender {
	s := &Sender{
		log:         o.Log,
		haproxy:     o.HAProxy,
		lvs:         o.LVS,
		base:        o.Config.BasePath,
		retryBudget: o.ReadRetryBudget,
		sent:        o.Sent,
		changed:     make(chan struct{}, 1),
		limit:       limiter{every: logEvery},
		cache:       map[string]*cached{},
		resolver:    net.DefaultResolver,
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	if s.haproxy == nil {
		s.haproxy = LayoutSource{Layout: haproxy.Layout{Base: s.base}}
	}
	if s.lvs == nil {
		s.lvs = PendingLVS{Layout: keepalived.LVSLayout{Base: s.base}}
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

// Forget drops the cached reading of lb so that it can never stand in for
// a failed read. Call it when an LB is stopped or deleted.
func (s *Sender) Forget(lb string) {
	s.cacheMu.Lock()
	delete(s.cache, lb)
	s.cacheMu.Unlock()
}

// Run sends the first heartbeat at once and then one per
// heartbeat_interval (re-read every cycle) until ctx ends. Nothing that
// goes wrong in a cycle stops the loop.
func (s *Sender) Run(ctx context.Context) error {
	counters, err := LoadCounters(CountersPath(s.base))
	if err != nil {
		s.log.Warn("heartbeat counter file unusable; counters start from zero", zap.Error(err))
	}
	s.builder = NewBuilder(counters)
	defer s.closeSockets()
	s.log.Info("heartbeat sender starting", zap.String("counter_file", CountersPath(s.base)))
	for {
		s.Cycle(ctx)
		end := time.Now()
		for {
			wait := time.Until(end.Add(interval(s.cfg.Load())))
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
		s.builder = NewBuilder(counters)
	}
	cfg := s.cfg.Load()
	now := time.Now()
	if reason := keepalivedGate(s.base); reason != "" {
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
		if ok, n := s.limit.allow("id", now); ok {
			s.log.Error("no heartbeat sent: [amphora_agent] amphora_id is not set", zap.Int("suppressed_since_last_log", n))
		}
		return
	}

	msg, c := s.build(ctx, cfg)
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
// message (health-and-config §2.7).
func (s *Sender) build(ctx context.Context, cfg *config.Config) (Message, counts) {
	var readings []Reading
	lbs, err := s.haproxy.LoadBalancers()
	if err != nil {
		s.log.Error("cannot list load balancers", zap.Error(err))
	}
	s.pruneCache(lbs)
	reported := 0
	for _, lb := range lbs {
		if !s.haproxy.Running(lb) {
			if !s.seen(lb) || s.stopped(ctx, lb) {
				s.Forget(lb)
				continue
			}
			s.log.Debug("pid file unreadable for a moment (reload); the load balancer still runs", zap.String("lb", lb))
		}
		r, ok := s.readLB(ctx, lb)
		if !ok {
			continue
		}
		reported++
		readings = append(readings, r)
	}
	lvs, err := s.lvs.LVS(ctx)
	if err != nil {
		if ok, n := s.limit.allow("lvs:"+err.Error(), time.Now()); ok {
			s.log.Error("LVS listeners", zap.Error(err), zap.Int("suppressed_since_last_log", n))
		}
	}
	readings = append(readings, lvs)
	return s.builder.Build(cfg.AmphoraID, readings...), countReadings(reported, readings)
}

// readLB reads one LB's stats. A read that fails fast is retried briefly
// (a reload replaces the process behind the socket). If it still fails,
// the last good reading stands in once, provided the LB still runs; a
// second failure in a row leaves the LB out.
func (s *Sender) readLB(ctx context.Context, lb string) (Reading, bool) {
	start := time.Now()
	pause := firstRetryPause
	var err error
	for attempt := 1; ; attempt++ {
		var rows []stats.Row
		rows, err = s.haproxy.ShowStat(ctx, lb)
		if err == nil {
			var r Reading
			if r, err = FromRows(rows); err == nil {
				if len(r.Skipped) == 0 {
					s.limit.reset("skipped:" + lb)
				} else if ok, n := s.limit.allow("skipped:"+lb, time.Now()); ok {
					s.log.Warn("backends left out of the heartbeat: not named <pool>:<listener> or without a BACKEND row",
						zap.String("lb", lb), zap.Strings("backends", r.Skipped), zap.Int("suppressed_since_last_log", n))
				}
				s.limit.reset("unavailable:" + lb)
				if attempt > 1 {
					s.log.Debug("stats read succeeded after retrying", zap.String("lb", lb), zap.Int("attempts", attempt))
				}
				s.cacheMu.Lock()
				s.cache[lb] = &cached{reading: r, spare: true}
				s.cacheMu.Unlock()
				return r, true
			}
		}
		if stats.Timeout(err) || ctx.Err() != nil || time.Since(start)+pause > s.retryBudget {
			break
		}
		if !sleep(ctx, pause) {
			break
		}
		pause *= 2
	}
	if s.stopped(ctx, lb) {
		s.Forget(lb)
		return Reading{}, false
	}
	s.cacheMu.Lock()
	c := s.cache[lb]
	var r Reading
	ok := c != nil && c.spare
	if ok {
		r, c.spare = c.reading, false
	}
	s.cacheMu.Unlock()
	if ok {
		s.log.Warn("HAProxy stats unavailable; the previous reading stands in once", zap.String("lb", lb), zap.Error(err))
		return r, true
	}
	if ok, n := s.limit.allow("unavailable:"+lb, time.Now()); ok {
		s.log.Warn("HAProxy stats unavailable; the load balancer is left out of this heartbeat", zap.String("lb", lb),
			zap.Error(err), zap.Int("suppressed_since_last_log", n))
	}
	return Reading{}, false
}

// cached is what the sender remembers of an LB it saw running.
type cached struct {
	reading Reading // the last good reading
	spare   bool    // reading may still stand in for one failed read
}

// seen reports whether lb was read successfully since it last stopped.
func (s *Sender) seen(lb string) bool {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	return s.cache[lb] != nil
}

// stopped reports whether lb's HAProxy is down: Running must stay false
// for stopConfirm, so that the pid file rewrite of a reload is not taken
// for a stop.
func (s *Sender) stopped(ctx context.Context, lb string) bool {
	deadline := time.Now().Add(stopConfirm)
	for {
		if s.haproxy.Running(lb) {
			return false
		}
		if time.Now().After(deadline) || !sleep(ctx, 5*time.Millisecond) {
			return true
		}
	}
}

func (s *Sender) pruneCache(lbs []string) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	for lb := range s.cache {
		if !slices.Contains(lbs, lb) {
			delete(s.cache, lb)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// send hands data to the next destination of the rotation. A destination
// that cannot be resolved is logged and the next one is tried, so each
// heartbeat still goes to exactly one health manager.
func (s *Sender) send(ctx context.Context, cfg *config.Config, data []byte, fields []zap.Field) {
	if !slices.Equal(s.dests, cfg.ControllerIPPortList) {
		s.dests, s.next = slices.Clone(cfg.ControllerIPPortList), 0
	}
	now := time.Now()
	if len(s.dests) == 0 {
		if ok, n := s.limit.allow("nodest", now); ok {
			s.log.Error("no heartbeat destination: [health_manager] controller_ip_port_list is empty",
				zap.Int("suppressed_since_last_log", n))
		}
		return
	}
	for range s.dests {
		dest := s.dests[s.next]
		s.next = (s.next + 1) % len(s.dests)
		addr, err := s.resolve(ctx, dest)
		if err != nil {
			if ok, n := s.limit.allow("resolve:"+dest, now); ok {
				s.log.Error("cannot resolve heartbeat destination", zap.String("destination", dest),
					zap.Error(err), zap.Int("suppressed_since_last_log", n))
			}
			continue
		}
		if err := s.write(addr, data); err != nil {
			if ok, n := s.limit.allow("send:"+dest, now); ok {
				s.log.Warn("heartbeat not sent", append([]zap.Field{zap.String("destination", dest),
					zap.Stringer("address", addr), zap.Error(err), zap.Int("suppressed_since_last_log", n)}, fields...)...)
			}
			return
		}
		s.limit.reset("send:" + dest)
		s.log.Debug("heartbeat sent", append([]zap.Field{zap.String("destination", dest), zap.Stringer("address", addr)}, fields...)...)
		if s.sent != nil {
			s.sent(dest, data)
		}
		return
	}
}

// resolve turns a host:port item into a UDP address: IP literals (with an
// optional zone) directly, host names through the resolver on every
// heartbeat, keeping the first answer as getaddrinfo's first result.
func (s *Sender) resolve(ctx context.Context, dest string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(dest)
	if err != nil {
		return netip.AddrPort{}, err
	}
	p, err := net.LookupPort("udp", port)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return netip.AddrPortFrom(ip.Unmap(), uint16(p)), nil
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	ips, err := s.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if len(ips) == 0 {
		return netip.AddrPort{}, errors.New("no address")
	}
	return netip.AddrPortFrom(ips[0].Unmap(), uint16(p)), nil
}

// write sends on the unconnected socket of the address's family (one
// AF_INET, one AF_INET6, kernel-chosen source), opened on first use.
func (s *Sender) write(addr netip.AddrPort, data []byte) error {
	conn := &s.v4
	network := "udp4"
	if addr.Addr().Is6() {
		conn, network = &s.v6, "udp6"
	}
	if *conn == nil {
		c, err := net.ListenUDP(network, nil)
		if err != nil {
			return fmt.Errorf("open %s socket: %w", network, err)
		}
		*conn = c
	}
	ua := &net.UDPAddr{IP: addr.Addr().AsSlice(), Port: int(addr.Port()), Zone: addr.Addr().Zone()}
	_, err := (*conn).WriteToUDP(data, ua)
	return err
}

func (s *Sender) closeSockets() {
	for _, c := range []*net.UDPConn{s.v4, s.v6} {
		if c != nil {
			c.Close()
		}
	}
	s.v4, s.v6 = nil, nil
}

// limiter lets a repeated log line through at most once per period per key
// and counts what it held back.
type limiter struct {
	every      time.Duration
	last       map[string]time.Time
	suppressed map[string]int
}

func (l *limiter) allow(key string, now time.Time) (bool, int) {
	if l.last == nil {
		l.last, l.suppressed = map[string]time.Time{}, map[string]int{}
	}
	if t, ok := l.last[key]; ok && now.Sub(t) < l.every {
		l.suppressed[key]++
		return false, 0
	}
	n := l.suppressed[key]
	l.last[key], l.suppressed[key] = now, 0
	return true, n
}

func (l *limiter) reset(key string) {
	delete(l.last, key)
	delete(l.suppressed, key)
}
