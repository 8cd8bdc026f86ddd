package health

import (
	"time"
)

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
