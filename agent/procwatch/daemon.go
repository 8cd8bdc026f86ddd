package procwatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/caller"
	"github.com/amphora-agent/amphora-agent/agent/fsutil"
	"github.com/amphora-agent/amphora-agent/agent/journalfwd"
	"github.com/amphora-agent/amphora-agent/agent/pidfile"
	"github.com/amphora-agent/amphora-agent/agent/tick"
)

// Defaults of a Spec's tunables.
const (
	DefaultStartTimeout = 12 * time.Second
	// DefaultAskedStartTimeout is systemd's default start timeout
	// (DefaultTimeoutStartSec), for which upstream's systemctl start
	// blocks: see Spec.AskedStartTimeout.
	DefaultAskedStartTimeout = 90 * time.Second
	// DefaultSlowStartLimit is how long a start answered before its
	// process was ready is followed further (see Spec.SlowStartLimit).
	DefaultSlowStartLimit = 3 * time.Minute
	// slowStartPoll is how often a start followed in the background is
	// asked whether it is ready: nobody waits for the answer.
	slowStartPoll      = 100 * time.Millisecond
	DefaultStopTimeout = 10 * time.Second
	DefaultPoll        = 25 * time.Millisecond
	// DefaultSettle is how long a new process must stay up after it is
	// ready before a start counts as done, so a daemon that fails at once
	// is caught before the controller hears "OK".
	DefaultSettle = 300 * time.Millisecond
	// DefaultMaxLog caps a daemon's output file; beyond it the file's
	// content moves to <log>.1 and the file starts empty.
	DefaultMaxLog = 4 << 20
	// MaxOutput bounds the output a failure reports.
	MaxOutput = 16 << 10
	// logCheckEvery is how often a daemon's output file is held to
	// MaxLog.
	logCheckEvery = 10 * time.Second
	// forwardEvery is how often new output goes to the journal.
	forwardEvery = time.Second
	killWait     = 3 * time.Second
)

// Spec is what one daemon kind contributes: how to build and launch its
// command, where its files are, and what "ready" and "ours" mean.
// Everything else about supervising it is Daemon's.
type Spec struct {
	// Name is the daemon as logs and errors name it ("HAProxy").
	Name string
	Log  *zap.Logger

	// Command builds the command of a new process; Daemon adds the output
	// file, the process group and the start.
	Command func() (*exec.Cmd, error)
	// Launch starts cmd where the daemon lives (inside the data-plane
	// namespace); nil is cmd.Start.
	Launch func(cmd *exec.Cmd) error

	// PidPath is the pid file the daemon writes; adoption reads it. A
	// start counts as done only once it names the new process.
	PidPath string
	// LogPath receives the daemon's stdout and stderr. A file, not a pipe,
	// so the daemon outlives the agent without dying of SIGPIPE.
	LogPath string
	// Journal, when its Sink is set, sends each new line of LogPath to
	// the journal: the daemon keeps writing the file (which failures
	// quote), and the agent forwards from where it is now, across its own
	// restarts, without touching the daemon.
	Journal journalfwd.Options
	// StatePath keeps the desired state ({"running": bool}, other keys
	// preserved) across agent restarts and reboots.
	StatePath string
	// Clean lists files removed before a start and after a stop (stale
	// sockets and pid files that would confuse readiness or adoption).
	Clean []string
	// ProcDir is /proc; tests point it elsewhere.
	ProcDir string

	// Ours reports whether a command line is this daemon's own, so that a
	// recycled pid is never adopted or killed.
	Ours func(args []string) bool
	// Healthy, when set, asks whether a process left by an earlier agent
	// is in working order (HAProxy's master socket answers). It is asked
	// in the background once the process is adopted, never as a condition
	// of adopting it: see Held.Adopt.
	Healthy func(ctx context.Context, pid int) bool
	// Ready reports whether a just started process is ready beyond its pid
	// file naming it (nil: that is enough); it is polled.
	Ready func(ctx context.Context, p *Process) bool
	// Room reports whether a small file can be written in dir, the pid
	// file's folder; nil writes and syncs a probe file there.
	Room func(dir string) error

	// OnDeath runs under the lock when the process ended unexpectedly and
	// is about to be started again.
	OnDeath func(p *Process)
	// OnReady runs under the lock when a process that Start answered for
	// before it was ready (see StartTimeout) has become ready.
	OnReady func(p *Process)

	Backoff Backoff
	// StartTimeout bounds how long Start waits for the new process to be
	// ready. One that is alive then, and not stopped by a full disk, is
	// only slow (a busy hypervisor): Start keeps it, answers, and follows
	// it in the background for up to SlowStartLimit more. One that is
	// still not ready then is killed and started again with backoff, as
	// systemd does with a unit past TimeoutStartSec under Restart=always.
	StartTimeout time.Duration
	// AskedStartTimeout replaces StartTimeout for a start a client asked
	// for and waits on (caller.Of): the start is answered once the process
	// is ready, it died, or this much time passed, whichever comes first,
	// unless the client goes away sooner (then it is answered and followed
	// as above). Restores and respawns keep StartTimeout.
	AskedStartTimeout time.Duration
	SlowStartLimit    time.Duration
	StopTimeout       time.Duration
	Poll              time.Duration
	Settle            time.Duration
	MaxLog            int64
	// After is the clock of the backoff before a restart and of Settle
	// (time.After by default): a test passes its own to see those waits
	// without spending them.
	After func(d time.Duration) <-chan time.Time
}

func (s *Spec) defaults() {
	if s.Log == nil {
		s.Log = zap.NewNop()
	}
	if s.Launch == nil {
		s.Launch = func(cmd *exec.Cmd) error { return cmd.Start() }
	}
	if s.ProcDir == "" {
		s.ProcDir = "/proc"
	}
	if s.Ready == nil {
		s.Ready = func(context.Context, *Process) bool { return true }
	}
	if s.Room == nil {
		s.Room = probeRoom
	}
	if s.Backoff == (Backoff{}) {
		s.Backoff = DefaultBackoff
	}
	if s.StartTimeout <= 0 {
		s.StartTimeout = DefaultStartTimeout
	}
	if s.AskedStartTimeout <= 0 {
		s.AskedStartTimeout = DefaultAskedStartTimeout
	}
	if s.SlowStartLimit <= 0 {
		s.SlowStartLimit = DefaultSlowStartLimit
	}
	if s.StopTimeout <= 0 {
		s.StopTimeout = DefaultStopTimeout
	}
	if s.Poll <= 0 {
		s.Poll = DefaultPoll
	}
	if s.Settle <= 0 {
		s.Settle = DefaultSettle
	}
	if s.MaxLog <= 0 {
		s.MaxLog = DefaultMaxLog
	}
	if s.After == nil {
		s.After = time.After
	}
}

// Daemon supervises one long-running process: it starts it in its own
// process group with a bounded output file, waits until it is ready,
// follows it, restarts it with backoff when it dies while wanted, keeps the
// desired state on disk, adopts the process an earlier agent left running,
// and stops it.
//
// Everything done to the process goes through With, which holds the
// daemon's lock, so that a kind can run its own steps (a reload) between
// them without a respawn interfering.
type Daemon struct {
	spec Spec
	done <-chan struct{}
	// gone is closed when supervision ends for good (Held.Remove).
	gone chan struct{}
	// fwMu guards fw, the journal forwarder of the output file (nil
	// without a journal).
	fwMu sync.Mutex
	fw   *journalfwd.Follower
	// kept is closed when the keeper of the output file has stopped.
	kept chan struct{}

	mu       sync.Mutex
	proc     *Process
	desired  bool
	removed  bool
	retrying bool
	respawns Respawns
	// starting is the current process while Start has answered for it
	// but it is not ready yet. Written under mu; read without it by
	// Starting, which a heartbeat asks.
	starting atomic.Pointer[Process]
	// histMu guards history on its own, so that reading it never waits
	// for a start or reload holding mu.
	histMu  sync.Mutex
	history History
}

// History is what an operator wants to know about a daemon's past.
type History struct {
	Restarts   int       // unexpected deaths followed by a restart
	LastExit   string    // how the last process ended
	LastExitAt time.Time // when
}

// NewDaemon supervises spec's daemon until done is closed. It starts
// no process (see Held's Start and Restore), only the keeper of its
// output file.
func NewDaemon(spec Spec, done <-chan struct{}) *Daemon {
	spec.defaults()
	d := &Daemon{spec: spec, done: done, gone: make(chan struct{}), kept: make(chan struct{})}
	if spec.Journal.Sink != nil {
		d.fw = journalfwd.New(spec.LogPath, spec.Journal)
	}
	go d.keepLog()
	return d
}

// Held is a Daemon while its lock is held. Only With hands one out, and
// only for the length of its callback: no step runs without the lock, and
// no caller can forget to release it.
type Held struct{ d *Daemon }

// With runs fn holding the daemon's lock and returns fn's error. A kind
// also guards its own state about the process with it.
func (d *Daemon) With(fn func(h *Held) error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.held(fn)
}

// held runs fn with a Held for d, whose lock the caller holds. The Held
// is voided afterwards, so one kept past fn fails at its first use.
func (d *Daemon) held(fn func(h *Held) error) error {
	h := &Held{d: d}
	defer func() { h.d = nil }()
	return fn(h)
}

// Running reports whether the supervised process is alive.
func (d *Daemon) Running() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.proc.Alive()
}

// Pid is the supervised process's pid, 0 when none runs.
func (d *Daemon) Pid() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.proc.Alive() {
		return 0
	}
	return d.proc.Pid
}

// History returns the daemon's restart record.
func (d *Daemon) History() History {
	d.histMu.Lock()
	defer d.histMu.Unlock()
	return d.history
}

// Proc is the running process, nil when none runs.
func (h *Held) Proc() *Process {
	d := h.d
	if !d.proc.Alive() {
		return nil
	}
	return d.proc
}

// ReadDesired returns the recorded desired state; recorded is false when
// nothing was recorded yet.
func (d *Daemon) ReadDesired() (running, recorded bool, err error) {
	return ReadDesired(d.spec.StatePath)
}

// ReadDesired reads a desired-state record (a Spec's StatePath) without a
// Daemon, for a reader that must not supervise anything (status).
func ReadDesired(path string) (running, recorded bool, err error) {
	rec, err := readRecord(path)
	if err != nil {
		return false, false, err
	}
	raw, ok := rec["running"]
	if !ok {
		return false, false, nil
	}
	return running, true, json.Unmarshal(raw, &running)
}

// SetDesired records whether the daemon must run, in memory and on
// disk.
func (h *Held) SetDesired(running bool) error {
	d := h.d
	d.desired = running
	cur, recorded, err := d.ReadDesired()
	if err == nil && recorded && cur == running {
		return nil
	}
	rec, rerr := readRecord(d.spec.StatePath)
	if rerr != nil {
		d.spec.Log.Warn("unreadable state record; rewriting it", zap.String("file", d.spec.StatePath), zap.Error(rerr))
		rec = map[string]json.RawMessage{}
	}
	rec["running"] = json.RawMessage(fmt.Sprint(running))
	data, _ := json.Marshal(rec)
	if err := fsutil.WriteFile(d.spec.StatePath, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("recording the desired state of %s: %w", d.spec.Name, err)
	}
	return nil
}

func readRecord(path string) (map[string]json.RawMessage, error) {
	rec := map[string]json.RawMessage{}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return rec, nil
	}
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return map[string]json.RawMessage{}, fmt.Errorf("%s: %w", path, err)
	}
	return rec, nil
}

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
		d.proc = proc
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
	d.proc = proc
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

// ended reports whether supervision is over (the agent closes or the
// daemon was removed).
func (d *Daemon) ended() bool {
	select {
	case <-d.done:
		return true
	case <-d.gone:
		return true
	default:
		return false
	}
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

func withOutput(err error, out string) error {
	if out == "" {
		return err
	}
	return &outputError{err: err, out: out}
}

// outputError is a failure with the daemon's output, which is what the
// controller is answered with.
type outputError struct {
	err error
	out string
}

func (e *outputError) Error() string { return e.err.Error() + "\n" + e.out }
func (e *outputError) Unwrap() error { return e.err }

// Output returns the daemon's output in err, or "" when it has none.
func Output(err error) string {
	var oe *outputError
	if errors.As(err, &oe) {
		return oe.out
	}
	return ""
}

// openLog opens the daemon's output file for a new process: the previous
// run's output moves to <path>.1, so the file never holds more than one
// run and a crash loop cannot grow it.
func openLog(path string) (*os.File, error) {
	if st, err := os.Stat(path); err == nil && st.Size() > 0 {
		os.Rename(path, path+".1")
	}
	return os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
}

// capLog holds a daemon's output file to max bytes: the content moves to
// <path>.1 and the file is emptied. The daemon writes with O_APPEND, so
// its next line lands at the new end. It reports whether it emptied the
// file.
func capLog(path string, max int64) bool {
	st, err := os.Stat(path)
	if err != nil || st.Size() <= max {
		return false
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	if int64(len(data)) > max {
		data = data[int64(len(data))-max:]
	}
	return fsutil.WriteFile(path+".1", data, 0o600) == nil && os.Truncate(path, 0) == nil
}

// keepLog holds the output file to MaxLog and, when Journal has a sink,
// forwards its new lines, for as long as the daemon is supervised (the
// file outlives each process: a new run renames it away, a restart of the
// agent finds it). It runs on its own, never takes the daemon's lock and
// never waits for the journal; a start shares only fwMu with it, for one
// bounded read. The cap runs right after a read, so only what the daemon
// writes in between those two steps misses the journal (it is in
// <log>.1).
func (d *Daemon) keepLog() {
	defer close(d.kept)
	s := &d.spec
	every := logCheckEvery
	if d.fw != nil {
		every = forwardEvery
	}
	// On the agent's shared instants: polling wakes the agent, and its
	// other periodic work wakes it at the same moments.
	t := tick.NewTicker(every)
	defer t.Stop()
	lastCap := time.Now()
	for {
		select {
		case <-t.C:
			t.Next()
		case <-d.done:
			d.closeForward()
			return
		case <-d.gone:
			d.closeForward()
			return
		}
		d.fwMu.Lock()
		if d.fw != nil {
			d.fw.Poll()
		}
		if time.Since(lastCap) >= logCheckEvery {
			lastCap = time.Now()
			if capLog(s.LogPath, s.MaxLog) && d.fw != nil {
				d.fw.Rewind()
			}
		}
		d.fwMu.Unlock()
	}
}

// forward sends what is new in the output file to the journal now.
func (d *Daemon) forward() {
	d.fwMu.Lock()
	defer d.fwMu.Unlock()
	if d.fw != nil {
		d.fw.Poll()
	}
}

func (d *Daemon) closeForward() {
	d.fwMu.Lock()
	defer d.fwMu.Unlock()
	if d.fw != nil {
		d.fw.Close()
		d.fw = nil
	}
}

// LogSize is the current size of the output file: pass it to Output to
// get what the daemon writes from now on.
func (d *Daemon) LogSize() int64 {
	st, err := os.Stat(d.spec.LogPath)
	if err != nil {
		return 0
	}
	return st.Size()
}

// Output returns what the daemon wrote after offset (at most MaxOutput,
// the latest), trimmed.
func (d *Daemon) Output(offset int64) string {
	f, err := os.Open(d.spec.LogPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil {
		if st.Size() < offset {
			offset = 0 // capped meanwhile
		}
		if st.Size()-offset > MaxOutput {
			offset = st.Size() - MaxOutput
		}
	}
	f.Seek(offset, io.SeekStart)
	data, _ := io.ReadAll(io.LimitReader(f, MaxOutput))
	return strings.TrimSpace(string(data))
}

// Stop ends the process (SIGTERM, then SIGKILL to its group) and
// waits for it. A process of this daemon that nobody adopted (left from
// before a failed restore) is found through the pid file and stopped too.
func (h *Held) Stop() error {
	d := h.d
	s := &d.spec
	proc := d.proc
	d.proc = nil
	d.starting.Store(nil)
	if !proc.Alive() {
		pid, err := pidfile.Read(s.PidPath)
		if err != nil || !d.ours(pid) {
			return nil
		}
		proc = WatchAdopted(pid, d.done)
	}
	if !Stop(proc, s.StopTimeout) {
		return fmt.Errorf("%s %d did not exit", s.Name, proc.Pid)
	}
	for _, p := range append([]string{s.PidPath}, s.Clean...) {
		os.Remove(p)
	}
	s.Log.Info(s.Name+" stopped", zap.Int("pid", proc.Pid))
	return nil
}

// Kill kills the process group at once.
func (h *Held) Kill() {
	d := h.d
	if d.proc.Alive() {
		Kill(d.proc, killWait)
	}
	d.proc = nil
	d.starting.Store(nil)
}

// Remove ends supervision for good (the daemon's files are about to
// be deleted): nothing restarts it any more.
func (h *Held) Remove() {
	d := h.d
	if !d.removed {
		close(d.gone)
	}
	d.removed = true
	d.desired = false
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
	d.proc = WatchAdopted(pid, d.done)
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

// Retry keeps a daemon whose start failed under supervision: while
// it is wanted and none runs, it is started again with backoff.
func (h *Held) Retry(err error) {
	d := h.d
	if d.retrying || d.proc != nil || !d.desired || d.removed {
		return
	}
	d.retrying = true
	d.spec.Log.Error(d.spec.Name+" did not start; retrying with backoff", zap.Error(err))
	failed := Failed(err.Error())
	go func() {
		d.respawner().Watch(failed)
		d.mu.Lock()
		d.retrying = false
		d.mu.Unlock()
	}()
}

// follow watches a started or adopted process: it is restarted when it
// dies unexpectedly.
func (d *Daemon) follow(proc *Process) {
	go d.respawner().Watch(proc)
}

func (d *Daemon) respawner() *Respawner {
	s := &d.spec
	return &Respawner{
		Lock: &d.mu, Done: d.done, Backoff: s.Backoff, Respawns: &d.respawns, After: s.After,
		StartTimeout: s.StartTimeout + time.Second,
		Dead: func(proc *Process) bool {
			d.lateFailure(proc)
			if d.proc != proc && d.proc != nil || !d.desired || d.removed {
				return false
			}
			if d.proc == proc {
				d.histMu.Lock()
				d.history.LastExit, d.history.LastExitAt = proc.Status, time.Now()
				d.histMu.Unlock()
				d.proc = nil
			}
			if s.OnDeath != nil {
				s.OnDeath(proc)
			}
			return true
		},
		Wanted: func() bool { return d.proc == nil && d.desired && !d.removed },
		Start: func(ctx context.Context) (*Process, error) {
			err := d.held(func(h *Held) error { return h.Start(ctx) })
			if err == nil {
				d.histMu.Lock()
				d.history.Restarts++
				d.histMu.Unlock()
			}
			return d.proc, err
		},
		Died: func(proc *Process, uptime, delay time.Duration, streak int) {
			s.Log.Warn(s.Name+" died; restarting it", zap.Int("pid", proc.Pid),
				zap.String("status", proc.Status), zap.Duration("uptime", uptime.Round(time.Millisecond)),
				zap.Duration("after", delay), zap.Int("restarts_in_a_row", streak))
		},
		Restarted: func(started, proc *Process, streak int) {
			s.Log.Info(s.Name+" restarted", zap.Int("pid", started.Pid), zap.Int("old_pid", proc.Pid),
				zap.Int("restarts_in_a_row", streak))
		},
		Failed: func(err error) { s.Log.Error("restarting "+s.Name+" failed", zap.Error(err)) },
	}
}
