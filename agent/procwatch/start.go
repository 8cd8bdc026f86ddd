package procwatch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/caller"
	"github.com/amphora-agent/amphora-agent/agent/pidfile"
)

// Start starts a new process and waits until it is ready and its
// pid file names it. On failure the process is killed and the error
// carries its output. The caller decides whether to retry (Retry).
//
// A start a client asked for waits as upstream's systemctl start does,
// up to AskedStartTimeout while the client waits (see WaitContext), so a
// death while loading is answered as a failure; other starts wait
// StartTimeout. A process still alive and not ready when the wait ends is
// no failure: Start returns nil with the process kept, supervised and
// followed in the background (Starting reports it meanwhile, OnReady runs
// when it is ready).
//
// Nothing starts without room for the pid file: a daemon that cannot
// write it (HAProxy and keepalived do not fail when the write does) would
// run where no later agent finds it to adopt or stop, and the next start
// would add a second one.
func (h *Held) Start(ctx context.Context) error {
	d := h.d
	s := &d.spec
	d.starting.Store(nil)
	for _, p := range append([]string{s.PidPath}, s.Clean...) {
		os.Remove(p)
	}
	d.endStrays()
	cmd, err := s.Command()
	if err != nil {
		return err
	}
	if cmd.Env == nil {
		cmd.Env = CleanEnv()
	}
	// What the previous run wrote last (a crash's alert) reaches the
	// journal before its file moves away.
	d.forward()
	logFile, err := openLog(s.LogPath)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own session, and so its own process group: signals meant for
	// the agent (a terminal's Ctrl-C, a service manager stopping the
	// agent) do not reach it, and a kill reaches all of its children. A
	// group in the agent's session would be orphaned when the agent
	// exits, and the kernel then sends SIGHUP and SIGCONT to it if a
	// member is stopped: a stopped HAProxy master would reload (and its
	// old worker close kept-alive connections), keepalived too.
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
	// Checked last, after the output file moved aside (its new one stays
	// empty: a failure here reports no earlier run's output).
	if err := s.Room(filepath.Dir(s.PidPath)); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s: no room for its pid file %s: %w", s.Name, s.PidPath, err)
	}
	err = s.Launch(cmd)
	logFile.Close()
	if err != nil {
		return fmt.Errorf("starting %s: %w", s.Name, err)
	}
	proc := WatchChild(cmd)
	begun := time.Now()
	wait, cancel := h.WaitContext(ctx, s.StartTimeout)
	defer cancel()
	err = WaitReady(wait, proc, s.Name, s.Poll, s.Settle, s.After, func() bool { return d.ready(wait, proc) },
		func() error { return errNotReady })
	// The disk filled up after the check above: say so, the daemon itself
	// does not, and it may never write its pid file.
	var roomErr error
	if err != nil {
		roomErr = s.Room(filepath.Dir(s.PidPath))
	}
	if errors.Is(err, errNotReady) && roomErr == nil && proc.Alive() {
		d.setProc(proc)
		d.starting.Store(proc)
		waited := time.Since(begun)
		s.Log.Warn(s.Name+" is not ready yet; answering now and following its start",
			zap.Int("pid", proc.Pid), zap.Duration("waited", waited.Round(time.Millisecond)))
		d.follow(proc)
		go d.followStart(proc, waited)
		return nil
	}
	if errors.Is(err, errNotReady) {
		err = fmt.Errorf("%s not ready within %v", s.Name, time.Since(begun).Round(time.Second))
		if !proc.Alive() {
			// It ended just as the wait did: that is what to say.
			err = fmt.Errorf("%s %s", s.Name, proc.Status)
		}
	}
	if err != nil {
		Kill(proc, 0)
		out := d.Output(0)
		if roomErr != nil {
			err = fmt.Errorf("%w: no room for its pid file %s: %w", err, s.PidPath, roomErr)
			out = strings.TrimSpace(out + "\n" + err.Error())
		}
		return withOutput(err, out)
	}
	d.setProc(proc)
	s.Log.Info(s.Name+" started", zap.Int("pid", proc.Pid))
	d.follow(proc)
	return nil
}

// WaitContext is the context a wait for a start's readiness runs under.
// For a start a client asked for and waits on (caller.Of) it is that
// client's context, bounded by AskedStartTimeout and not by ctx (the
// step's own deadline, which the caller renews after such a wait); for
// any other start it is ctx bounded by short.
func (h *Held) WaitContext(ctx context.Context, short time.Duration) (context.Context, context.CancelFunc) {
	if c, ok := caller.Of(ctx); ok {
		return context.WithTimeout(c, h.d.spec.AskedStartTimeout)
	}
	return context.WithTimeout(ctx, short)
}

// errNotReady: the readiness wait ended before the process was ready.
var errNotReady = errors.New("not ready")

// ErrStillStarting is AwaitStart's answer when the process is still not
// ready when its context ends.
var ErrStillStarting = errors.New("still starting")

// ready reports whether proc is ready: the pid file names it and the
// kind's own Ready agrees.
func (d *Daemon) ready(ctx context.Context, proc *Process) bool {
	pid, err := pidfile.Read(d.spec.PidPath)
	return err == nil && pid == proc.Pid && d.spec.Ready(ctx, proc)
}

// followStart follows a start that Start answered before the process was
// ready: ready, it is marked so and OnReady runs; still not ready after
// SlowStartLimit, it is killed and the respawner starts it again with
// backoff. A death meanwhile is the respawner's (see lateFailure).
func (d *Daemon) followStart(proc *Process, waited time.Duration) {
	s := &d.spec
	ctx, cancel := context.WithTimeout(context.Background(), s.SlowStartLimit)
	defer cancel()
	go func() {
		select {
		case <-d.done:
		case <-d.gone:
		case <-ctx.Done():
		}
		cancel()
	}()
	begun := time.Now()
	err := WaitReady(ctx, proc, s.Name, max(s.Poll, slowStartPoll), s.Settle, s.After,
		func() bool { return d.ready(ctx, proc) }, func() error { return errNotReady })
	if d.ended() || err != nil && !errors.Is(err, errNotReady) {
		return // a death is the respawner's (lateFailure)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// A death, a new start or a stop cleared starting.
	if d.starting.Load() != proc || d.proc != proc {
		return
	}
	d.starting.Store(nil)
	after := zap.Duration("after", (waited + time.Since(begun)).Round(time.Millisecond))
	switch {
	case err == nil:
		s.Log.Info(s.Name+" started, after its start was answered", zap.Int("pid", proc.Pid), after)
		if s.OnReady != nil {
			s.OnReady(proc)
		}
	case errors.Is(err, errNotReady):
		s.Log.Error(s.Name+" still not ready; killing it to start it again", zap.Int("pid", proc.Pid), after,
			zap.String("output", d.Output(0)))
		Kill(proc, killWait)
	}
}

// lateFailure logs, under the lock, the death of a process Start answered
// for before it was ready, with its output: the controller never saw
// that failure, and the restart that follows moves the output aside.
func (d *Daemon) lateFailure(proc *Process) {
	if !d.starting.CompareAndSwap(proc, nil) {
		return
	}
	d.spec.Log.Error(d.spec.Name+" failed after its start was answered", zap.Int("pid", proc.Pid),
		zap.String("status", proc.Status), zap.String("output", d.Output(0)))
}

// AwaitStart waits, for as long as ctx lasts, for a process that Start
// answered for before it was ready. It returns nil once that one is ready
// (OnReady has run) or when none is starting, ErrStillStarting when ctx
// ends first, and the exit when the process ended.
func (h *Held) AwaitStart(ctx context.Context) error {
	d := h.d
	s := &d.spec
	proc := d.starting.Load()
	if proc == nil || proc != d.proc {
		return nil
	}
	err := WaitReady(ctx, proc, s.Name, s.Poll, s.Settle, s.After, func() bool { return d.ready(ctx, proc) },
		func() error { return ErrStillStarting })
	if err != nil {
		if !errors.Is(err, ErrStillStarting) {
			d.lateFailure(proc)
		}
		return err
	}
	d.starting.Store(nil)
	s.Log.Info(s.Name+" started, after its start was answered", zap.Int("pid", proc.Pid))
	if s.OnReady != nil {
		s.OnReady(proc)
	}
	return nil
}

// Starting reports whether the current process is one Start answered for
// before it was ready, and that is not ready yet.
func (h *Held) Starting() bool {
	p := h.d.starting.Load()
	return p != nil && p == h.d.proc && p.Alive()
}

// Starting is the process Start answered for before it was ready, while
// it is not ready yet and alive; nil otherwise. It never waits for the
// daemon's lock.
func (d *Daemon) Starting() *Process {
	if p := d.starting.Load(); p != nil && p.Alive() {
		return p
	}
	return nil
}

// probeRoom writes, syncs and removes a small file in dir: on a full file
// system the write or the sync fails (ENOSPC).
func probeRoom(dir string) error {
	f, err := os.CreateTemp(dir, ".room-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.Write([]byte("4194304\n")) // the longest pid and its newline
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// CleanEnv is the environment daemons and their checks run with: a plain
// PATH and nothing inherited from the agent's service manager
// (NOTIFY_SOCKET in particular, which would let HAProxy's -Ws mode or
// keepalived talk to the agent's systemd unit).
func CleanEnv() []string {
	return []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
}
