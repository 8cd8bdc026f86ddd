package haproxy

import "time"

// Backoff shapes how fast a dead HAProxy is started again. It honours the
// [haproxy_amphora] respawn_count / respawn_interval pair that older
// controllers still render (upstart's "respawn limit COUNT INTERVAL"):
// the first Count restarts of a crash streak happen at once; beyond that
// the agent does not give up as upstart did, it waits, starting with
// Interval (at least one second) and doubling up to Max. A process that
// stays up for Stable ends the streak.
type Backoff struct {
	Count    int
	Interval time.Duration
	Max      time.Duration
	Stable   time.Duration
}

// DefaultBackoff matches upstream's defaults (2 restarts in 2 s).
var DefaultBackoff = Backoff{Count: 2, Interval: 2 * time.Second, Max: 30 * time.Second, Stable: 30 * time.Second}

// respawnTracker remembers the current streak of restarts.
type respawnTracker struct {
	count int // restarts in the current streak
}

// next records a restart after a process that ran for uptime and returns
// how long to wait before it.
func (r *respawnTracker) next(b Backoff, uptime time.Duration) time.Duration {
	if uptime >= b.Stable {
		r.count = 0
	}
	r.count++
	if r.count <= b.Count {
		return 0
	}
	base := max(b.Interval, time.Second)
	over := r.count - b.Count - 1
	d := base
	for i := 0; i < over && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

// streak is how many restarts the current streak holds.
func (r *respawnTracker) streak() int { return r.count }
