// Package tick lines the agent's periodic work up on shared instants, so
// that an idle agent wakes once per period rather than once per check:
// each wake-up of a Go process costs CPU (figures in docs/results.md).
// Heartbeats, the memory trim, the systemd watchdog, the metrics
// endpoint's namespace check and each daemon's output-file check (its size
// cap and the journal forwarding) share them.
//
// The instants are a fixed offset past every multiple of the period since
// the Unix epoch, the offset drawn at random once per process, so that
// amphorae do not all send their heartbeats in the same millisecond.
package tick

import (
	"math/rand/v2"
	"time"
)

// phase is this process's offset of the instants within a second.
var phase = time.Duration(rand.Int64N(int64(time.Second)))

// Next is the first instant strictly after now that lies phase past a
// multiple of every. Periods that divide one another share instants: every
// 10 s instant is also a 1 s instant. every must be positive.
func Next(now time.Time, every time.Duration) time.Time {
	return next(now, every, phase)
}

func next(now time.Time, every, phase time.Duration) time.Time {
	if every <= 0 {
		every = time.Second
	}
	t := now.UnixNano() - int64(phase)
	k := t / int64(every) // rounds towards zero
	if t >= 0 || t%int64(every) == 0 {
		k++
	}
	return time.Unix(0, k*int64(every)+int64(phase))
}

// Ticker delivers the instants of a period on C, like time.Ticker; unlike
// it, it is re-armed explicitly with Next after each tick, so a tick that
// is handled late never queues a second one.
type Ticker struct {
	C     <-chan time.Time
	t     *time.Timer
	every time.Duration
}

// NewTicker starts a ticker for the next instant of every.
func NewTicker(every time.Duration) *Ticker {
	t := time.NewTimer(time.Until(Next(time.Now(), every)))
	return &Ticker{C: t.C, t: t, every: every}
}

// Next arms the ticker for the next instant after now.
func (k *Ticker) Next() { k.t.Reset(time.Until(Next(time.Now(), k.every))) }

// Stop stops the ticker.
func (k *Ticker) Stop() { k.t.Stop() }
