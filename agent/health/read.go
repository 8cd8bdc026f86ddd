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

// MaxBusyStandIn bounds how long after its last live reading a listener
// the agent is starting, reloading or restoring is reported from that
// reading: past it, the listener is reported as it is.
const MaxBusyStandIn = 30 * time.Second

// lbRead is what the sender keeps of one load balancer from cycle to
// cycle. Sender.mu guards it, except scratch, which only the LB's one
// read under way uses (startRead).
type lbRead struct {
	last   Reading   // the last good reading, when has
	has    bool      // a read succeeded since the LB last stopped
	lastAt time.Time // when last was read
	// spare: last may still stand in for one failed read; an LB the agent
	// is busy with has MaxBusyStandIn instead, which uses the spare up.
	spare bool
	// unresponsive: the last read took longer than the slow-read limit;
	// the LB has no stand-in until a read answers.
	unresponsive bool
	reading      *inflight // the read under way
	scratch      readScratch
}

// forget drops what may stand in for a failed read.
func (e *lbRead) forget() { e.last, e.has, e.spare, e.unresponsive = Reading{}, false, false, false }

// Forget drops the cached reading of lb so that it can never stand in for
// a failed read. Call it when an LB is stopped or deleted.
func (s *Sender) Forget(lb string) {
	s.mu.Lock()
	if e := s.lbs[lb]; e != nil {
		e.forget()
	}
	s.mu.Unlock()
}

// entry is lb's record, new if there was none.
func (s *Sender) entry(lb string) *lbRead {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lbs[lb]
	if e == nil {
		e = &lbRead{}
		s.lbs[lb] = e
	}
	return e
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

	entries := make([]*lbRead, len(lbs))
	reads := make([]*inflight, len(lbs))
	for i, lb := range lbs {
		entries[i] = s.entry(lb)
		reads[i] = s.startRead(ctx, entries[i], lb, limit)
	}
	for i, rd := range reads {
		if s.waitsSoftly(entries[i]) {
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
		lb, e := lbs[i], entries[i]
		var r Reading
		var ok bool
		select {
		case <-rd.done:
			r, ok = rd.r, rd.ok
			if !rd.decided {
				r, ok = s.standIn(e, lb, fmt.Errorf("stats read took longer than %v", limit), false)
			}
		default:
			r, ok = s.lateStandIn(e, lb, soft)
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

// waitsSoftly reports whether the cycle waits for e's read only up to
// the soft deadline: e has a reading to stand in, or is known not to
// answer.
func (s *Sender) waitsSoftly(e *lbRead) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return e.has || e.unresponsive
}

// startRead returns lb's read under way, or starts one bounded by limit
// (and by ctx, the sender's life).
func (s *Sender) startRead(ctx context.Context, e *lbRead, lb string, limit time.Duration) *inflight {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.reading != nil {
		return e.reading
	}
	rd := &inflight{done: make(chan struct{})}
	e.reading = rd
	go func() {
		rctx, cancel := context.WithTimeout(ctx, limit)
		r, ok, decided := s.readRunning(rctx, e, lb)
		cancel()
		if !decided && ctx.Err() == nil {
			// The limit also passes when the agent itself got no CPU for
			// that long (a starved VM): every timer then fires at once and
			// HAProxy never had the chance to answer. One more read on a
			// new connection, answered in milliseconds by a HAProxy that
			// runs, tells that apart from a HAProxy that is silent.
			rctx, cancel = context.WithTimeout(ctx, recheckLimit)
			r, ok, decided = s.readRunning(rctx, e, lb)
			cancel()
		}
		if !decided && ctx.Err() == nil {
			s.markUnresponsive(e, lb, limit+recheckLimit)
		}
		rd.r, rd.ok, rd.decided = r, ok, decided
		s.mu.Lock()
		e.reading = nil
		s.mu.Unlock()
		close(rd.done)
	}()
	return rd
}

// markUnresponsive notes that lb's read took longer than limit. Its last
// reading has stood in all that time: it stands in no more.
func (s *Sender) markUnresponsive(e *lbRead, lb string, limit time.Duration) {
	s.mu.Lock()
	e.unresponsive, e.spare = true, false
	s.mu.Unlock()
	if ok, n := s.limit.allow("unresponsive:"+lb, time.Now()); ok {
		s.log.Warn("HAProxy did not answer a stats read in time; its load balancer is left out of heartbeats until it answers",
			zap.String("lb", lb), zap.Duration("limit", limit), zap.Int("suppressed_since_last_log", n))
	}
}

// lateStandIn is lb's last good reading while its read is still under
// way, as standIn allows it but without using it up: unless lb is
// unresponsive or its last read failed (and the agent is not busy with
// it). It logs what it did.
func (s *Sender) lateStandIn(e *lbRead, lb string, soft time.Duration) (Reading, bool) {
	busy := s.haproxy.State(lb).Busy
	s.mu.Lock()
	r, ok := e.last, e.has && !e.unresponsive && (e.spare || busy && time.Since(e.lastAt) <= MaxBusyStandIn)
	s.mu.Unlock()
	if ok {
		if ok, n := s.limit.allow("late:"+lb, time.Now()); ok {
			s.log.Warn("HAProxy stats slow to come; the previous reading stands in while the read goes on",
				zap.String("lb", lb), zap.Duration("waited", soft), zap.Int("suppressed_since_last_log", n))
		}
		return r, true
	}
	if ok, n := s.limit.allow("unavailable:"+lb, time.Now()); ok {
		s.log.Warn("HAProxy stats unavailable; the load balancer is left out of this heartbeat", zap.String("lb", lb),
			zap.Error(errors.New("no answer from an unresponsive HAProxy")), zap.Int("suppressed_since_last_log", n))
	}
	return Reading{}, false
}

// errNotRunning is why an LB whose master the agent is (re)starting has
// no fresh reading.
var errNotRunning = errors.New("HAProxy is being started")

// readRunning reads one LB that is listed, as the source's state says: a
// stopped or deleted LB is left out at once (the supervisor owns that
// answer; nothing is guessed from a pid file). decided is false when ctx
// ended before the outcome was known; nothing was changed then.
func (s *Sender) readRunning(ctx context.Context, e *lbRead, lb string) (r Reading, ok, decided bool) {
	st := s.haproxy.State(lb)
	if !st.Running {
		if !st.Busy {
			s.Forget(lb)
			return Reading{}, false, true
		}
		r, ok = s.standIn(e, lb, errNotRunning, true)
		return r, ok, true
	}
	return s.readLB(ctx, e, lb, st.Busy)
}

// readLB reads one LB's stats. A read that fails fast is retried briefly
// (a reload replaces the process behind the socket). If it still fails,
// the last good reading stands in (standIn), provided the LB still runs
// or the agent is starting it. decided is false when the read timed out
// or ctx ended first.
func (s *Sender) readLB(ctx context.Context, e *lbRead, lb string, busy bool) (Reading, bool, bool) {
	start := time.Now()
	pause := firstRetryPause
	var err error
	sc := &e.scratch
	for attempt := 1; ; attempt++ {
		var rows []stats.Row
		rows, err = s.haproxy.ShowStat(ctx, lb, &sc.stat)
		if err == nil {
			var r Reading
			sc.names.start()
			if r, err = fromRows(rows, sc.names.keep, &sc.rows); err == nil {
				sc.names.trim()
				s.mu.Lock()
				var prev []PoolReading
				if e.has {
					prev = e.last.Pools
				}
				s.mu.Unlock()
				r.Pools = settle(r.Pools, prev)
				if len(r.Skipped) == 0 {
					s.limit.reset("skipped:" + lb)
				} else if ok, n := s.limit.allow("skipped:"+lb, time.Now()); ok {
					s.log.Warn("backends left out of the heartbeat: not named <pool>:<listener> or without a BACKEND row",
						zap.String("lb", lb), zap.Strings("backends", r.Skipped), zap.Int("suppressed_since_last_log", n))
				}
				for _, kind := range []string{"unavailable:", "late:", "unresponsive:", "busy:"} {
					s.limit.reset(kind + lb)
				}
				if attempt > 1 {
					s.log.Debug("stats read succeeded after retrying", zap.String("lb", lb), zap.Int("attempts", attempt))
				}
				s.mu.Lock()
				e.last, e.has, e.lastAt, e.spare, e.unresponsive = r, true, time.Now(), true, false
				s.mu.Unlock()
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
	// Asked again: an operation that began during the read counts, and
	// an LB stopped meanwhile is left out.
	st := s.haproxy.State(lb)
	if !st.Running && !st.Busy {
		s.Forget(lb)
		return Reading{}, false, true
	}
	r, ok := s.standIn(e, lb, err, busy || st.Busy)
	return r, ok, true
}

// standIn returns lb's last good reading if it may still stand in, and
// logs why lb's stats are missing. While the agent is busy with lb (busy:
// a start, reload or restore under way), the reading stands in for up to
// MaxBusyStandIn after it was taken: the health manager would otherwise
// mark the listeners ERROR for the moment an operation of the controller's
// own takes. Otherwise it stands in once after a good read.
func (s *Sender) standIn(e *lbRead, lb string, err error, busy bool) (Reading, bool) {
	s.mu.Lock()
	var r Reading
	ok, whileBusy := false, false
	switch {
	case !e.has || e.unresponsive:
	case busy && time.Since(e.lastAt) <= MaxBusyStandIn:
		r, ok, whileBusy, e.spare = e.last, true, true, false
	case e.spare:
		r, ok, e.spare = e.last, true, false
	}
	s.mu.Unlock()
	switch {
	case whileBusy:
		if ok, n := s.limit.allow("busy:"+lb, time.Now()); ok {
			s.log.Info("HAProxy stats unavailable while the agent starts or reloads it; the previous reading stands in",
				zap.String("lb", lb), zap.Error(err), zap.Int("suppressed_since_last_log", n))
		}
		return r, true
	case ok:
		s.log.Warn("HAProxy stats unavailable; the previous reading stands in once", zap.String("lb", lb), zap.Error(err))
		return r, true
	}
	if ok, n := s.limit.allow("unavailable:"+lb, time.Now()); ok {
		s.log.Warn("HAProxy stats unavailable; the load balancer is left out of this heartbeat", zap.String("lb", lb),
			zap.Error(err), zap.Int("suppressed_since_last_log", n))
	}
	return Reading{}, false
}

// pruneCache drops what the sender keeps of LBs no longer listed.
func (s *Sender) pruneCache(lbs []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for lb := range s.lbs {
		if !slices.Contains(lbs, lb) {
			delete(s.lbs, lb)
		}
	}
}

// readScratch is what one LB's reads reuse from cycle to cycle: the
// answer buffer and its rows (growing new ones each cycle was most of the
// heartbeat's allocation and GC work), the members' array and the names
// that readings keep.
type readScratch struct {
	stat  StatScratch
	rows  rowScratch
	names names
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
