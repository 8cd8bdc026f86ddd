package haproxy

import (
	"context"
	"errors"
	"fmt"
	"os"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/caller"
	"github.com/amphora-agent/amphora-agent/agent/fsutil"
	"github.com/amphora-agent/amphora-agent/agent/procwatch"
)

// died runs before a master that died is started again: a config that
// never proved itself is replaced by the last good one first.
func (in *instance) died(proc *procwatch.Process) {
	in.confirmOnReady = false
	if !in.unconfirmed {
		return
	}
	in.unconfirmed = false
	if err := in.restoreLastGoodFile(); err == nil {
		in.log().Error("HAProxy died soon after loading a new configuration; restarting it on the last good configuration",
			zap.String("status", proc.Status))
	} else if !errors.Is(err, os.ErrNotExist) {
		in.log().Error("putting the last good configuration back", zap.Error(err))
	}
}

// loaded records that the stored config now runs. It becomes the last good
// config once HAProxy has stayed up on it for ConfirmAfter.
func (in *instance) loaded(h *procwatch.Held) {
	cfg, err := os.ReadFile(in.s.layout().ConfigPath(in.lb))
	if err != nil {
		in.log().Warn("recording the running config", zap.Error(err))
		return
	}
	in.running = cfg
	in.loads++
	in.unconfirmed = true
	// A master still loading has proven nothing yet.
	in.confirmOnReady = h.Starting()
	if !in.confirmOnReady {
		in.confirmLater(in.loads, h.Proc())
	}
}

// readyLate runs when a start answered before the master was ready has
// become ready: the config it loaded starts proving itself now.
func (in *instance) readyLate(proc *procwatch.Process) {
	if in.confirmOnReady {
		in.confirmOnReady = false
		in.confirmLater(in.loads, proc)
	}
}

// confirmLater makes config generation gen the last good one once proc has
// run it for ConfirmAfter.
func (in *instance) confirmLater(gen uint64, proc *procwatch.Process) {
	in.s.opts.AfterFunc(in.s.opts.ConfirmAfter, func() {
		in.d.With(func(h *procwatch.Held) error {
			if in.loads == gen && in.unconfirmed && proc != nil && h.Proc() == proc {
				in.confirm()
			}
			return nil
		})
	})
}

// confirmIfAlive confirms the running config when HAProxy is still up on
// it: a config that served until the next change or a deliberate stop has
// proven itself.
func (in *instance) confirmIfAlive(h *procwatch.Held) { in.confirmAsync(h)() }

// confirmAsync is confirmIfAlive writing the last good config in the
// background; the returned function waits for the write. Nothing may read
// the last good config, or load another config, before it returns.
func (in *instance) confirmAsync(h *procwatch.Held) (wait func()) {
	// A master still loading (a slow start) has not served the config.
	if !in.unconfirmed || h.Proc() == nil || h.Starting() {
		return func() {}
	}
	in.unconfirmed = false
	cfg := in.running
	in.running = nil
	done := make(chan struct{})
	go func() {
		defer close(done)
		in.writeLastGood(cfg)
	}()
	return func() { lastGoodJoining(); <-done }
}

// restoreLastGoodFile puts the last good config back as the stored config
// (keeping the current one as haproxy.cfg.new-failed) without touching
// processes.
func (in *instance) restoreLastGoodFile() error {
	l := in.s.layout()
	good, err := os.ReadFile(l.LastGoodPath(in.lb))
	if err != nil {
		return err
	}
	cur, err := os.ReadFile(l.ConfigPath(in.lb))
	if err == nil && string(cur) == string(good) {
		return nil
	}
	if err == nil {
		if err := fsutil.WriteFile(l.FailedPath(in.lb), cur, 0o600); err != nil {
			in.log().Warn("keeping the failed config", zap.Error(err))
		}
	}
	return fsutil.WriteFile(l.ConfigPath(in.lb), good, 0o600)
}

// rollback puts the last good config back as the stored config and makes
// HAProxy run it, so a bad push never leaves the LB down. The rejected
// config is kept as haproxy.cfg.new-failed.
func (in *instance) rollback(ctx context.Context, h *procwatch.Held) error {
	// Nobody asked for it: the failure is answered without waiting for
	// its start, which is followed in the background if slow.
	ctx = caller.Without(ctx)
	if err := in.restoreLastGoodFile(); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("no last good configuration: %w", err)
		}
		return err
	}
	// The config going back in has already proven itself.
	in.unconfirmed = false
	if proc := h.Proc(); proc != nil {
		// A master still loading the last good config is on its way to it.
		if _, err := in.signalReload(ctx, proc); err == nil || errors.Is(err, errStillLoading) {
			return nil
		}
		h.Kill()
	}
	return h.Start(ctx)
}

// confirm makes the running config the last good one.
func (in *instance) confirm() {
	in.unconfirmed = false
	cfg := in.running
	in.running = nil
	in.writeLastGood(cfg)
}

// Hooks that let a test hold the last good config's background write
// until a reload joins it.
var (
	lastGoodWriting = func() {}
	lastGoodJoining = func() {}
)

func (in *instance) writeLastGood(cfg []byte) {
	if cfg == nil {
		return
	}
	lastGoodWriting()
	if err := fsutil.WriteFile(in.s.layout().LastGoodPath(in.lb), cfg, 0o600); err != nil {
		in.log().Warn("recording the last good config", zap.Error(err))
	}
}
