package health

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/config"
	"github.com/amphora-agent/amphora-agent/haproxy/stats"
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
	stopConfirm = 250 * time.Millisecond
	// maxReadWait bounds how long a cycle waits for stats reads (see
	// readDeadline); a healthy HAProxy answers in milliseconds.
	maxReadWait = 2 * time.Second
	// Bounds of the slow-read limit (see slowReadLimit).
	minSlowRead = 5 * time.Second
	maxSlowRead = 10 * time.Second
	// recheckLimit bounds the one more read that follows a read which hit
	// the slow-read limit (see startRead).
	recheckLimit = 2 * time.Second
)

// Forget drops the cached reading of lb so that it can never stand in for
// a failed read. Call it when an LB is stopped or deleted.
func (s *Sender) Forget(lb string) {
	s.cacheMu.Lock()
	delete(s.cache, lb)
	delete(s.unresponsive, lb)
	s.cacheMu.Unlock()
}

// inflight is one LB's stats read under way. A read belongs to no cycle:
// it may outlive the cycle that started it, and the next cycle joins it
// instead of starting another.
type inflight struct {
	done chan struct{} // closed when the fields below are set
	r    Reading
	ok   bool
	// decided is false when the read was cut off before its outcome was
	// known (it took longer than the slow-read limit).
	decided bool
}

// readAll reads every LB's stats concurrently and returns the readings in
// the order of lbs and how many LBs they cover. Upstream blocks until
// HAProxy answers, and the health manager takes a heartbeat without some
// listener as a fault, so a slow HAProxy must not drop out: the cycle
// waits for a read up to the soft deadline, and then lets the LB's last
// good reading stand in while the read goes on. An LB with no reading yet
// is waited for until its read ends (at most the slow-read limit). An LB
// whose read hit that limit is unresponsive: it is waited for only up to
// the soft deadline and has no stand-in until it answers again, so a
// wedged HAProxy holds nobody back and is not reported as healthy.
func (s *Sender) readAll(ctx context.Context, lbs []string, cfg *config.Config) ([]Reading, int) {
	every := interval(cfg)
	soft := s.readDeadline
	if soft <= 0 {
		soft = readDeadline(every)
	}
	limit := s.slowRead
	if limit <= 0 {
		limit = slowReadLimit(every)
	}
	softOver := make(chan struct{})
	timer := time.AfterFunc(soft, func() { close(softOver) })
	defer timer.Stop()

	reads := make([]*inflight, len(lbs))
	for i, lb := range lbs {
		reads[i] = s.startRead(ctx, lb, limit)
	}
	for i, rd := range reads {
		if s.waitsSoftly(lbs[i]) {
			select {
			case <-rd.done:
			case <-softOver:
			case <-ctx.Done():
			}
			continue
		}
		select {
		case <-rd.done:
		case <-ctx.Done():
		}
	}

	var readings []Reading
	for i, rd := range reads {
		lb := lbs[i]
		var r Reading
		var ok bool
		select {
		case <-rd.done:
			r, ok = rd.r, rd.ok
			if !rd.decided {
				r, ok = s.standIn(lb, fmt.Errorf("stats read took longer than %v", limit))
			}
		default:
			r, ok = s.lateStandIn(lb, soft)
		}
		if ok {
			readings = append(readings, r)
		}
	}
	return readings, len(readings)
}

// readDeadline is the soft deadline: how long a cycle waits for an LB's
// stats before its last reading stands in. Well inside the interval, and
// never more than maxReadWait.
func readDeadline(every time.Duration) time.Duration { return min(every/2, maxReadWait) }

// slowReadLimit is how long one stats read may take before the LB counts
// as unresponsive: the interval, within [minSlowRead, maxSlowRead], so a
// heartbeat that waits for it still goes out far inside the health
// manager's heartbeat_timeout (60 s by default).
func slowReadLimit(every time.Duration) time.Duration {
	return min(max(every, minSlowRead), maxSlowRead)
}

// waitsSoftly reports whether the cycle waits for lb's read only up to
// the soft deadline: lb has a reading to stand in, or is known not to
// answer.
func (s *Sender) waitsSoftly(lb string) bool {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	return s.cache[lb] != nil || s.unresponsive[lb]
}

// startRead returns lb's read under way, or starts one bounded by limit
// (and by ctx, the sender's life).
func (s *Sender) startRead(ctx context.Context, lb string, limit time.Duration) *inflight {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if rd := s.reading[lb]; rd != nil {
		return rd
	}
	rd := &inflight{done: make(chan struct{})}
	s.reading[lb] = rd
	go func() {
		rctx, cancel := context.WithTimeout(ctx, limit)
		r, ok, decided := s.readRunning(rctx, lb)
		cancel()
		if !decided && ctx.Err() == nil {
			// The limit also passes when the agent itself got no CPU for
			// that long (a starved VM): every timer then fires at once and
			// HAProxy never had the chance to answer. One more read on a
			// new connection, answered in milliseconds by a HAProxy that
			// runs, tells that apart from a HAProxy that is silent.
			rctx, cancel = context.WithTimeout(ctx, recheckLimit)
			r, ok, decided = s.readRunning(rctx, lb)
			cancel()
		}
		if !decided && ctx.Err() == nil {
			s.markUnresponsive(lb, limit+recheckLimit)
		}
		rd.r, rd.ok, rd.decided = r, ok, decided
		s.cacheMu.Lock()
		delete(s.reading, lb)
		s.cacheMu.Unlock()
		close(rd.done)
	}()
	return rd
}

// markUnresponsive notes that lb's read took longer than limit. Its last
// reading has stood in all that time: it stands in no more.
func (s *Sender) markUnresponsive(lb string, limit time.Duration) {
	s.cacheMu.Lock()
	s.unresponsive[lb] = true
	if c := s.cache[lb]; c != nil {
		c.spare = false
	}
	s.cacheMu.Unlock()
	if ok, n := s.limit.allow("unresponsive:"+lb, time.Now()); ok {
		s.log.Warn("HAProxy did not answer a stats read in time; its load balancer is left out of heartbeats until it answers",
			zap.String("lb", lb), zap.Duration("limit", limit), zap.Int("suppressed_since_last_log", n))
	}
}

// lateStandIn is lb's last good reading while its read is still under
// way, unless lb is unresponsive; it logs what it did.
func (s *Sender) lateStandIn(lb string, soft time.Duration) (Reading, bool) {
	s.cacheMu.Lock()
	c, gone := s.cache[lb], s.unresponsive[lb]
	s.cacheMu.Unlock()
	if c != nil && !gone {
		if ok, n := s.limit.allow("late:"+lb, time.Now()); ok {
			s.log.Warn("HAProxy stats slow to come; the previous reading stands in while the read goes on",
				zap.String("lb", lb), zap.Duration("waited", soft), zap.Int("suppressed_since_last_log", n))
		}
		return c.reading, true
	}
	if ok, n := s.limit.allow("unavailable:"+lb, time.Now()); ok {
		s.log.Warn("HAProxy stats unavailable; the load balancer is left out of this heartbeat", zap.String("lb", lb),
			zap.Error(errors.New("no answer from an unresponsive HAProxy")), zap.Int("suppressed_since_last_log", n))
	}
	return Reading{}, false
}

// readRunning reads one LB that is listed, unless it is stopped. decided
// is false when ctx ended before the outcome was known; nothing was
// changed then.
func (s *Sender) readRunning(ctx context.Context, lb string) (r Reading, ok, decided bool) {
	if !s.haproxy.Running(lb) {
		if !s.seen(lb) {
			s.Forget(lb)
			return Reading{}, false, true
		}
		if stopped, decided := s.stoppedNow(ctx, lb); stopped || !decided {
			return Reading{}, false, decided
		}
		s.log.Debug("pid file unreadable for a moment (reload); the load balancer still runs", zap.String("lb", lb))
	}
	return s.readLB(ctx, lb)
}

// readLB reads one LB's stats. A read that fails fast is retried briefly
// (a reload replaces the process behind the socket). If it still fails,
// the last good reading stands in once, provided the LB still runs; a
// second failure in a row leaves the LB out. decided is false when the
// read timed out or ctx ended first.
func (s *Sender) readLB(ctx context.Context, lb string) (Reading, bool, bool) {
	start := time.Now()
	pause := firstRetryPause
	var err error
	sc := s.scratchOf(lb)
	for attempt := 1; ; attempt++ {
		var rows []stats.Row
		rows, err = s.haproxy.ShowStat(ctx, lb, &sc.stat)
		if err == nil {
			var r Reading
			sc.names.start()
			if r, err = fromRows(rows, sc.names.keep, &sc.rows); err == nil {
				sc.names.trim()
				s.cacheMu.Lock()
				var prev []PoolReading
				if c := s.cache[lb]; c != nil {
					prev = c.reading.Pools
				}
				s.cacheMu.Unlock()
				r.Pools = settle(r.Pools, prev)
				if len(r.Skipped) == 0 {
					s.limit.reset("skipped:" + lb)
				} else if ok, n := s.limit.allow("skipped:"+lb, time.Now()); ok {
					s.log.Warn("backends left out of the heartbeat: not named <pool>:<listener> or without a BACKEND row",
						zap.String("lb", lb), zap.Strings("backends", r.Skipped), zap.Int("suppressed_since_last_log", n))
				}
				s.limit.reset("unavailable:" + lb)
				s.limit.reset("late:" + lb)
				s.limit.reset("unresponsive:" + lb)
				if attempt > 1 {
					s.log.Debug("stats read succeeded after retrying", zap.String("lb", lb), zap.Int("attempts", attempt))
				}
				s.cacheMu.Lock()
				s.cache[lb] = &cached{reading: r, spare: true}
				delete(s.unresponsive, lb)
				s.cacheMu.Unlock()
				return r, true, true
			}
		}
		if stats.Timeout(err) || ctx.Err() != nil {
			// Cut off at the slow-read limit (the socket's deadline may
			// fire a moment before ctx's): the outcome is unknown.
			return Reading{}, false, false
		}
		if time.Since(start)+pause > s.retryBudget {
			break
		}
		if !sleep(ctx, pause) {
			break
		}
		pause *= 2
	}
	if stopped, decided := s.stoppedNow(ctx, lb); stopped || !decided {
		return Reading{}, false, decided
	}
	r, ok := s.standIn(lb, err)
	return r, ok, true
}

// stoppedNow is stopped, forgetting lb when it stopped; decided is false
// when ctx ended before it could tell.
func (s *Sender) stoppedNow(ctx context.Context, lb string) (stopped, decided bool) {
	stopped = s.stopped(ctx, lb)
	if ctx.Err() != nil {
		return false, false
	}
	if stopped {
		s.Forget(lb)
	}
	return stopped, true
}

// standIn returns lb's last good reading if it may still stand in (once
// after a good read), and logs why lb's stats are missing.
func (s *Sender) standIn(lb string, err error) (Reading, bool) {
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
	for lb := range s.unresponsive {
		if !slices.Contains(lbs, lb) {
			delete(s.unresponsive, lb)
		}
	}
	for lb := range s.scratch {
		if !slices.Contains(lbs, lb) {
			delete(s.scratch, lb)
		}
	}
}

// readScratch is what one LB's reads reuse from cycle to cycle: the
// answer buffer and its rows (growing new ones each cycle was most of the
// heartbeat's allocation and GC work), the members' array and the names
// that readings keep. Only the one reader of the LB uses it (startRead).
type readScratch struct {
	stat  StatScratch
	rows  rowScratch
	names names
}

func (s *Sender) scratchOf(lb string) *readScratch {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	sc := s.scratch[lb]
	if sc == nil {
		sc = &readScratch{}
		s.scratch[lb] = sc
	}
	return sc
}

// names copies the strings a reading keeps out of the answer buffer,
// which the next read overwrites; a name copied for an earlier reading is
// shared instead of copied again, so a steady LB allocates none. A reading
// asks for its names in the order of HAProxy's answer, which rarely
// changes: a name equal to the one asked for at the same place in the
// previous reading is taken from there (one string comparison); only the
// others are looked up. Names no longer read are dropped by starting
// afresh once they outnumber those in use.
type names struct {
	m         map[string]string
	used      int      // keep calls since the last trim
	prev, cur []string // what keep returned, in order, in the last and this reading
}

func (n *names) keep(s string) string {
	n.used++
	if i := len(n.cur); i < len(n.prev) && n.prev[i] == s {
		v := n.prev[i]
		n.cur = append(n.cur, v)
		return v
	}
	v, ok := n.m[s]
	if !ok {
		if n.m == nil {
			n.m = map[string]string{}
		}
		v = strings.Clone(s)
		n.m[v] = v
	}
	n.cur = append(n.cur, v)
	return v
}

// start begins a reading (what a failed one asked for is forgotten).
func (n *names) start() { n.cur, n.used = n.cur[:0], 0 }

// trim ends a reading.
func (n *names) trim() {
	if len(n.m) > 2*n.used+64 {
		clear(n.m)
		for _, v := range n.cur { // still shared by this reading
			n.m[v] = v
		}
	}
	n.used = 0
	n.prev, n.cur = n.cur, n.prev[:0]
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
