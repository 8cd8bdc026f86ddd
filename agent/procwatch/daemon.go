package procwatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/fsutil"
	"github.com/amphora-agent/amphora-agent/agent/journalfwd"
	"github.com/amphora-agent/amphora-agent/agent/pidfile"
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

	mu sync.Mutex
	// proc is the supervised process, written under mu through setProc;
	// cur mirrors it for readers that must not wait for a start or reload
	// holding mu (the heartbeat asks whether HAProxy runs every second).
	proc     *Process
	cur      atomic.Pointer[Process]
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

// Running reports whether the supervised process is alive. It never
// waits for an operation under way.
func (d *Daemon) Running() bool { return d.cur.Load().Alive() }

// Pid is the supervised process's pid, 0 when none runs.
func (d *Daemon) Pid() int {
	if p := d.cur.Load(); p.Alive() {
		return p.Pid
	}
	return 0
}

// setProc makes p the supervised process; the caller holds mu.
func (d *Daemon) setProc(p *Process) {
	d.proc = p
	d.cur.Store(p)
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

// Stop ends the process (SIGTERM, then SIGKILL to its group) and
// waits for it. A process of this daemon that nobody adopted (left from
// before a failed restore) is found through the pid file and stopped too.
func (h *Held) Stop() error {
	d := h.d
	s := &d.spec
	proc := d.proc
	d.setProc(nil)
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
	d.setProc(nil)
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
				d.setProc(nil)
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
