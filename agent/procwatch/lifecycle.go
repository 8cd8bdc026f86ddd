package procwatch

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"
)

// waitExit waits up to d for p to end and reports whether it did; d <= 0
// waits for as long as it takes.
func waitExit(p *Process, d time.Duration) bool {
	if d <= 0 {
		<-p.Exited
		return true
	}
	select {
	case <-p.Exited:
		return true
	case <-time.After(d):
		return false
	}
}

// Stop ends p: SIGTERM to the process, up to grace for it to exit, then
// SIGKILL to its whole process group and up to grace again. It reports
// whether p exited.
func Stop(p *Process, grace time.Duration) bool {
	syscall.Kill(p.Pid, syscall.SIGTERM)
	if waitExit(p, grace) {
		return true
	}
	return Kill(p, grace)
}

// Kill sends SIGKILL to p's process group and waits up to wait for p to
// exit (wait <= 0: until it does). It reports whether p exited.
func Kill(p *Process, wait time.Duration) bool {
	syscall.Kill(-p.Pid, syscall.SIGKILL)
	return waitExit(p, wait)
}

// WaitReady waits until ready reports true, polling every poll, and then
// until p has stayed up for settle, as after tells. It fails as
// "<name> <status>" when p ends first, and with timedOut() when ctx ends.
func WaitReady(ctx context.Context, p *Process, name string, poll, settle time.Duration, after func(time.Duration) <-chan time.Time,
	ready func() bool, timedOut func() error) error {
	for {
		select {
		case <-p.Exited:
			return fmt.Errorf("%s %s", name, p.Status)
		default:
		}
		if ready() {
			select {
			case <-p.Exited:
				return fmt.Errorf("%s %s right after start", name, p.Status)
			case <-after(settle):
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return timedOut()
		case <-time.After(poll):
		}
	}
}

// Respawner is the restart loop of a supervised daemon. Lock is the
// supervisor's own lock, which guards its state and Respawns: Dead, Wanted
// and Start run under it; Died, Restarted and Failed (logging) run
// without it.
type Respawner struct {
	Lock     sync.Locker
	Done     <-chan struct{} // closed when supervision ends
	Backoff  Backoff
	Respawns *Respawns
	// After is the clock of the backoff (time.After when nil).
	After func(time.Duration) <-chan time.Time
	// StartTimeout bounds one Start.
	StartTimeout time.Duration

	// Dead takes note that proc ended and reports whether it must be
	// started again (false when it was replaced or is no longer wanted).
	Dead func(proc *Process) bool
	// Wanted reports, after the backoff delay, whether a start is still
	// needed.
	Wanted func() bool
	// Start starts a new process, which gets its own Watch, and returns
	// the current one.
	Start func(ctx context.Context) (*Process, error)

	// Died logs a death; called for the loud restarts only.
	Died func(proc *Process, uptime, delay time.Duration, streak int)
	// Restarted logs a successful restart after proc.
	Restarted func(started, proc *Process, streak int)
	// Failed logs a failed restart; called for the loud restarts only.
	Failed func(err error)
}

// Watch waits for proc to end and, unless Dead says otherwise, starts the
// daemon again with backoff, treating a failed start like a crash at once,
// until a start succeeds, it is no longer wanted or Done is closed.
func (r *Respawner) Watch(proc *Process) {
	select {
	case <-proc.Exited:
	case <-r.Done:
		return
	}
	for {
		r.Lock.Lock()
		// Done wins over a death seen at the same time: select picks at
		// random, and a supervision that ended must start nothing.
		if r.ended() || !r.Dead(proc) {
			r.Lock.Unlock()
			return
		}
		uptime := time.Since(proc.Started)
		delay := r.Respawns.Next(r.Backoff, uptime)
		streak, loud := r.Respawns.Streak(), r.Respawns.Loud()
		r.Lock.Unlock()

		if loud {
			r.Died(proc, uptime, delay, streak)
		}
		after := r.After
		if after == nil {
			after = time.After
		}
		select {
		case <-after(delay):
		case <-r.Done:
			return
		}
		r.Lock.Lock()
		if r.ended() || !r.Wanted() {
			r.Lock.Unlock()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.StartTimeout)
		started, err := r.Start(ctx)
		cancel()
		r.Lock.Unlock()
		if err == nil {
			r.Restarted(started, proc, streak)
			return // the new process has its own Watch
		}
		if loud {
			r.Failed(err)
		}
		proc = Failed(err.Error())
	}
}

// ended reports whether supervision is over (Done closed).
func (r *Respawner) ended() bool {
	select {
	case <-r.Done:
		return true
	default:
		return false
	}
}
