package keepalived

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/fsutil"
	"github.com/amphora-agent/amphora-agent/agent/pidfile"
	"github.com/amphora-agent/amphora-agent/agent/procwatch"
	"github.com/amphora-agent/amphora-agent/netns"
)

// Timeouts of the VRRP keepalived's lifecycle steps.
const (
	validateTimeout = 15 * time.Second
	startTimeout    = 10 * time.Second
	stopTimeout     = 10 * time.Second
	pollEvery       = 25 * time.Millisecond
	// settle is how long a started or reloaded keepalived must stay up
	// before the controller hears "OK".
	settle = 300 * time.Millisecond
	// maxOutput bounds the keepalived output returned to the controller.
	maxOutput = 16 << 10
)

// VRRPLayout names the files of the VRRP keepalived under base_path/vrrp.
type VRRPLayout struct{ Base string }

func (l VRRPLayout) Dir() string { return filepath.Join(l.Base, "vrrp") }

// ConfigPath is the controller's keepalived config; its existence is what
// makes the heartbeat sender require a running keepalived.
func (l VRRPLayout) ConfigPath() string { return filepath.Join(l.Dir(), "octavia-keepalived.conf") }

// PidPath holds keepalived's main pid (written by keepalived, -p).
func (l VRRPLayout) PidPath() string { return filepath.Join(l.Dir(), "octavia-keepalived.pid") }

// The children's pid files: keepalived's defaults (/run/vrrp.pid,
// /run/checkers.pid) would make a second keepalived on the host refuse to
// start as "already running".
func (l VRRPLayout) vrrpPidPath() string {
	return filepath.Join(l.Dir(), "octavia-keepalived.vrrp.pid")
}
func (l VRRPLayout) checkPidPath() string {
	return filepath.Join(l.Dir(), "octavia-keepalived.check.pid")
}

// CheckScriptPath is the vrrp_script the controller's config tracks.
func (l VRRPLayout) CheckScriptPath() string { return filepath.Join(l.Dir(), "check_script.sh") }

// LogPath collects keepalived's stdout and stderr.
func (l VRRPLayout) LogPath() string { return filepath.Join(l.Dir(), "octavia-keepalived.log") }

func (l VRRPLayout) statePath() string  { return filepath.Join(l.Dir(), "agent-state.json") }
func (l VRRPLayout) stagedPath() string { return l.ConfigPath() + ".new" }
func (l VRRPLayout) failedPath() string { return l.ConfigPath() + ".new-failed" }

// CheckScript is check_script.sh: it runs every file of the check_scripts
// folder with bash and exits with the sum of their exit codes, so keepalived
// sees a failure when any check fails.
func CheckScript(checkScriptsDir string) string {
	return `#!/bin/bash

# Don't try to run the directory when it is empty
shopt -s nullglob

status=0
for file in ` + checkScriptsDir + `/*
do
  echo "Running check script: " $file
  bash $file
  status=$(( $status + $? ))
done
exit $status
`
}

// vrrpState is the desired state, kept across agent restarts and reboots:
// Enabled from the first upload (upstream enables the unit so that it
// starts at boot), Stopped from a stop until the next start or reload.
type vrrpState struct {
	Enabled bool `json:"enabled"`
	Stopped bool `json:"stopped"`
}

// Validator checks a staged keepalived config and returns keepalived's
// output; an error means the config must not be used.
type Validator func(ctx context.Context, path string) (string, error)

// VRRPOptions configure the VRRP keepalived.
type VRRPOptions struct {
	Base        string
	Cmd         string // the keepalived binary
	Namespace   string
	LogFacility int // administrative_log_facility: LOG_LOCAL<n>
	ProcDir     string
	Backoff     procwatch.Backoff
	Log         *zap.Logger
	// Validate checks uploads; nil runs `keepalived -t` in the namespace.
	Validate Validator
}

// VRRP runs the ACTIVE_STANDBY amphora's keepalived: it validates and
// stores the controller's config, runs keepalived in the foreground inside
// the data-plane namespace in its own process group, restarts it with
// backoff when it dies (upstream leaves it dead), and adopts one left
// running by an earlier agent process. Closing it leaves keepalived
// running.
type VRRP struct {
	opts   VRRPOptions
	layout VRRPLayout
	log    *zap.Logger

	op      sync.Mutex // serializes start, stop, reload, restore and respawn
	proc    *procwatch.Process
	desired bool
	respawn procwatch.Respawns

	done      chan struct{}
	closeOnce sync.Once
}

// NewVRRP returns the VRRP keepalived supervision; call Restore to pick up
// the previous state.
func NewVRRP(o VRRPOptions) *VRRP {
	if o.ProcDir == "" {
		o.ProcDir = "/proc"
	}
	if o.Backoff == (procwatch.Backoff{}) {
		o.Backoff = procwatch.DefaultBackoff
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	v := &VRRP{opts: o, layout: VRRPLayout{Base: o.Base}, log: o.Log, done: make(chan struct{})}
	if v.opts.Validate == nil {
		v.opts.Validate = v.keepalivedTest
	}
	return v
}

// Layout names the VRRP files.
func (v *VRRP) Layout() VRRPLayout { return v.layout }

// Close stops supervising; keepalived keeps running for the next agent.
func (v *VRRP) Close() { v.closeOnce.Do(func() { close(v.done) }) }

// Upload validates a keepalived config and stores it, with check_script.sh
// and the check_scripts folder, and records VRRP as enabled. It does not
// start or reload keepalived. An invalid config is refused with
// keepalived's output and the stored one is kept.
func (v *VRRP) Upload(ctx context.Context, body []byte) error {
	l := v.layout
	checks := CheckScripts{Base: l.Base}
	if err := os.MkdirAll(checks.Dir(), 0o755); err != nil {
		return fault.Internalf("creating %s: %w", checks.Dir(), err)
	}
	// The check script goes first: keepalived -t looks for it.
	if err := fsutil.WriteFile(l.CheckScriptPath(), []byte(CheckScript(checks.Dir())), 0o755); err != nil {
		return fault.Internalf("writing the VRRP check script: %w", err)
	}
	staged := l.stagedPath()
	if err := fsutil.WriteFile(staged, body, 0o644); err != nil {
		return fault.Internalf("staging the keepalived config: %w", err)
	}
	if out, err := v.opts.Validate(ctx, staged); err != nil {
		if rerr := os.Rename(staged, l.failedPath()); rerr != nil {
			os.Remove(staged)
		}
		v.log.Warn("keepalived config rejected", zap.String("output", out), zap.Error(err))
		return fault.Invalid("Invalid request", out)
	}
	if err := os.Rename(staged, l.ConfigPath()); err != nil {
		os.Remove(staged)
		return fault.Internalf("storing the keepalived config: %w", err)
	}
	if err := fsutil.SyncDir(l.Dir()); err != nil {
		return fault.Internalf("storing the keepalived config: %w", err)
	}
	st, err := v.readState()
	if err != nil {
		v.log.Warn("unreadable keepalived record; rewriting it", zap.Error(err))
	}
	if !st.Enabled || err != nil {
		st.Enabled = true
		if err := v.writeState(st); err != nil {
			return fault.Internalf("recording the keepalived state: %w", err)
		}
	}
	return nil
}

// keepalivedTest runs `keepalived -t` inside the namespace, where the
// config's interfaces are. Exit status 6 only reports script security
// warnings, which every controller-rendered config draws.
func (v *VRRP) keepalivedTest(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, validateTimeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, v.opts.Cmd, "-t", "-f", path)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := netns.StartIn(v.opts.Namespace, cmd); err != nil {
		return err.Error(), err
	}
	err := cmd.Wait()
	text := strings.TrimSpace(out.String())
	var ee *exec.ExitError
	switch {
	case err == nil:
		return text, nil
	case errors.As(err, &ee) && ee.ExitCode() == exitConfigTestSecurity:
		return text, nil
	case ctx.Err() != nil:
		return text, fmt.Errorf("keepalived -t did not finish: %w", ctx.Err())
	}
	if text == "" {
		text = err.Error()
	}
	return text, err
}

// exitConfigTestSecurity is keepalived's KEEPALIVED_EXIT_CONFIG_TEST_SECURITY.
const exitConfigTestSecurity = 6

func (v *VRRP) readState() (vrrpState, error) {
	var st vrrpState
	data, err := os.ReadFile(v.layout.statePath())
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(data, &st)
}

func (v *VRRP) writeState(st vrrpState) error {
	data, _ := json.Marshal(st)
	return fsutil.WriteFile(v.layout.statePath(), append(data, '\n'), 0o644)
}

func (v *VRRP) setDesired(running bool) error {
	v.desired = running
	st, err := v.readState()
	if err != nil {
		v.log.Warn("unreadable keepalived record; rewriting it", zap.Error(err))
	}
	if st.Stopped == !running && err == nil {
		return nil
	}
	st.Stopped = !running
	if running {
		st.Enabled = true
	}
	if err := v.writeState(st); err != nil {
		return fmt.Errorf("recording the keepalived state: %w", err)
	}
	return nil
}

// Running reports whether the supervised keepalived is alive.
func (v *VRRP) Running() bool {
	v.op.Lock()
	defer v.op.Unlock()
	return v.proc != nil && v.proc.Alive()
}

// Configured reports whether a VRRP config was uploaded.
func (v *VRRP) Configured() bool {
	_, err := os.Stat(v.layout.ConfigPath())
	return err == nil
}

// Pid is the supervised keepalived's main pid, 0 when it does not run.
func (v *VRRP) Pid() int {
	v.op.Lock()
	defer v.op.Unlock()
	if v.proc == nil || !v.proc.Alive() {
		return 0
	}
	return v.proc.Pid
}

// Start starts keepalived; one that already runs is reloaded instead, as
// upstream does (reloaded reports that).
func (v *VRRP) Start(ctx context.Context) (reloaded bool, err error) {
	reloaded, _, err = v.startOrReload(ctx)
	return reloaded, err
}

// Reload makes keepalived re-read its config (SIGHUP). A keepalived that
// does not run is started instead (started reports that).
func (v *VRRP) Reload(ctx context.Context) (started bool, err error) {
	_, started, err = v.startOrReload(ctx)
	return started, err
}

// startOrReload reloads a running keepalived or starts one that does not
// run, and reports which it did.
func (v *VRRP) startOrReload(ctx context.Context) (reloaded, started bool, err error) {
	v.op.Lock()
	defer v.op.Unlock()
	if !v.Configured() {
		return false, false, errors.New("no keepalived configuration has been uploaded")
	}
	if err := v.setDesired(true); err != nil {
		return false, false, err
	}
	v.adoptLocked()
	if v.proc != nil && v.proc.Alive() {
		return true, false, v.reloadLocked()
	}
	return false, true, v.startLocked(ctx)
}

// Stop stops keepalived (it gives up the VIPs) and remembers that it must
// stay stopped.
func (v *VRRP) Stop(ctx context.Context) error {
	v.op.Lock()
	defer v.op.Unlock()
	if err := v.setDesired(false); err != nil {
		return err
	}
	v.adoptLocked()
	proc := v.proc
	v.proc = nil
	if proc == nil || !proc.Alive() {
		return nil
	}
	if !procwatch.Stop(proc, stopTimeout) {
		return fmt.Errorf("keepalived %d did not exit", proc.Pid)
	}
	os.Remove(v.layout.PidPath())
	v.log.Info("keepalived stopped", zap.Int("pid", proc.Pid))
	return nil
}

// Restore brings keepalived back to its desired state at agent start-up:
// one still running from the previous agent is adopted; one that should
// run (enabled by an upload and not stopped) but does not is started.
func (v *VRRP) Restore(ctx context.Context) error {
	v.op.Lock()
	defer v.op.Unlock()
	st, err := v.readState()
	if err != nil {
		v.log.Warn("unreadable keepalived record", zap.Error(err))
	}
	v.desired = st.Enabled && !st.Stopped && v.Configured()
	if v.adoptLocked() {
		if !v.desired {
			// Running but recorded otherwise: keep it rather than drop
			// the VIP, and record it.
			return v.setDesired(true)
		}
		return nil
	}
	if !v.desired {
		return nil
	}
	return v.startLocked(ctx)
}

// adoptLocked takes over a keepalived started by an earlier agent process
// (pid file, checked by command line so a recycled pid is never taken).
func (v *VRRP) adoptLocked() bool {
	if v.proc != nil && v.proc.Alive() {
		return true
	}
	pid, err := pidfile.Read(v.layout.PidPath())
	if err != nil || !v.isOurs(pid) {
		return false
	}
	v.proc = procwatch.WatchAdopted(pid, v.done)
	v.log.Info("adopted running keepalived", zap.Int("pid", pid))
	go v.monitor(v.proc)
	return true
}

// isOurs checks that pid is a keepalived running this config with this
// pid file.
func (v *VRRP) isOurs(pid int) bool {
	args, err := procwatch.Cmdline(v.opts.ProcDir, pid)
	if err != nil {
		return false
	}
	return procwatch.ArgAfter(args, "-f", func(s string) bool { return s == v.layout.ConfigPath() }) &&
		procwatch.ArgAfter(args, "-p", func(s string) bool { return s == v.layout.PidPath() })
}

// args is keepalived's command line, as upstream's unit runs it, in the
// foreground so the agent is its parent.
func (v *VRRP) args() []string {
	l := v.layout
	return []string{"--dont-fork", "--log-facility=" + strconv.Itoa(v.opts.LogFacility),
		"-f", l.ConfigPath(), "-p", l.PidPath(), "-r", l.vrrpPidPath(), "-c", l.checkPidPath()}
}

func (v *VRRP) startLocked(ctx context.Context) error {
	l := v.layout
	for _, p := range []string{l.PidPath(), l.vrrpPidPath(), l.checkPidPath()} {
		os.Remove(p)
	}
	logFile, err := os.OpenFile(l.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	offset, _ := logFile.Seek(0, io.SeekEnd)
	cmd := exec.Command(v.opts.Cmd, v.args()...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = l.Dir()
	// Its own process group: signals meant for the agent do not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = netns.StartIn(v.opts.Namespace, cmd)
	logFile.Close()
	if err != nil {
		return err
	}
	proc := procwatch.WatchChild(cmd)
	if err := v.waitReady(ctx, proc); err != nil {
		procwatch.Kill(proc, 0)
		return fmt.Errorf("%w%s", err, v.outputSince(offset))
	}
	v.proc = proc
	v.log.Info("keepalived started", zap.Int("pid", proc.Pid))
	go v.monitor(proc)
	return nil
}

// waitReady waits until keepalived has written its pid file and stayed up
// briefly.
func (v *VRRP) waitReady(ctx context.Context, proc *procwatch.Process) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	return procwatch.WaitReady(ctx, proc, "keepalived", pollEvery, settle, func() bool {
		pid, err := pidfile.Read(v.layout.PidPath())
		return err == nil && pid == proc.Pid
	}, func() error {
		return fmt.Errorf("keepalived did not write %s within %v", v.layout.PidPath(), startTimeout)
	})
}

func (v *VRRP) reloadLocked() error {
	proc := v.proc
	if err := syscall.Kill(proc.Pid, syscall.SIGHUP); err != nil {
		return fmt.Errorf("signalling keepalived %d: %w", proc.Pid, err)
	}
	select {
	case <-proc.Exited:
		return fmt.Errorf("keepalived %s on reload", proc.Status)
	case <-time.After(settle):
	}
	v.log.Info("keepalived reloaded", zap.Int("pid", proc.Pid))
	return nil
}

// monitor waits for keepalived to end and, unless that was asked for,
// starts it again with backoff.
func (v *VRRP) monitor(proc *procwatch.Process) {
	r := procwatch.Respawner{
		Lock: &v.op, Done: v.done, Backoff: v.opts.Backoff, Respawns: &v.respawn,
		StartTimeout: startTimeout + time.Second,
		Dead: func(proc *procwatch.Process) bool {
			if v.proc != proc && v.proc != nil || !v.desired {
				return false
			}
			v.proc = nil
			return true
		},
		Wanted: func() bool { return v.proc == nil && v.desired },
		Start: func(ctx context.Context) (*procwatch.Process, error) {
			err := v.startLocked(ctx)
			return v.proc, err
		},
		Died: func(proc *procwatch.Process, uptime, delay time.Duration, streak int) {
			v.log.Warn("keepalived died; restarting it", zap.Int("pid", proc.Pid),
				zap.String("status", proc.Status), zap.Duration("uptime", uptime.Round(time.Millisecond)),
				zap.Duration("after", delay), zap.Int("restarts_in_a_row", streak))
		},
		Restarted: func(started, proc *procwatch.Process, streak int) {
			v.log.Info("keepalived restarted", zap.Int("pid", started.Pid), zap.Int("old_pid", proc.Pid),
				zap.Int("restarts_in_a_row", streak))
		},
		Failed: func(err error) { v.log.Error("restarting keepalived failed", zap.Error(err)) },
	}
	r.Watch(proc)
}

// outputSince returns what keepalived wrote to its log after offset, as a
// suffix for an error.
func (v *VRRP) outputSince(offset int64) string {
	f, err := os.Open(v.layout.LogPath())
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size()-offset > maxOutput {
		offset = st.Size() - maxOutput
	}
	f.Seek(offset, io.SeekStart)
	data, _ := io.ReadAll(io.LimitReader(f, maxOutput))
	if out := strings.TrimSpace(string(data)); out != "" {
		return "\n" + out
	}
	return ""
}
