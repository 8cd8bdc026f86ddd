package keepalived

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/journal"
	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/journalfwd"
	"github.com/amphora-agent/amphora-agent/agent/procwatch"
	"github.com/amphora-agent/amphora-agent/netns"
)

// opTimeout bounds a start, reload or stop (a restart is a stop and a
// start), except the wait for a start the controller asked for, which
// lasts as long as the controller waits (procwatch.Spec.AskedStartTimeout,
// upstream's systemctl start of its Type=forking unit waiting for the pid
// file up to systemd's 90 s).
const opTimeout = 40 * time.Second

// startTimeout is how long a start nobody waits on (a restore, a respawn)
// waits for a new keepalived to write its pid file before it is answered
// anyway: longer than procwatch's default, since on a loaded, emulated
// amphora (the VM tier under TCG on a busy host) starts were seen to take
// 11 s and more. One alive then is slow, not failed: it is answered for
// and followed (procwatch.Spec).
const startTimeout = 20 * time.Second

// Files are the paths of one keepalived instance. Each instance has its
// own main, VRRP and checker pid files: keepalived's defaults (/run/...)
// would make a second keepalived on the host refuse to start.
type Files struct {
	Dir      string // working directory
	Config   string
	Pid      string // main process (-p)
	VRRPPid  string // VRRP child (-r)
	CheckPid string // checker child (-c)
	Log      string // stdout and stderr; keepalived's own log goes to syslog
	State    string // desired state
	// Journal are the journal identifiers (journalctl -t) of its output
	// under systemd: first the one the agent forwards the file under,
	// after upstream's unit, then those keepalived logs to syslog with
	// (shared by every keepalived of the amphora).
	Journal []string
}

// forwardedAs is the identifier the output file is forwarded under.
func (f Files) forwardedAs() string {
	if len(f.Journal) == 0 {
		return "keepalived"
	}
	return f.Journal[0]
}

// Options are shared by every keepalived the agent runs.
type Options struct {
	Cmd         string // the keepalived binary
	Namespace   string
	LogFacility int // administrative_log_facility: LOG_LOCAL<n>
	ProcDir     string
	Backoff     procwatch.Backoff
	// After is the clock of the restart backoff and of the settle times
	// after a start and a reload (time.After when nil), which a test sees
	// instead of spending.
	After func(d time.Duration) <-chan time.Time
	Log   *zap.Logger
	// Journal receives what keepalived writes outside its log (under
	// systemd); nil keeps it in the output files only.
	Journal journalfwd.Sink
	// StartWait bounds how long a start nobody waits on waits for
	// keepalived's pid file before it is answered (startTimeout when
	// zero).
	StartWait time.Duration
}

// daemon is one keepalived under supervision: in the foreground (so the
// agent is its parent) inside the data-plane namespace, its log lines also
// on its stdout (--log-console) so that its output file holds them with its
// errors, and status can read its VRRP role there. What is
// keepalived's own: its command line and reload (SIGHUP); "ready" is the
// core's (the main pid file names the new process).
type daemon struct {
	files Files
	argv  []string
	d     *procwatch.Daemon
	log   *zap.Logger
	after func(time.Duration) <-chan time.Time
	// startWait: Options.StartWait.
	startWait time.Duration
	// reloadOnReady: a reload came while a start answered before
	// keepalived was ready was still under way; it is sent once ready.
	// Guarded by d's lock.
	reloadOnReady bool
}

func newDaemon(o Options, f Files, done <-chan struct{}) *daemon {
	if o.StartWait <= 0 {
		o.StartWait = startTimeout
	}
	k := &daemon{files: f, log: o.Log, after: o.After, startWait: o.StartWait}
	if k.log == nil {
		k.log = zap.NewNop()
	}
	if k.after == nil {
		k.after = time.After
	}
	args := []string{"--dont-fork", "--log-console", "--log-facility=" + strconv.Itoa(o.LogFacility),
		"-f", f.Config, "-p", f.Pid, "-r", f.VRRPPid, "-c", f.CheckPid}
	k.argv = args
	k.d = procwatch.NewDaemon(procwatch.Spec{
		Name: "keepalived",
		Log:  k.log,
		Command: func() (*exec.Cmd, error) {
			cmd := exec.Command(o.Cmd, args...)
			cmd.Dir = f.Dir
			return cmd, nil
		},
		Launch:       func(cmd *exec.Cmd) error { return netns.StartIn(o.Namespace, cmd) },
		PidPath:      f.Pid,
		LogPath:      f.Log,
		StatePath:    f.State,
		Clean:        []string{f.VRRPPid, f.CheckPid},
		ProcDir:      o.ProcDir,
		Ours:         f.Runs,
		Backoff:      o.Backoff,
		After:        k.after,
		StartTimeout: o.StartWait,
		OnReady:      k.readyLate,
		Journal:      journalfwd.Options{Sink: o.Journal, Identifier: f.forwardedAs(), Priority: priority, Skip: isLogLine},
	}, done)
	return k
}

// logLine is how keepalived --log-console prints a log record
// ("Mon Nov 30 16:09:07 2026: ...").
var logLine = regexp.MustCompile(`^[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9]\d \d\d:\d\d:\d\d \d{4}: `)

// isLogLine: keepalived's log records reach the journal through syslog
// (with the administrative facility the amphora's log offloading
// forwards), so only the rest of its output file is forwarded; every line
// lands in the journal once.
func isLogLine(line []byte) bool { return logLine.Match(line) }

// priority: what keepalived writes outside its log is an error (a bad
// option, a crash).
func priority([]byte) journal.Priority { return journal.PriErr }

func detach(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
}

// startOrReload records keepalived as wanted, then reloads it when it
// runs (adopting one left by an earlier agent) or starts it, and reports
// which it did. A start that fails is retried with backoff.
func (k *daemon) startOrReload(ctx context.Context) (reloaded, started bool, err error) {
	ctx, cancel := detach(ctx)
	defer cancel()
	err = k.d.With(func(h *procwatch.Held) error {
		if err := h.SetDesired(true); err != nil {
			return err
		}
		if h.Adopt() {
			reloaded = true
			return k.reload(ctx, h)
		}
		started = true
		if err := h.Start(ctx); err != nil {
			h.Retry(err)
			return err
		}
		return nil
	})
	return reloaded, started, err
}

func (k *daemon) reload(ctx context.Context, h *procwatch.Held) error {
	if h.Starting() {
		// A start asked for while another is under way waits for it, as
		// systemctl start joins the start job.
		wait, cancel := h.WaitContext(ctx, k.startWait)
		err := h.AwaitStart(wait)
		cancel()
		if errors.Is(err, procwatch.ErrStillStarting) {
			// A SIGHUP before keepalived set up its signals would end it.
			k.reloadOnReady = true
			k.log.Warn("keepalived is still starting; it is reloaded once it is ready")
			return nil
		}
	}
	proc := h.Proc()
	if proc == nil {
		return errors.New("keepalived is not running")
	}
	if err := syscall.Kill(proc.Pid, syscall.SIGHUP); err != nil {
		return fmt.Errorf("signalling keepalived %d: %w", proc.Pid, err)
	}
	select {
	case <-proc.Exited:
		return fmt.Errorf("keepalived %s on reload", proc.Status)
	case <-k.after(procwatch.DefaultSettle):
	}
	k.log.Info("keepalived reloaded", zap.Int("pid", proc.Pid))
	return nil
}

// readyLate runs when a start answered before keepalived was ready has
// become ready: a reload asked for meanwhile is sent now.
func (k *daemon) readyLate(proc *procwatch.Process) {
	if !k.reloadOnReady {
		return
	}
	k.reloadOnReady = false
	if err := syscall.Kill(proc.Pid, syscall.SIGHUP); err != nil {
		k.log.Error("reloading keepalived once it was ready", zap.Error(err))
		return
	}
	k.log.Info("keepalived reloaded once it was ready", zap.Int("pid", proc.Pid))
}

// stop stops keepalived (a VRRP instance gives up its VIPs) and remembers
// that it must stay stopped.
func (k *daemon) stop() error {
	return k.d.With(func(h *procwatch.Held) error {
		// keepalived stops even when its stopped state cannot be recorded
		// (a full disk): the controller asked for it, and hears about the
		// record after. A VRRP instance left running would keep the VIPs.
		recErr := h.SetDesired(false)
		h.Adopt()
		if err := h.Stop(); err != nil {
			return errors.Join(err, recErr)
		}
		if recErr != nil {
			return fault.Internal("keepalived stopped, but its stopped state could not be recorded", recErr.Error(), recErr)
		}
		return nil
	})
}

// remove stops keepalived for good: its files are about to go.
func (k *daemon) remove() error {
	return k.d.With(func(h *procwatch.Held) error {
		h.Adopt()
		err := h.Stop()
		h.Remove()
		return err
	})
}

// restore adopts a keepalived left running or starts one that should run.
func (k *daemon) restore(ctx context.Context) error {
	ctx, cancel := detach(ctx)
	defer cancel()
	return k.d.With(func(h *procwatch.Held) error {
		return h.Restore(ctx, h.Start)
	})
}

// ensureRunning records keepalived as wanted and starts it unless it runs
// (adopting one left by an earlier agent); with restart, one that runs is
// stopped and started again instead.
func (k *daemon) ensureRunning(ctx context.Context, restart bool) error {
	ctx, cancel := detach(ctx)
	defer cancel()
	return k.d.With(func(h *procwatch.Held) error {
		if err := h.SetDesired(true); err != nil {
			return err
		}
		if h.Adopt() {
			if !restart {
				return nil
			}
			if err := h.Stop(); err != nil {
				return err
			}
		}
		if err := h.Start(ctx); err != nil {
			h.Retry(err)
			return err
		}
		return nil
	})
}

// wantFromUpload records keepalived as wanted unless a state was already
// recorded: upstream enables the unit on upload, so a configured instance
// starts at boot, but a later upload does not undo a stop.
func (k *daemon) wantFromUpload() error {
	return k.d.With(func(h *procwatch.Held) error {
		if _, recorded, err := k.d.ReadDesired(); err == nil && recorded {
			return nil
		}
		return h.SetDesired(true)
	})
}

// Runs tells whether args, a process's command line, is that of the
// keepalived these files belong to (its config and main pid file).
// Supervision adopts by it and status recognizes the process by it.
func (f Files) Runs(args []string) bool {
	return procwatch.ArgAfter(args, "-f", func(s string) bool { return s == f.Config }) &&
		procwatch.ArgAfter(args, "-p", func(s string) bool { return s == f.Pid })
}
