package haproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/fsutil"
	"github.com/amphora-agent/amphora-agent/agent/pidfile"
	"github.com/amphora-agent/amphora-agent/agent/procwatch"
	"github.com/amphora-agent/amphora-agent/haproxy/stats"
	"github.com/amphora-agent/amphora-agent/netns"
)

// Timeouts of one lifecycle step. A reload and its rollback together stay
// under 30 s, well inside the controller's 60 s read timeout.
const (
	startTimeout  = 12 * time.Second
	reloadTimeout = 12 * time.Second
	// operationTimeout bounds a whole start or reload including its
	// rollback: the controller must get its 500 within 30 s.
	operationTimeout = 28 * time.Second
	killWait         = 3 * time.Second
	stateTimeout     = 3 * time.Second
	stopTimeout      = 10 * time.Second
	pollEvery        = 25 * time.Millisecond
	// settle is how long a new worker must stay up before a start or
	// reload is answered as done: workers that fail at once are caught
	// before the controller hears "OK".
	settle = 300 * time.Millisecond
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
}

// Supervisor runs every load balancer's HAProxy in master-worker mode,
// inside the data-plane namespace, in its own process group. It restarts
// a master that dies unexpectedly, reloads hitlessly through the master,
// puts the last good config back when a new one fails at run time, and
// adopts masters left running by an earlier agent process. Closing it
// leaves HAProxy serving.
type Supervisor struct {
	opts SupervisorOptions
	log  *zap.Logger

	mu  sync.Mutex
	lbs map[string]*instance

	done      chan struct{}
	closeOnce sync.Once
}

// NewSupervisor returns a Supervisor; call Restore to pick up existing
// load balancers.
func NewSupervisor(o SupervisorOptions) *Supervisor {
	if o.Backoff == (procwatch.Backoff{}) {
		o.Backoff = procwatch.DefaultBackoff
	}
	if o.ProcDir == "" {
		o.ProcDir = "/proc"
	}
	if o.ConfirmAfter <= 0 {
		o.ConfirmAfter = DefaultConfirmAfter
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	return &Supervisor{opts: o, log: o.Log, lbs: map[string]*instance{}, done: make(chan struct{})}
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
		in = &instance{s: s, lb: lb}
		s.lbs[lb] = in
	}
	return in
}

func (s *Supervisor) forget(lb string) {
	s.mu.Lock()
	delete(s.lbs, lb)
	s.mu.Unlock()
}

func (s *Supervisor) store() *Store { return s.opts.Store }

// masterSocket is the master CLI socket of lb (kept in the LB's folder).
func (s *Supervisor) masterSocket(lb string) string {
	return filepath.Join(s.store().Layout.Dir(lb), "master.sock")
}

// logPath collects the master's stderr: its alerts are what a failed
// start or reload answers with. A file, not a pipe, so HAProxy outlives
// the agent without dying of SIGPIPE.
func (s *Supervisor) logPath(lb string) string {
	return filepath.Join(s.store().Layout.Dir(lb), "haproxy.log")
}

// Running reports whether lb's master is supervised and alive.
func (s *Supervisor) Running(lb string) bool {
	s.mu.Lock()
	in, ok := s.lbs[lb]
	s.mu.Unlock()
	if !ok {
		return false
	}
	in.op.Lock()
	defer in.op.Unlock()
	return in.proc != nil && in.proc.Alive()
}

// Start starts lb; starting a running LB changes nothing.
func (s *Supervisor) Start(ctx context.Context, lb string) error {
	if !s.store().Exists(lb) {
		return notFound(lb)
	}
	in := s.instance(lb)
	in.op.Lock()
	defer in.op.Unlock()
	if err := in.setDesired(true); err != nil {
		return err
	}
	if in.proc != nil && in.proc.Alive() {
		return nil
	}
	return in.startOrRestore(ctx, "Error starting haproxy")
}

// Stop stops lb and remembers that it must stay stopped.
func (s *Supervisor) Stop(ctx context.Context, lb string) error {
	if !s.store().Exists(lb) {
		return notFound(lb)
	}
	in := s.instance(lb)
	in.op.Lock()
	defer in.op.Unlock()
	if err := in.setDesired(false); err != nil {
		return err
	}
	return in.stopLocked()
}

// Reload makes lb run its stored config without dropping connections. A
// stopped LB is started instead (started reports that).
func (s *Supervisor) Reload(ctx context.Context, lb string) (started bool, err error) {
	if !s.store().Exists(lb) {
		return false, notFound(lb)
	}
	in := s.instance(lb)
	in.op.Lock()
	defer in.op.Unlock()
	return in.reloadLocked(ctx)
}

// Delete stops lb and removes its files.
func (s *Supervisor) Delete(ctx context.Context, lb string) error {
	in := s.instance(lb)
	in.op.Lock()
	err := in.stopLocked()
	in.deleted = true
	in.op.Unlock()
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
// agent is adopted, one that should run but does not is started.
func (s *Supervisor) Restore(ctx context.Context) error {
	lbs, err := s.store().Layout.LoadBalancers()
	if err != nil {
		return err
	}
	var errs []error
	for _, lb := range lbs {
		in := s.instance(lb)
		in.op.Lock()
		err := in.restoreLocked(ctx)
		in.op.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", lb, err))
		}
	}
	return errors.Join(errs...)
}

// instance is the supervision of one load balancer.
type instance struct {
	s  *Supervisor
	lb string

	// op serializes start, stop, reload, respawn and delete of this LB.
	op      sync.Mutex
	proc    *procwatch.Process // the master, nil when not running
	desired bool               // keep it running
	deleted bool
	respawn procwatch.Respawns
	// loads counts configs loaded; unconfirmed marks the latest as not yet
	// proven by ConfirmAfter of uptime.
	loads       uint64
	unconfirmed bool
}

func (in *instance) log() *zap.Logger { return in.s.log.With(zap.String("lb", in.lb)) }

func (in *instance) setDesired(running bool) error {
	in.desired = running
	st, err := in.s.store().ReadState(in.lb)
	if err != nil {
		in.log().Warn("unreadable load balancer record; rewriting it", zap.Error(err))
	}
	if st.Running == running && err == nil {
		return nil
	}
	st.Running = running
	if err := in.s.store().WriteState(in.lb, st); err != nil {
		return fault.Internalf("recording desired state: %w", err)
	}
	return nil
}

func (in *instance) reloadLocked(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, operationTimeout)
	defer cancel()
	if err := in.setDesired(true); err != nil {
		return false, err
	}
	if in.proc == nil || !in.proc.Alive() {
		return true, in.startOrRestore(ctx, "Error starting haproxy")
	}
	// As upstream's ExecReload: never hand the master a config that does
	// not pass the check (the file or the user/group file may have changed
	// since the upload).
	if out, err := in.check(ctx); err != nil {
		return false, fault.Internal("Error reloading haproxy", out, err)
	}
	in.confirmIfAlive()
	in.saveServersState(ctx)
	offset := in.logSize()
	err := in.signalReload(ctx)
	if err == nil {
		in.loaded()
		return false, nil
	}
	output := in.logSince(offset, err)
	in.log().Error("reload failed; putting the last good config back", zap.String("output", output))
	if rerr := in.rollback(ctx); rerr != nil {
		in.log().Error("rollback failed", zap.Error(rerr))
		output += "\nrollback to the last good configuration failed: " + rerr.Error()
	}
	return false, fault.Internal("Error reloading haproxy", output, err)
}

func (in *instance) check(ctx context.Context) (string, error) {
	st := in.s.store()
	state, err := st.ReadState(in.lb)
	if err != nil || state.Peer == "" {
		return "no peer name recorded: upload the configuration again", errors.New("no peer recorded")
	}
	return st.check(ctx, st.Layout.ConfigPath(in.lb), state.Peer)
}

// signalReload asks the master to load the stored config (SIGUSR2, as
// systemd's ExecReload does upstream) and waits until the master lists a
// new worker generation, or reports that loading failed.
func (in *instance) signalReload(ctx context.Context) error {
	sock := in.s.masterSocket(in.lb)
	before, err := showProc(ctx, sock)
	if err != nil {
		return fmt.Errorf("master CLI before reload: %w", err)
	}
	old := map[int]bool{}
	for _, w := range before.Workers {
		old[w] = true
	}
	if err := syscall.Kill(in.proc.Pid, syscall.SIGUSR2); err != nil {
		return fmt.Errorf("signalling the master: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, reloadTimeout)
	defer cancel()
	for {
		if !in.proc.Alive() {
			return fmt.Errorf("HAProxy master %s during reload", in.proc.Status)
		}
		if now, err := showProc(ctx, sock); err == nil && now.MasterPID == in.proc.Pid {
			if now.FailedReloads > before.FailedReloads {
				return errors.New("HAProxy could not load the new configuration")
			}
			for _, w := range now.Workers {
				if !old[w] {
					return in.settled(ctx, w)
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no new HAProxy worker within %v", reloadTimeout)
		case <-time.After(pollEvery):
		}
	}
}

// settled waits briefly and checks that worker is still the master's
// current worker.
func (in *instance) settled(ctx context.Context, worker int) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-in.proc.Exited:
		return fmt.Errorf("HAProxy master %s right after loading the configuration", in.proc.Status)
	case <-time.After(settle):
	}
	now, err := showProc(ctx, in.s.masterSocket(in.lb))
	if err != nil {
		return fmt.Errorf("master CLI after reload: %w", err)
	}
	for _, w := range now.Workers {
		if w == worker {
			return nil
		}
	}
	return fmt.Errorf("the new HAProxy worker %d exited right after start", worker)
}

// loaded records that the stored config now runs. It becomes the last good
// config once HAProxy has stayed up on it for ConfirmAfter.
func (in *instance) loaded() {
	st := in.s.store()
	cfg, err := os.ReadFile(st.Layout.ConfigPath(in.lb))
	if err == nil {
		err = fsutil.WriteFile(in.runningPath(), cfg, 0o600)
	}
	if err != nil {
		in.log().Warn("recording the running config", zap.Error(err))
		return
	}
	in.loads++
	gen, proc := in.loads, in.proc
	in.unconfirmed = true
	time.AfterFunc(in.s.opts.ConfirmAfter, func() {
		in.op.Lock()
		defer in.op.Unlock()
		if in.loads == gen && in.unconfirmed && in.proc == proc && proc != nil && proc.Alive() {
			in.confirm()
		}
	})
}

// confirmIfAlive confirms the running config when HAProxy is still up on
// it: a config that served until the next change or a deliberate stop has
// proven itself.
func (in *instance) confirmIfAlive() {
	if in.unconfirmed && in.proc != nil && in.proc.Alive() {
		in.confirm()
	}
}

// restoreLastGoodFile puts the last good config back as the stored config
// (keeping the current one as haproxy.cfg.new-failed) without touching
// processes.
func (in *instance) restoreLastGoodFile() error {
	st := in.s.store()
	good, err := os.ReadFile(st.lastGoodPath(in.lb))
	if err != nil {
		return err
	}
	cur, err := os.ReadFile(st.Layout.ConfigPath(in.lb))
	if err == nil && string(cur) == string(good) {
		return nil
	}
	if err == nil {
		if err := fsutil.WriteFile(st.failedPath(in.lb), cur, 0o600); err != nil {
			in.log().Warn("keeping the failed config", zap.Error(err))
		}
	}
	return fsutil.WriteFile(st.Layout.ConfigPath(in.lb), good, 0o600)
}

// rollback puts the last good config back as the stored config and makes
// HAProxy run it, so a bad push never leaves the LB down. The rejected
// config is kept as haproxy.cfg.new-failed.
func (in *instance) rollback(ctx context.Context) error {
	if err := in.restoreLastGoodFile(); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("no last good configuration: %w", err)
		}
		return err
	}
	// The config going back in has already proven itself.
	in.unconfirmed = false
	if in.proc != nil && in.proc.Alive() {
		if err := in.signalReload(ctx); err == nil {
			return nil
		}
		in.killLocked()
	}
	return in.startLocked(ctx)
}

// startOrRestore starts the stored config; if it fails and a different
// last good config exists, that one is put back and started, and the
// failure is still reported.
func (in *instance) startOrRestore(ctx context.Context, message string) error {
	ctx, cancel := context.WithTimeout(ctx, operationTimeout)
	defer cancel()
	offset := int64(0)
	err := in.startLocked(ctx)
	if err == nil {
		in.loaded()
		return nil
	}
	output := in.logSince(offset, err)
	st := in.s.store()
	good, gerr := os.ReadFile(st.lastGoodPath(in.lb))
	cur, cerr := os.ReadFile(st.Layout.ConfigPath(in.lb))
	if gerr == nil && cerr == nil && string(good) != string(cur) {
		in.log().Error("start failed; putting the last good config back", zap.String("output", output))
		if rerr := in.rollback(ctx); rerr != nil {
			output += "\nrollback to the last good configuration failed: " + rerr.Error()
		}
	}
	return fault.Internal(message, output, err)
}

// startLocked starts a new master for the stored config and waits until
// it has a worker.
func (in *instance) startLocked(ctx context.Context) error {
	s, st := in.s, in.s.store()
	state, err := st.ReadState(in.lb)
	if err != nil || state.Peer == "" {
		return fmt.Errorf("no peer name recorded for %s: upload its configuration again", in.lb)
	}
	if err := st.EnsureUserGroupFile(); err != nil {
		return err
	}
	if sum, err := st.Layout.Summary(in.lb); err == nil {
		// HAProxy raises its own soft limit; it inherits the hard one.
		raiseFDLimit(sum.FDsNeeded())
	}
	sock, pidPath := s.masterSocket(in.lb), st.Layout.PidPath(in.lb)
	os.Remove(sock)
	os.Remove(pidPath)
	logFile, err := os.OpenFile(s.logPath(in.lb), os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	args := append([]string{"-Ws", "-S", sock + ",mode,600", "-p", pidPath}, st.configArgs(in.lb, state.Peer)...)
	cmd := exec.Command(st.HAProxyCmd, args...)
	cmd.Env = childEnv()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = st.Layout.Dir(in.lb)
	// Its own process group: signals meant for the agent (a terminal's
	// Ctrl-C, a service manager stopping the agent) do not reach HAProxy.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = netns.StartIn(s.opts.Namespace, cmd)
	logFile.Close()
	if err != nil {
		return err
	}
	proc := procwatch.WatchChild(cmd)
	if err := in.waitReady(ctx, proc, pidPath); err != nil {
		procwatch.Kill(proc, 0)
		return err
	}
	in.proc = proc
	in.log().Info("HAProxy started", zap.Int("pid", proc.Pid))
	go in.monitor(proc)
	return nil
}

func (in *instance) waitReady(ctx context.Context, proc *procwatch.Process, pidPath string) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	sock := in.s.masterSocket(in.lb)
	return procwatch.WaitReady(ctx, proc, "HAProxy", pollEvery, settle, func() bool {
		if t, err := showProc(ctx, sock); err != nil || len(t.Workers) == 0 {
			return false
		}
		pid, err := pidfile.Read(pidPath)
		return err == nil && pid == proc.Pid
	}, func() error {
		return fmt.Errorf("HAProxy not ready within %v", startTimeout)
	})
}

// stopLocked stops the master (and so its workers) and waits for it.
func (in *instance) stopLocked() error {
	st := in.s.store()
	in.confirmIfAlive()
	proc := in.proc
	if proc == nil {
		// A master nobody adopted (e.g. from before a failed restore).
		pid, err := pidfile.Read(st.Layout.PidPath(in.lb))
		if err != nil || !in.isOurMaster(pid) {
			return nil
		}
		proc = procwatch.WatchAdopted(pid, in.s.done)
	}
	in.proc = nil
	if !procwatch.Stop(proc, stopTimeout) {
		return fmt.Errorf("HAProxy master %d did not exit", proc.Pid)
	}
	os.Remove(st.Layout.PidPath(in.lb))
	os.Remove(in.s.masterSocket(in.lb))
	in.log().Info("HAProxy stopped", zap.Int("pid", proc.Pid))
	return nil
}

func (in *instance) killLocked() {
	if in.proc == nil {
		return
	}
	procwatch.Kill(in.proc, killWait)
	in.proc = nil
}

// restoreLocked adopts a running master or starts one that should run.
func (in *instance) restoreLocked(ctx context.Context) error {
	st := in.s.store()
	state, err := st.ReadState(in.lb)
	if err != nil {
		in.log().Warn("unreadable load balancer record", zap.Error(err))
	}
	in.desired = state.Running
	if pid, err := pidfile.Read(st.Layout.PidPath(in.lb)); err == nil && in.isOurMaster(pid) {
		if _, err := showProc(ctx, in.s.masterSocket(in.lb)); err == nil {
			in.proc = procwatch.WatchAdopted(pid, in.s.done)
			in.log().Info("adopted running HAProxy", zap.Int("pid", pid))
			go in.monitor(in.proc)
			if !in.desired {
				// Running but recorded as stopped: the record predates
				// this agent; keep it running rather than cut traffic.
				return in.setDesired(true)
			}
			return nil
		}
	}
	if !in.desired {
		return nil
	}
	return in.startOrRestore(ctx, "Error starting haproxy")
}

// isOurMaster checks that pid is an HAProxy master running lb's config
// with lb's master socket, so a recycled pid is never adopted or killed.
func (in *instance) isOurMaster(pid int) bool {
	args, err := procwatch.Cmdline(in.s.opts.ProcDir, pid)
	if err != nil {
		return false
	}
	sock := in.s.masterSocket(in.lb)
	cfg := in.s.store().Layout.ConfigPath(in.lb)
	return procwatch.ArgAfter(args, "-S", func(v string) bool { return v == sock || strings.HasPrefix(v, sock+",") }) &&
		procwatch.ArgAfter(args, "-f", func(v string) bool { return v == cfg })
}

// monitor waits for the master to end and, unless that was asked for,
// starts it again with backoff.
func (in *instance) monitor(proc *procwatch.Process) {
	r := procwatch.Respawner{
		Lock: &in.op, Done: in.s.done, Backoff: in.s.opts.Backoff, Respawns: &in.respawn,
		StartTimeout: startTimeout + time.Second,
		Dead: func(proc *procwatch.Process) bool {
			if in.proc != proc && in.proc != nil || !in.desired || in.deleted {
				return false
			}
			if in.proc == proc {
				in.proc = nil
			}
			if in.unconfirmed {
				// The config loaded last never proved itself: go back to
				// the one that did before restarting.
				in.unconfirmed = false
				if err := in.restoreLastGoodFile(); err == nil {
					in.log().Error("HAProxy died soon after loading a new configuration; restarting it on the last good configuration",
						zap.String("status", proc.Status))
				} else if !errors.Is(err, os.ErrNotExist) {
					in.log().Error("putting the last good configuration back", zap.Error(err))
				}
			}
			return true
		},
		Wanted: func() bool { return in.proc == nil && in.desired && !in.deleted },
		Start: func(ctx context.Context) (*procwatch.Process, error) {
			err := in.startLocked(ctx)
			return in.proc, err
		},
		Died: func(proc *procwatch.Process, uptime, delay time.Duration, streak int) {
			in.log().Warn("HAProxy master died; restarting it",
				zap.String("status", proc.Status), zap.Duration("uptime", uptime.Round(time.Millisecond)),
				zap.Duration("after", delay), zap.Int("restarts_in_a_row", streak))
		},
		Restarted: func(started, _ *procwatch.Process, streak int) {
			in.log().Info("HAProxy restarted", zap.Int("pid", started.Pid), zap.Int("restarts_in_a_row", streak))
		},
		Failed: func(err error) {
			in.log().Error("restarting HAProxy failed", zap.Error(err), zap.String("output", in.logSince(0, err)))
		},
	}
	r.Watch(proc)
}

func (in *instance) saveServersState(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	sock := in.s.store().Layout.SocketPath(in.lb)
	if sum, err := in.s.store().Layout.Summary(in.lb); err == nil && sum.StatsSocket != "" {
		sock = sum.StatsSocket
	}
	out, err := stats.ShowServersState(ctx, sock)
	if err != nil {
		in.log().Warn("saving servers state before reload", zap.Error(err))
		return
	}
	if len(out) == 0 || out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	path := filepath.Join(in.s.store().Layout.Dir(in.lb), "servers-state")
	if err := fsutil.WriteFile(path, out, 0o644); err != nil {
		in.log().Warn("saving servers state before reload", zap.Error(err))
	}
}

// runningPath holds a copy of the config HAProxy loaded last: uploads
// replace haproxy.cfg before the reload, so the running config must be
// kept apart to become the last good one.
func (in *instance) runningPath() string { return in.s.store().Layout.ConfigPath(in.lb) + ".running" }

// confirm makes the running config the last good one.
func (in *instance) confirm() {
	in.unconfirmed = false
	cfg, err := os.ReadFile(in.runningPath())
	if err == nil {
		err = fsutil.WriteFile(in.s.store().lastGoodPath(in.lb), cfg, 0o600)
	}
	if err != nil {
		in.log().Warn("recording the last good config", zap.Error(err))
	}
}

func (in *instance) logSize() int64 {
	st, err := os.Stat(in.s.logPath(in.lb))
	if err != nil {
		return 0
	}
	return st.Size()
}

// maxOutput bounds the HAProxy output returned to the controller.
const maxOutput = 16 << 10

// logSince returns what the master wrote after offset, with plain words
// added for the failure operators hit most.
func (in *instance) logSince(offset int64, cause error) string {
	f, err := os.Open(in.s.logPath(in.lb))
	var out string
	if err == nil {
		defer f.Close()
		if st, serr := f.Stat(); serr == nil && st.Size()-offset > maxOutput {
			offset = st.Size() - maxOutput
		}
		f.Seek(offset, io.SeekStart)
		data, _ := io.ReadAll(io.LimitReader(f, maxOutput))
		out = strings.TrimSpace(string(data))
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
