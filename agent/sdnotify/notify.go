package sdnotify

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/tick"
)

// Notifier sends one message of systemd's notify protocol (sd_notify(3)):
// newline-separated VAR=value assignments.
type Notifier interface {
	Notify(state string) error
}

// Systemd is go-systemd's client. Without NOTIFY_SOCKET it sends nothing
// and succeeds, so outside systemd the agent runs as before.
type Systemd struct{}

func (Systemd) Notify(state string) error {
	// false: keep NOTIFY_SOCKET in the environment, every message reads it.
	_, err := daemon.SdNotify(false, state)
	return err
}

// WatchdogTimeout is WatchdogSec as systemd passed it to this process
// (WATCHDOG_USEC, and WATCHDOG_PID naming us), zero when off.
func WatchdogTimeout(log *zap.Logger) time.Duration {
	d, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn("ignoring the systemd watchdog setting", zap.Error(err))
		return 0
	}
	return d
}

// statusMax caps a STATUS line: restore errors can carry HAProxy's whole
// output, and systemctl status shows one line.
const statusMax = 400

// Manager tells systemd how start-up and shutdown go (Type=notify)
// and feeds its watchdog while the agent is live. Safe for concurrent use;
// each message is sent under mu, so nothing follows STOPPING=1.
type Manager struct {
	n   Notifier
	log *zap.Logger

	mu       sync.Mutex
	stopping bool
	status   string // the last progress status, put back after a health scare
	failing  string // why watchdog pings are withheld, "" while healthy
	lastErr  string // the last notify error logged, so a broken socket logs once
}

func NewManager(n Notifier, log *zap.Logger) *Manager {
	return &Manager{n: n, log: log}
}

// sendLocked delivers state; m.mu is held.
func (m *Manager) sendLocked(state string) {
	err := m.n.Notify(state)
	switch {
	case err == nil:
		m.lastErr = ""
	case err.Error() != m.lastErr:
		m.lastErr = err.Error()
		m.log.Warn("cannot notify systemd", zap.String("state", state), zap.Error(err))
	}
}

// Status reports progress.
func (m *Manager) Status(msg string) { m.report("", msg) }

// Ready ends start-up (READY=1) with a summary.
func (m *Manager) Ready(msg string) {
	if m.report(daemon.SdNotifyReady+"\n", msg) {
		m.log.Info("start-up complete", zap.String("status", oneLine(msg)))
	}
}

// report sends prefix and msg as the status, unless the agent is stopping.
func (m *Manager) report(prefix, msg string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopping {
		return false
	}
	m.status = oneLine(msg)
	m.sendLocked(prefix + "STATUS=" + m.status)
	return true
}

// Stopping says shutdown has begun; no status, ready or ping follows.
func (m *Manager) Stopping() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopping = true
	m.sendLocked(daemon.SdNotifyStopping + "\nSTATUS=stopping; HAProxy and keepalived keep running")
}

// Watchdog pings systemd every half timeout, at once first (a restore
// under a slow VM can outlast WatchdogSec; TimeoutStartSec bounds it
// instead), until ctx ends.
func (m *Manager) Watchdog(ctx context.Context, timeout time.Duration, live func() error) {
	t := tick.NewTicker(timeout / 2)
	defer t.Stop()
	for {
		m.ping(live)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			t.Next()
		}
	}
}

// ping sends WATCHDOG=1 if live passes. Otherwise it withholds it, so
// systemd kills and restarts the agent after WatchdogSec (HAProxy and
// keepalived survive that, KillMode=process), and says why, once.
func (m *Manager) ping(live func() error) {
	err := live()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopping {
		return
	}
	if err != nil {
		if msg := err.Error(); msg != m.failing {
			m.failing = msg
			m.log.Error("withholding the systemd watchdog ping; systemd will restart the agent", zap.Error(err))
			m.sendLocked("STATUS=" + oneLine("unhealthy: "+msg))
		}
		return
	}
	if m.failing != "" {
		m.failing = ""
		m.log.Info("healthy again; systemd watchdog pings resume")
		m.sendLocked("STATUS=" + m.status)
	}
	m.sendLocked(daemon.SdNotifyWatchdog)
}

// oneLine folds msg onto one line (a newline would end the assignment)
// and caps it at statusMax bytes without splitting a character.
func oneLine(msg string) string {
	msg = strings.Join(strings.Fields(msg), " ")
	if len(msg) <= statusMax {
		return msg
	}
	cut := statusMax
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}

// heartbeatStall is how long past its interval a heartbeat cycle may run
// before the loop counts as stuck. A slow cycle is live: each load
// balancer's stats read retries for up to a second, name resolution takes
// up to two.
const heartbeatStall = time.Minute

// Liveness is what the watchdog checks before each ping: the API server
// still serves and the heartbeat loop still finishes cycles. The restore
// and the mutation lock are left out: they may rightly be busy for
// minutes, and the controller sees that through the API.
type Liveness struct {
	now       func() time.Time
	interval  func() time.Duration // heartbeat_interval in force
	lastCycle func() time.Time     // health.Sender.LastCycle

	apiEnded  atomic.Bool
	hbStarted atomic.Pointer[time.Time]
}

// NewLiveness checks the API server and the heartbeat loop: now is the
// clock, interval the heartbeat_interval in force, lastCycle when the
// heartbeat loop last finished a cycle.
func NewLiveness(now func() time.Time, interval func() time.Duration, lastCycle func() time.Time) *Liveness {
	return &Liveness{now: now, interval: interval, lastCycle: lastCycle}
}

// APIEnded records that the API server has stopped serving.
func (l *Liveness) APIEnded() { l.apiEnded.Store(true) }

// HeartbeatStarted records when the heartbeat loop was started: the
// stall clock runs from then until its first cycle ends.
func (l *Liveness) HeartbeatStarted(at time.Time) { l.hbStarted.Store(&at) }

// Check says why the agent is not live, nil while it is.
func (l *Liveness) Check() error {
	if l.apiEnded.Load() {
		return errors.New("the API server has stopped")
	}
	started := l.hbStarted.Load()
	if started == nil {
		return nil // still restoring the network; the loop has not begun
	}
	last := l.lastCycle()
	if last.Before(*started) {
		last = *started
	}
	if l.now().Sub(last) > l.interval()+heartbeatStall {
		return fmt.Errorf("the heartbeat loop has not finished a cycle since %s", last.Format(time.RFC3339))
	}
	return nil
}

// ReadyStatus is the STATUS sent with READY=1: how many of the stored
// load balancers run, and what failed to come back (restoreErr) or could
// not be counted (countErr). Errors do not hold READY back: the controller
// must reach the API to repair or fail over.
func ReadyStatus(running, stored int, restoreErr, countErr error) string {
	msg := fmt.Sprintf("ready: %d of %d load balancers running", running, stored)
	if err := errors.Join(restoreErr, countErr); err != nil {
		msg += "; restore failed: " + err.Error()
	}
	return msg
}
