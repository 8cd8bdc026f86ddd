package haproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/fsutil"
	"github.com/amphora-agent/amphora-agent/agent/procwatch"
	"github.com/amphora-agent/amphora-agent/haproxy/stats"
)

func (in *instance) reload(ctx context.Context, h *procwatch.Held) (bool, error) {
	if err := h.SetDesired(true); err != nil {
		return false, fault.Internalf("%w", err)
	}
	if h.Starting() {
		wait, cancel := h.WaitContext(ctx, in.s.opts.ReloadWait)
		err := h.AwaitStart(wait)
		cancel()
		ctx, cancel = in.s.detach(ctx)
		defer cancel()
		if errors.Is(err, procwatch.ErrStillStarting) {
			return in.reloadStarting(ctx, h)
		}
		// Ready now: reloaded below. Dead: started again below.
	}
	proc := h.Proc()
	if proc == nil {
		return true, in.startOrRestore(ctx, h, "Error starting haproxy")
	}
	// As upstream's ExecReload: never hand the master a config that does
	// not pass the check (the file or the user/group file may have changed
	// since the upload).
	out, err := in.check(ctx)
	if err != nil {
		return false, fault.Internal("Error reloading haproxy", out, err)
	}
	// The check ran as long as the client waited.
	ctx, cancel := in.s.detach(ctx)
	defer cancel()
	// The config that ran until now becomes the last good one while the
	// master reloads: only a rollback reads it, and none starts before the
	// reload's outcome is known.
	confirmed := in.confirmAsync(h)
	// HAProxy dumps its servers for the new master while the master tells
	// which workers it runs now: both before the signal.
	var (
		before    stats.Proc
		beforeErr error
		asked     = make(chan struct{})
	)
	go func() {
		defer close(asked)
		before, beforeErr = stats.ShowProc(ctx, in.s.layout().MasterSocketPath(in.lb))
	}()
	in.saveServersState(ctx)
	<-asked
	offset := in.d.LogSize()
	signalled := time.Now()
	worker, err := in.signalReloadFrom(ctx, proc, before, beforeErr)
	confirmed()
	if err == nil {
		in.loaded(h)
		go in.watchWorker(proc, worker, in.loads, offset)
		return false, nil
	}
	if errors.Is(err, errStillLoading) {
		// A later change or the master's death ends the follow-up: both
		// move loads on or replace proc.
		in.loads++
		in.log().Warn("HAProxy is still loading the new configuration; answering now and following it",
			zap.Duration("waited", time.Since(signalled).Round(time.Millisecond)))
		in.busy.Add(1) // until the follow-up ends
		go in.followSlowReload(proc, before, signalled, in.loads, offset)
		return false, nil
	}
	output := in.output(offset, err)
	in.log().Error("reload failed; putting the last good config back", zap.String("output", output))
	if rerr := in.rollback(ctx, h); rerr != nil {
		in.log().Error("rollback failed", zap.Error(rerr))
		output += "\nrollback to the last good configuration failed: " + rerr.Error()
	}
	return false, fault.Internal("Error reloading haproxy", output, err)
}

// reloadStarting serves a reload that comes while a start answered before
// the master was ready is still loading. The config it loads is what is
// asked for: nothing to do (upstream's reload of a unit whose start runs
// joins that start). Another one: the slow start loads a stale config, and
// a reload would re-execute the master and parse everything again anyway,
// so the new config is started in its place (upstream sees no running
// HAProxy then and starts it too).
func (in *instance) reloadStarting(ctx context.Context, h *procwatch.Held) (bool, error) {
	cfg, err := os.ReadFile(in.s.layout().ConfigPath(in.lb))
	if err == nil && in.running != nil && bytes.Equal(cfg, in.running) {
		in.log().Warn("HAProxy is still starting on the configuration asked for; nothing to reload")
		return false, nil
	}
	in.log().Warn("HAProxy is still starting on an older configuration; starting the new one instead")
	h.Kill()
	return true, in.startOrRestore(ctx, h, "Error starting haproxy")
}

func (in *instance) check(ctx context.Context) (string, error) {
	st := in.s.store()
	state, err := st.ReadState(in.lb)
	if err != nil || state.Peer == "" {
		return "no peer name recorded: upload the configuration again", errors.New("no peer recorded")
	}
	out, skipped, err := st.CheckStored(ctx, in.lb, state.Peer)
	if skipped {
		in.log().Debug("config, HAProxy and the files it names unchanged since the check at upload; not checked again")
	}
	return out, err
}

// signalReload asks the master to load the stored config (SIGUSR2, as
// systemd's ExecReload does upstream) and waits until the master lists a
// new worker generation, or reports that loading failed. It returns the
// new worker's pid.
func (in *instance) signalReload(ctx context.Context, proc *procwatch.Process) (int, error) {
	before, err := stats.ShowProc(ctx, in.s.layout().MasterSocketPath(in.lb))
	return in.signalReloadFrom(ctx, proc, before, err)
}

// signalReloadFrom is signalReload with the master's answer (or error)
// from just before.
func (in *instance) signalReloadFrom(ctx context.Context, proc *procwatch.Process, before stats.Proc, err error) (int, error) {
	if err != nil {
		return 0, fmt.Errorf("master CLI before reload: %w", err)
	}
	if err := in.s.kill(proc.Pid, syscall.SIGUSR2); err != nil {
		return 0, fmt.Errorf("signalling the master: %w", err)
	}
	wait, cancel := context.WithTimeout(ctx, in.s.opts.ReloadWait)
	defer cancel()
	worker, err := in.awaitWorker(wait, proc, before, time.Now(), reloadPoll)
	// The wait may also end with the whole operation's time, when the
	// config check before the signal was slow (a busy amphora): a master
	// still loading then is as slow, not failed.
	if err != nil && wait.Err() != nil && proc.Alive() {
		return 0, errStillLoading
	}
	return worker, err
}

// errStillLoading: the master lives but has neither listed a new worker
// nor reported a failed load within ReloadWait.
var errStillLoading = errors.New("HAProxy is still loading the new configuration")

// awaitWorker polls the master, signalled for a reload at sent, every poll
// until it lists a worker it did not list before (its pid returned),
// reports a failed load, dies, or ctx ends. A master that shows it did not
// take the signal is signalled again (see resignalAfter).
func (in *instance) awaitWorker(ctx context.Context, proc *procwatch.Process, before stats.Proc, sent time.Time, poll time.Duration) (int, error) {
	sock := in.s.layout().MasterSocketPath(in.lb)
	old := map[int]bool{}
	for _, w := range before.Workers {
		old[w] = true
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		if !proc.Alive() {
			return 0, fmt.Errorf("HAProxy master %s during reload", proc.Status)
		}
		if now, err := stats.ShowProcAgain(ctx, sock); err == nil && now.MasterPID == proc.Pid {
			// The count grows with each failed load and drops to 0 at a
			// good one (which lists a new worker), so only a count above
			// the one before the signal says this load failed.
			if now.FailedReloads > before.FailedReloads {
				return 0, errors.New("HAProxy could not load the new configuration")
			}
			for _, w := range now.Workers {
				if !old[w] {
					return w, nil
				}
			}
			if now.Reloads == before.Reloads && time.Since(sent) >= resignalAfter {
				in.log().Warn("the HAProxy master did not take the reload signal; signalling it again",
					zap.Int("pid", proc.Pid), zap.Duration("after", time.Since(sent).Round(time.Millisecond)))
				if err := in.s.kill(proc.Pid, syscall.SIGUSR2); err == nil {
					sent = time.Now()
				}
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("no new HAProxy worker: %w", ctx.Err())
		case <-proc.Exited:
		case <-tick.C:
		}
	}
}

// followSlowReload waits, after the reload was answered, for the outcome
// of a load that outlasted ReloadWait: a new worker is watched as after
// any reload, a failed load is rolled back, and a master that never
// finishes is logged and left alone (it still serves with its old
// workers). Nothing is done once a later change (gen) or another master
// took over.
func (in *instance) followSlowReload(proc *procwatch.Process, before stats.Proc, signalled time.Time, gen uint64, offset int64) {
	defer in.busy.Add(-1)
	ctx, cancel := context.WithTimeout(context.Background(), slowReloadLimit)
	defer cancel()
	go func() {
		select {
		case <-in.s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	start := time.Now()
	worker, err := in.awaitWorker(ctx, proc, before, signalled, 100*time.Millisecond)
	if !proc.Alive() || in.closed() {
		return
	}
	in.operate(func(h *procwatch.Held) error {
		if in.loads != gen || h.Proc() != proc {
			return nil
		}
		switch {
		case err == nil:
			in.log().Info("HAProxy finished loading the new configuration",
				zap.Int("worker", worker), zap.Duration("after", in.s.opts.ReloadWait+time.Since(start)))
			in.loaded(h)
			go in.watchWorker(proc, worker, in.loads, offset)
		case ctx.Err() != nil:
			in.log().Error("HAProxy did not finish loading the new configuration; leaving it as it is",
				zap.Duration("followed", in.s.opts.ReloadWait+slowReloadLimit), zap.String("output", in.d.Output(offset)))
		default:
			in.log().Error("reload failed after it was answered; putting the last good config back",
				zap.Error(err), zap.String("output", in.d.Output(offset)))
			rctx, rcancel := context.WithTimeout(context.Background(), in.s.opts.OperationTimeout)
			defer rcancel()
			if rerr := in.rollback(rctx, h); rerr != nil {
				in.log().Error("rollback failed", zap.Error(rerr))
			}
		}
		return nil
	})
}

// waitSettle waits for settle; false when proc exited or the supervisor
// closed meanwhile.
func (in *instance) waitSettle(proc *procwatch.Process) bool {
	select {
	case <-proc.Exited:
		return false
	case <-in.s.done:
		return false
	case <-in.s.opts.After(settle):
		return true
	}
}

func (in *instance) closed() bool {
	select {
	case <-in.s.done:
		return true
	default:
		return false
	}
}

// watchWorker runs after a reload was answered: if the new worker exits
// within settle while its master lives on and no later config was loaded,
// the last good config is put back. A master that dies is OnDeath's.
func (in *instance) watchWorker(proc *procwatch.Process, worker int, gen uint64, offset int64) {
	sock := in.s.layout().MasterSocketPath(in.lb)
	listed := func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), stateTimeout)
		defer cancel()
		now, err := stats.ShowProc(ctx, sock)
		return err == nil && slices.Contains(now.Workers, worker), err
	}
	// Only the master's own word that the worker is gone counts: a master
	// too busy to answer (a loaded hypervisor) is asked again, and never
	// answering is no reason to replace a config that may be serving.
	for ask := 1; ; ask++ {
		if !in.waitSettle(proc) {
			return
		}
		ok, err := listed()
		if ok {
			return
		}
		if err == nil {
			break
		}
		if ask == quietMasterAsks {
			in.log().Warn("HAProxy's master did not answer after the reload; the new worker is not checked",
				zap.Int("worker", worker), zap.Error(err))
			return
		}
	}
	in.operate(func(h *procwatch.Held) error {
		if in.loads != gen || h.Proc() != proc || !proc.Alive() {
			return nil
		}
		if ok, err := listed(); ok || err != nil {
			return nil
		}
		reason := fmt.Sprintf("the new HAProxy worker %d exited right after start", worker)
		in.log().Error("new configuration failed right after it was loaded; putting the last good config back",
			zap.String("reason", reason), zap.String("output", in.d.Output(offset)))
		ctx, cancel := context.WithTimeout(context.Background(), in.s.opts.OperationTimeout)
		defer cancel()
		if err := in.rollback(ctx, h); err != nil {
			in.log().Error("rollback failed", zap.Error(err))
		}
		return nil
	})
}

func (in *instance) saveServersState(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	l := in.s.layout()
	sock := l.SocketPath(in.lb)
	if sum, err := l.Summary(in.lb); err == nil {
		if !sum.LoadsServerState {
			// The config being loaded never reads the states: saving
			// them (a dump of every server) would only delay the reload.
			return
		}
		if sum.StatsSocket != "" {
			sock = sum.StatsSocket
		}
	}
	out, err := stats.ShowServersState(ctx, sock)
	if err != nil {
		in.log().Warn("saving servers state before reload", zap.Error(err))
		return
	}
	if len(out) == 0 || out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	// Not fsync'd: HAProxy reads it at the reload just after, and after
	// power loss a missing or empty file only means servers start from
	// the config's states (upstream writes it in place, unsynced).
	if err := fsutil.Write(l.ServersStatePath(in.lb), out, 0o644, fsutil.Atomic); err != nil {
		in.log().Warn("saving servers state before reload", zap.Error(err))
	}
}
