package health

import (
	"sync"
	"time"
)

// limiterKeys bounds the keys a limiter holds: some keys carry error text,
// and without a bound every distinct error would stay for the life of the
// process.
const limiterKeys = 64

// limiter lets a repeated log line through at most once per period per key
// and counts what it held back. It is safe for concurrent use (LBs are
// read concurrently).
type limiter struct {
	every time.Duration
	mu    sync.Mutex
	keys  map[string]*limited
}

// limited is what the limiter remembers of one key.
type limited struct {
	logged     time.Time // when the key's line was last let through
	seen       time.Time // when the key last came by, to evict the stalest
	suppressed int
}

func (l *limiter) allow(key string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.keys[key]
	if e == nil {
		if l.keys == nil {
			l.keys = map[string]*limited{}
		}
		l.makeRoom(now)
		l.keys[key] = &limited{logged: now, seen: now}
		return true, 0
	}
	e.seen = now
	if now.Sub(e.logged) < l.every {
		e.suppressed++
		return false, 0
	}
	n := e.suppressed
	e.logged, e.suppressed = now, 0
	return true, n
}

func (l *limiter) reset(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.keys, key)
}

// makeRoom frees a slot for a new key when the limiter is full. Keys whose
// period is over with nothing held back go first, as forgetting them
// changes nothing; if none is, the key seen longest ago goes, and the count
// of what it held back with it.
func (l *limiter) makeRoom(now time.Time) {
	if len(l.keys) < limiterKeys {
		return
	}
	for k, e := range l.keys {
		if e.suppressed == 0 && now.Sub(e.logged) >= l.every {
			delete(l.keys, k)
		}
	}
	if len(l.keys) < limiterKeys {
		return
	}
	var stalest string
	var oldest *limited
	for k, e := range l.keys {
		if oldest == nil || e.seen.Before(oldest.seen) {
			stalest, oldest = k, e
		}
	}
	delete(l.keys, stalest)
}
