package health

import (
	"context"
	"slices"
	"time"

	"go.uber.org/zap"

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
)

// Forget drops the cached reading of lb so that it can never stand in for
// a failed read. Call it when an LB is stopped or deleted.
func (s *Sender) Forget(lb string) {
	s.cacheMu.Lock()
	delete(s.cache, lb)
	s.cacheMu.Unlock()
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
