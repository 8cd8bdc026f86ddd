package procwatch

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// Pacing of the health check of an adopted process.
const (
	// adoptedAskTimeout bounds one question to an adopted process.
	adoptedAskTimeout = 5 * time.Second
	// adoptedFirstGap is the pause after the first unanswered question;
	// it doubles after each further one, up to adoptedMaxGap.
	adoptedFirstGap = 5 * time.Second
	adoptedMaxGap   = time.Minute
	// adoptedQuietLimit is how long (in pauses between questions) an
	// adopted process may stay silent before that is logged a second
	// time, as an error.
	adoptedQuietLimit = DefaultSlowStartLimit
)

// checkAdopted asks an adopted process whether it is in working order
// (Spec.Healthy) until it answers, it ends or supervision ends. One that
// does not answer is left running and logged: it may be serving while its
// control side is slow or stopped, and killing it would cut off its
// connections, which no agent restart may do. A process that truly died
// is the respawner's, as for any other.
func (d *Daemon) checkAdopted(proc *Process) {
	s := &d.spec
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-proc.Exited:
		case <-d.done:
		case <-d.gone:
		case <-ctx.Done():
		}
		cancel()
	}()
	pid := zap.Int("pid", proc.Pid)
	// paused sums the pauses asked of the clock, which decide when to
	// log again, so that a test sees that without waiting; the logs say
	// how long it really was.
	var (
		paused time.Duration
		since  time.Time // the first unanswered question
	)
	loud := true
	gap := adoptedFirstGap
	for {
		ask, stop := context.WithTimeout(ctx, adoptedAskTimeout)
		ok := s.Healthy(ask, proc.Pid)
		stop()
		if ctx.Err() != nil {
			return
		}
		if ok {
			if !since.IsZero() {
				s.Log.Info("adopted "+s.Name+" answers now", pid, silentFor(since))
			}
			return
		}
		switch {
		case since.IsZero():
			since = time.Now()
			s.Log.Warn("adopted "+s.Name+" does not answer; leaving it running and asking again", pid)
		case loud && paused >= adoptedQuietLimit:
			loud = false
			s.Log.Error("adopted "+s.Name+" still does not answer; leaving it running", pid, silentFor(since))
		}
		select {
		case <-s.After(gap):
		case <-ctx.Done():
			return
		}
		paused += gap
		gap = min(2*gap, adoptedMaxGap)
	}
}

func silentFor(since time.Time) zap.Field {
	return zap.Duration("silent_for", time.Since(since).Round(time.Millisecond))
}
