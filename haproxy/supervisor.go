package haproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/journal"
	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/caller"
	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/journalfwd"
	"github.com/amphora-agent/amphora-agent/agent/procwatch"
	"github.com/amphora-agent/amphora-agent/haproxy/stats"
	"github.com/amphora-agent/amphora-agent/netns"
)

// Timeouts of one lifecycle step. Stopping uses procwatch's default
// (10 s). A start the controller asked for waits for readiness as long as
// upstream's systemctl start (procwatch.DefaultAskedStartTimeout) while
// the controller waits; the steps after such a wait get a deadline of
// their own.
const (
	// DefaultStartWait is how long a start nobody waits on (a restore, a
	// respawn) waits for the master to list a worker before it is answered
	// anyway (see SupervisorOptions.StartWait).
	DefaultStartWait = procwatch.DefaultStartTimeout
	// DefaultReloadWait is how long a reload waits for the master's new
	// worker before it is answered anyway (see SupervisorOptions.ReloadWait).
	DefaultReloadWait = 12 * time.Second
	// slowReloadLimit is how long a reload answered before its new worker
	// appeared is still followed: an outcome within it is acted on (a
	// failure rolled back), none within it is logged.
	slowReloadLimit = 3 * time.Minute
	// quietMasterAsks is how many times the settle watch asks a master that
	// does not answer before it gives up without acting.
	quietMasterAsks = 3
	// DefaultOperationTimeout bounds each step of a start or reload not
	// bounded by the client's wait (the rollback, the reload signal).
	DefaultOperationTimeout = 28 * time.Second
	stateTimeout            = 3 * time.Second
	// settle is how long a new worker is watched after a reload was
	// answered: one that exits within it (while its master lives on) makes
	// the agent put the last good config back. The answer does not wait
	// for it; a master that dies is handled by OnDeath at any time.
	settle = procwatch.DefaultSettle
	// reloadPoll is how often the master is asked for its new worker: the
	// controller waits for the answer, so the poll is kept short. While the
	// master re-executes, its socket refuses at once; once it listens, the
	// question waits for the answer.
	reloadPoll = time.Millisecond
	// restoreParallel is how many load balancers Restore starts at once.
	restoreParallel = 4
	// resignalAfter: a master that answers its CLI this long after the
	// reload signal, still counting the reloads it counted before, did not
	// take the signal (one that lands as the master finishes re-executing
	// can be lost), so it is signalled again. A master that took it does
	// not answer until it has re-executed, however slow its load.
	resignalAfter = 2 * time.Second
)

// DefaultConfirmAfter is how long a newly loaded config must keep HAProxy
// alive before it becomes the last good config. A master that dies sooner
// is restarted on the previous good config instead.
const DefaultConfirmAfter = 10 * time.Second

// SupervisorOptions configure a Supervisor.
type SupervisorOptions struct {
	Store     *Store
	Namespace string
	Backoff   procwatch.Backoff
	Log       *zap.Logger
	ProcDir   string
	// ConfirmAfter: see DefaultConfirmAfter.
	ConfirmAfter time.Duration
	// AfterFunc runs f once d has passed (time.AfterFunc by default): the
	// clock of ConfirmAfter, which a test fires itself instead of waiting.
	AfterFunc func(d time.Duration, f func())
	// After is the clock of the restart backoff and of the settle times
	// after a start and a reload (time.After by default), which a test
	// sees instead of spending.
	After func(d time.Duration) <-chan time.Time
	// Journal receives each load balancer's HAProxy output (under
	// systemd); nil keeps it in the output files only.
	Journal journalfwd.Sink
	// ReloadWait (DefaultReloadWait when zero) bounds how long a reload
	// waits for the master's new worker. A master still loading then, and
	// alive, is not a failure: upstream's reload returns once HAProxy is
	// signalled, and a slow amphora (a busy hypervisor) can take longer.
	// The reload is answered and its outcome followed in the background.
	ReloadWait time.Duration
	// StartWait (DefaultStartWait when zero) is the same bound for a start
	// nobody waits on (a restore, a respawn). A start the controller asked
	// for (also a reload of a stopped LB) waits, as upstream's systemctl
	// start does for HAProxy's READY, up to AskedStartWait while the
	// controller waits. A master alive and loading then is answered for
	// and followed, never killed for being slow.
	StartWait time.Duration
	// AskedStartWait: procwatch.DefaultAskedStartTimeout when zero.
	AskedStartWait time.Duration
	// OperationTimeout (DefaultOperationTimeout when zero) bounds a whole
	// start or reload, its rollback included.
	OperationTimeout time.Duration
}

// Supervisor runs every load balancer's HAProxy in master-worker mode
// inside the data-plane namespace, each under a procwatch.Daemon. What is
// HAProxy's own lives here: the config check, readiness (the master lists
// a worker), hitless reload through the master, and going back to the
// last good config when a new one fails at run time. Closing it leaves
// HAProxy serving.
type Supervisor struct {
	opts SupervisorOptions
	log  *zap.Logger

	mu  sync.Mutex
	lbs map[string]*instance

	done      chan struct{}
	closeOnce sync.Once

	// kill sends a signal to a master (syscall.Kill): a test drops one
	// to play a signal HAProxy lost.
	kill func(pid int, sig syscall.Signal) error
}

// NewSupervisor returns a Supervisor; call Restore to pick up existing
// load balancers.
func NewSupervisor(o SupervisorOptions) *Supervisor {
	if o.ConfirmAfter <= 0 {
		o.ConfirmAfter = DefaultConfirmAfter
	}
	if o.AfterFunc == nil {
		o.AfterFunc = func(d time.Duration, f func()) { time.AfterFunc(d, f) }
	}
	if o.After == nil {
		o.After = time.After
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.ReloadWait <= 0 {
		o.ReloadWait = DefaultReloadWait
	}
	if o.StartWait <= 0 {
		o.StartWait = DefaultStartWait
	}
	if o.OperationTimeout <= 0 {
		o.OperationTimeout = DefaultOperationTimeout
	}
	return &Supervisor{opts: o, log: o.Log, lbs: map[string]*instance{}, done: make(chan struct{}), kill: syscall.Kill}
}

// Close stops supervising. HAProxy processes keep running; the next agent
// adopts them.
func (s *Supervisor) Close() {
	s.closeOnce.Do(func() { close(s.done) })
}

func (s *Supervisor) instance(lb string) *instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.lbs[lb]
	if !ok {
		in = s.newInstance(lb)
		s.lbs[lb] = in
	}
	return in
}

func (s *Supervisor) forget(lb string) {
	s.mu.Lock()
	delete(s.lbs, lb)
	s.mu.Unlock()
}

func (s *Supervisor) store() *Store  { return s.opts.Store }
func (s *Supervisor) layout() Layout { return s.opts.Store.Layout }

// Running reports whether lb's master is supervised and alive.
func (s *Supervisor) Running(lb string) bool {
	running, _ := s.State(lb)
	return running
}

// State reports whether lb's master is supervised and alive, and whether
// the agent is busy with it: starting, reloading or restoring it, putting
// its last good config back, or following a start or a reload it answered
// before it ended. Meanwhile its stats socket may refuse a read for a
// moment, and the heartbeat reports the load balancer from its last
// reading. A respawn after HAProxy died on its own is not busy: that
// outage is real. State never waits for an operation under way.
func (s *Supervisor) State(lb string) (running, busy bool) {
	s.mu.Lock()
	in, ok := s.lbs[lb]
	s.mu.Unlock()
	if !ok {
		return false, false
	}
	return in.d.Running(), in.busyNow()
}

// History is lb's restart record; ok is false when lb is not supervised.
func (s *Supervisor) History(lb string) (h procwatch.History, ok bool) {
	s.mu.Lock()
	in, ok := s.lbs[lb]
	s.mu.Unlock()
	if !ok {
		return h, false
	}
	return in.d.History(), true
}

// detach gives a lifecycle step its own deadline, cut loose from the
// request that asked for it: once begun, a start, stop, reload or delete
// runs to completion even if the controller hangs up, so it never leaves
// a half-done state (a rollback of a valid config, a killed master). The
// request stays recorded (caller.Of) for the waits that last as long as
// the controller does; after one of those, detach again.
func (s *Supervisor) detach(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.opts.OperationTimeout)
}

// Start starts lb; starting a running LB changes nothing. A start that
// fails is answered with HAProxy's output and retried with backoff.
func (s *Supervisor) Start(ctx context.Context, lb string) error {
	if !s.store().Exists(lb) {
		return notFound(lb)
	}
	ctx, cancel := s.detach(ctx)
	defer cancel()
	in := s.instance(lb)
	return in.operate(func(h *procwatch.Held) error {
		if err := h.SetDesired(true); err != nil {
			return fault.Internalf("%w", err)
		}
		if h.Proc() != nil {
			return in.awaitAsked(ctx, h)
		}
		return in.startOrRestore(ctx, h, "Error starting haproxy")
	})
}

// awaitAsked serves a start asked for while an earlier one, answered when
// its client went away, is still loading: like upstream's systemctl start
// joining the start job under way, it waits for that start's outcome
// while its client waits.
func (in *instance) awaitAsked(ctx context.Context, h *procwatch.Held) error {
	if _, ok := caller.Of(ctx); !ok || !h.Starting() {
		return nil
	}
	wait, cancel := h.WaitContext(ctx, 0)
	defer cancel()
	err := h.AwaitStart(wait)
	if err == nil || errors.Is(err, procwatch.ErrStillStarting) {
		return nil
	}
	return fault.Internal("Error starting haproxy", in.output(0, err), err)
}

// Stop stops lb and remembers that it must stay stopped.
func (s *Supervisor) Stop(ctx context.Context, lb string) error {
	if !s.store().Exists(lb) {
		return notFound(lb)
	}
	in := s.instance(lb)
	return in.d.With(func(h *procwatch.Held) error {
		// HAProxy stops even when its stopped state cannot be recorded (a
		// full disk): the controller asked for it to stop, and hears about
		// the record after.
		recErr := h.SetDesired(false)
		if err := in.stop(h); err != nil {
			return errors.Join(err, recErr)
		}
		if recErr != nil {
			return fault.Internal("HAProxy stopped, but its stopped state could not be recorded", recErr.Error(), recErr)
		}
		return nil
	})
}

// Reload makes lb run its stored config without dropping connections. A
// stopped LB is started instead (started reports that).
func (s *Supervisor) Reload(ctx context.Context, lb string) (started bool, err error) {
	if !s.store().Exists(lb) {
		return false, notFound(lb)
	}
	ctx, cancel := s.detach(ctx)
	defer cancel()
	in := s.instance(lb)
	err = in.operate(func(h *procwatch.Held) error {
		started, err = in.reload(ctx, h)
		return err
	})
	return started, err
}

// Delete stops lb and removes its files.
func (s *Supervisor) Delete(ctx context.Context, lb string) error {
	in := s.instance(lb)
	err := in.d.With(func(h *procwatch.Held) error {
		err := in.stop(h)
		h.Remove()
		return err
	})
	if err != nil {
		return fault.Internal("Error stopping haproxy", err.Error(), err)
	}
	s.forget(lb)
	if err := s.store().Remove(lb); err != nil {
		return fault.Internalf("removing load balancer %s: %w", lb, err)
	}
	return nil
}

// Restore brings every load balancer back to its desired state after an
// agent restart or a reboot: a master still running from the previous
// agent is adopted, one that should run but does not is started (and
// retried with backoff if it fails). Load balancers are restored a few at
// a time, so that each one's readiness wait overlaps the others' start.
// It stops early when ctx ends.
func (s *Supervisor) Restore(ctx context.Context) error {
	lbs, err := s.layout().LoadBalancers()
	if err != nil {
		return err
	}
	errs := make([]error, len(lbs))
	sem := make(chan struct{}, restoreParallel)
	var wg sync.WaitGroup
	for i, lb := range lbs {
		if ctx.Err() != nil {
			errs[i] = ctx.Err()
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			in := s.instance(lb)
			err := in.operate(func(h *procwatch.Held) error {
				octx, cancel := s.detach(ctx)
				defer cancel()
				return h.Restore(octx, func(ctx context.Context) error {
					return in.startOrRestore(ctx, h, "Error starting haproxy")
				})
			})
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", lb, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// instance is the supervision of one load balancer. Its fields are
// guarded by d's lock: what touches them runs inside d.With, and the
// methods that do take its Held.
type instance struct {
	s  *Supervisor
	lb string
	d  *procwatch.Daemon
	// loads counts configs loaded; unconfirmed marks the latest as not yet
	// proven by ConfirmAfter of uptime.
	loads       uint64
	unconfirmed bool
	// confirmOnReady: the latest config was loaded by a start answered
	// before the master was ready; ConfirmAfter counts from readiness.
	confirmOnReady bool
	// running is the config HAProxy loaded last (uploads replace the
	// stored one before the reload): what confirm makes the last good one.
	// Only this process needs it; after a restart nothing is unconfirmed.
	running []byte

	// busy counts the operations under way (State); slowStart is a master
	// whose start an operation answered before it was ready. Both are
	// read without d's lock.
	busy      atomic.Int32
	slowStart atomic.Pointer[procwatch.Process]
}

// operate runs op under d's lock, counted as busy (State) meanwhile and,
// when op answered a start before its master was ready, until it is.
func (in *instance) operate(op func(h *procwatch.Held) error) error {
	in.busy.Add(1)
	defer func() {
		if p := in.d.Starting(); p != nil {
			in.slowStart.Store(p)
		}
		in.busy.Add(-1)
	}()
	return in.d.With(op)
}

func (in *instance) busyNow() bool {
	if in.busy.Load() > 0 {
		return true
	}
	p := in.slowStart.Load()
	return p != nil && in.d.Starting() == p
}

func (s *Supervisor) newInstance(lb string) *instance {
	in := &instance{s: s, lb: lb}
	l := s.layout()
	sock := l.MasterSocketPath(lb)
	in.d = procwatch.NewDaemon(procwatch.Spec{
		Name:      "HAProxy",
		Log:       s.log.With(zap.String("lb", lb)),
		Command:   in.command,
		Launch:    func(cmd *exec.Cmd) error { return netns.StartIn(s.opts.Namespace, cmd) },
		PidPath:   l.PidPath(lb),
		LogPath:   l.LogPath(lb),
		StatePath: l.StatePath(lb),
		Clean:     []string{sock},
		ProcDir:   s.opts.ProcDir,
		Ours:      in.ours,
		Healthy: func(ctx context.Context, pid int) bool {
			_, err := stats.ShowProc(ctx, sock)
			return err == nil
		},
		Ready: func(ctx context.Context, _ *procwatch.Process) bool {
			t, err := stats.ShowProc(ctx, sock)
			return err == nil && len(t.Workers) > 0
		},
		OnDeath:           in.died,
		OnReady:           in.readyLate,
		StartTimeout:      s.opts.StartWait,
		AskedStartTimeout: s.opts.AskedStartWait,
		Backoff:           s.opts.Backoff,
		After:             s.opts.After,
		Journal:           journalfwd.Options{Sink: s.opts.Journal, Identifier: l.JournalIdentifier(lb), Priority: Priority},
	}, s.done)
	return in
}

// Priority is the journal priority of a line of HAProxy's output, from
// the level it starts with ("[ALERT]    (pid) : ...").
func Priority(line []byte) journal.Priority {
	switch {
	case bytes.HasPrefix(line, []byte("[ALERT]")):
		return journal.PriErr
	case bytes.HasPrefix(line, []byte("[WARNING]")):
		return journal.PriWarning
	case bytes.HasPrefix(line, []byte("[NOTICE]")):
		return journal.PriNotice
	}
	return journal.PriInfo
}

func (in *instance) log() *zap.Logger { return in.s.log.With(zap.String("lb", in.lb)) }

// command is the master's command line: master-worker mode with a master
// CLI socket, the LB's config and the image's user/group file.
func (in *instance) command() (*exec.Cmd, error) {
	st, l := in.s.store(), in.s.layout()
	state, err := st.ReadState(in.lb)
	if err != nil || state.Peer == "" {
		return nil, fmt.Errorf("no peer name recorded for %s: upload its configuration again", in.lb)
	}
	if err := st.EnsureUserGroupFile(); err != nil {
		return nil, err
	}
	if sum, err := l.Summary(in.lb); err == nil {
		// HAProxy raises its own soft limit; it inherits the hard one.
		raiseFDLimit(sum.FDsNeeded())
	}
	args := append([]string{"-Ws", "-S", l.MasterSocketPath(in.lb) + ",mode,600", "-p", l.PidPath(in.lb)},
		st.configArgs(in.lb, state.Peer)...)
	cmd := exec.Command(st.HAProxyCmd, args...)
	cmd.Dir = l.Dir(in.lb)
	return cmd, nil
}

// ours checks that a command line is an HAProxy master running lb's
// config with lb's master socket.
func (in *instance) ours(args []string) bool { return in.s.layout().Runs(in.lb, args) }

// startOrRestore starts the stored config; if it fails and a different
// last good config exists, that one is put back and started, and the
// failure is still reported. If HAProxy is still down after that while it
// should run, it stays under supervision and is retried with backoff.
func (in *instance) startOrRestore(ctx context.Context, h *procwatch.Held, message string) error {
	err := h.Start(ctx)
	if err == nil {
		in.loaded(h)
		return nil
	}
	output := in.output(0, err)
	l := in.s.layout()
	good, gerr := os.ReadFile(l.LastGoodPath(in.lb))
	cur, cerr := os.ReadFile(l.ConfigPath(in.lb))
	if gerr == nil && cerr == nil && string(good) != string(cur) {
		in.log().Error("start failed; putting the last good config back", zap.String("output", output))
		// The start may have waited as long as its client did.
		rctx, cancel := in.s.detach(ctx)
		defer cancel()
		if rerr := in.rollback(rctx, h); rerr != nil {
			output += "\nrollback to the last good configuration failed: " + rerr.Error()
		}
	}
	if h.Proc() == nil {
		h.Retry(err)
	}
	return fault.Internal(message, output, err)
}

// stop stops the master (and so its workers) and waits for it.
func (in *instance) stop(h *procwatch.Held) error {
	in.confirmIfAlive(h)
	return h.Stop()
}

// output is what the master wrote after offset (or the cause, when it
// wrote nothing), with plain words added for the failure operators hit
// most.
func (in *instance) output(offset int64, cause error) string {
	out := procwatch.Output(cause)
	if out == "" {
		out = in.d.Output(offset)
	}
	if out == "" && cause != nil {
		out = cause.Error()
	}
	return explainOutput(out)
}

// explainOutput adds plain words to the HAProxy alert operators hit most.
func explainOutput(out string) string {
	if m := fdAlert.FindStringSubmatch(out); m != nil {
		out += fmt.Sprintf("\nHAProxy needs %s open files for this configuration but is allowed %s (RLIMIT_NOFILE): lower the listeners' connection_limit or raise LimitNOFILE of the amphora-agent service.", m[1], m[2])
	}
	return out
}

var fdAlert = regexp.MustCompile(`Cannot raise FD limit to (\d+), limit is (\d+)`)
