package procwatch

import "time"

// Backoff shapes how fast a dead daemon is started again. The first Count
// restarts of a crash streak happen at once; beyond that the agent waits,
// starting with Interval (at least one second) and doubling up to Max,
// and never gives up. A process that stays up for Stable ends the streak.
type Backoff struct {
	Count    int
	Interval time.Duration
	Max      time.Duration
	Stable   time.Duration
}

// DefaultBackoff matches upstream's HAProxy defaults (2 restarts in 2 s).
var DefaultBackoff = Backoff{Count: 2, Interval: 2 * time.Second, Max: 30 * time.Second, Stable: 30 * time.Second}

// Respawns remembers the current streak of restarts.
type Respawns struct {
	count int // restarts in the current streak
}

// Next records a restart after a process that ran for uptime and returns
// how long to wait before it.
func (r *Respawns) Next(b Backoff, uptime time.Duration) time.Duration {
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

// Streak is how many restarts the current streak holds.
func (r *Respawns) Streak() int { return r.count }

// Loud reports whether a restart of the streak should be logged: the first
// five, then every tenth.
func (r *Respawns) Loud() bool { return r.count <= 5 || r.count%10 == 0 }
