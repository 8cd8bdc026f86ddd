package procwatch

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/pidfile"
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

// Adopt takes over the process an earlier agent left running, if
// the pid file names one of ours; it reports whether one runs now.
//
// Such a process is adopted whatever state it is in: it may be serving
// while too busy (or stopped) to answer, and refusing it would make the
// next start end it with every connection it holds. Upstream never
// touches its daemons when its agent restarts. Whether it answers is
// asked afterwards, in the background (Spec.Healthy), and only logged.
func (h *Held) Adopt() bool {
	d := h.d
	if d.proc.Alive() {
		return true
	}
	pid, err := pidfile.Read(d.spec.PidPath)
	if err != nil || !d.ours(pid) {
		return false
	}
	d.setProc(WatchAdopted(pid, d.done))
	d.spec.Log.Info("adopted running "+d.spec.Name, zap.Int("pid", pid))
	d.follow(d.proc)
	if d.spec.Healthy != nil {
		go d.checkAdopted(d.proc)
	}
	return true
}

func (d *Daemon) ours(pid int) bool {
	args, err := Cmdline(d.spec.ProcDir, pid)
	return err == nil && d.spec.Ours(args)
}

// Restore brings the daemon back to its recorded desired state
// after an agent restart or a reboot: a process still running is adopted
// (and recorded as wanted: one that runs is never cut off), one that
// should run but does not is started with start. A failed start stays
// under supervision and is retried.
func (h *Held) Restore(ctx context.Context, start func(context.Context) error) error {
	d := h.d
	running, _, err := d.ReadDesired()
	if err != nil {
		d.spec.Log.Warn("unreadable state record", zap.Error(err))
	}
	d.desired = running
	if h.Adopt() {
		if !running {
			return h.SetDesired(true)
		}
		return nil
	}
	if !running {
		return nil
	}
	if err := start(ctx); err != nil {
		h.Retry(err)
		return err
	}
	return nil
}
