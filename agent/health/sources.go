package health

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/pidfile"
	"github.com/amphora-agent/amphora-agent/haproxy"
	"github.com/amphora-agent/amphora-agent/haproxy/stats"
	"github.com/amphora-agent/amphora-agent/keepalived"
)

// HAProxySource is where the sender finds the load balancers and reads
// their HAProxy statistics. LayoutSource is the one that reads the files
// and sockets under base_path; a supervisor that knows more (a stop in
// progress) can supply its own.
type HAProxySource interface {
	// LoadBalancers lists the LB ids with a stored configuration.
	LoadBalancers() ([]string, error)
	// State reports whether lb's HAProxy runs now and whether the agent
	// is busy with it. An LB neither running nor busy is stopped or
	// deleted: it is never reported, not even from an earlier reading.
	State(lb string) LBState
	// ShowStat returns the rows of `show stat -1 -1 -1` from lb's stats
	// socket. They may point into sc, which the caller reuses for lb's
	// next read.
	ShowStat(ctx context.Context, lb string, sc *StatScratch) ([]stats.Row, error)
}

// StatScratch is what one LB's stats reads reuse from one to the next:
// the answer buffer (about 400 bytes per member) and the rows pointing
// into it.
type StatScratch struct {
	Answer bytes.Buffer
	Rows   []stats.Row
}

// LBState is what the owner of a load balancer's HAProxy (the agent's
// supervisor) says of it.
type LBState struct {
	Running bool // its master is alive
	// Busy: the agent is starting, reloading or restoring it, so its stats
	// socket may refuse a read for a moment; its last reading stands in
	// meanwhile (up to MaxBusyStandIn).
	Busy bool
}

// LayoutSource is the HAProxySource of an amphora: LBs are the folders of
// base_path with a haproxy.cfg, queried on <base_path>/<lb>.sock, in the
// state the supervisor reports.
type LayoutSource struct {
	Layout haproxy.Layout
	// Timeout bounds one socket query (stats.DefaultTimeout when zero).
	Timeout time.Duration
	// StateOf is the supervisor's answer (haproxy.Supervisor.State through
	// the agent). Without one, an LB runs when <lb>/<lb>.pid names a live
	// process and is never busy: enough for a reader of a HAProxy nobody
	// reloads, but a reloading master rewrites its pid file, and an LB
	// read at that moment counts as stopped.
	StateOf func(lb string) (running, busy bool)
}

func (s LayoutSource) LoadBalancers() ([]string, error) { return s.Layout.LoadBalancers() }

func (s LayoutSource) State(lb string) LBState {
	if s.StateOf != nil {
		running, busy := s.StateOf(lb)
		return LBState{Running: running, Busy: busy}
	}
	return LBState{Running: s.Layout.Running(lb)}
}

func (s LayoutSource) ShowStat(ctx context.Context, lb string, sc *StatScratch) ([]stats.Row, error) {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = stats.DefaultTimeout
	}
	// The heartbeat's reads come with an earlier deadline already: no
	// second timer for them.
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > timeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	rows, err := stats.ShowStat(ctx, s.Layout.SocketPath(lb), &sc.Answer, sc.Rows)
	if err == nil {
		sc.Rows = rows
	}
	return rows, err
}

// LVSSource reports the LVS (UDP and SCTP) listeners that keepalived runs:
// every running listener not marked disabled, status OPEN, with absolute
// counters from IPVS, and its pool keyed by the bare pool id
// (agent/health/README.md, "UDP and SCTP listeners"). A partial reading
// may come with an error; both are used.
type LVSSource interface {
	LVS(ctx context.Context) (Reading, error)
}

// keepalivedGate returns why no heartbeat may be sent, or "": when the
// controller has uploaded a VRRP configuration, keepalived must run. An
// amphora whose keepalived died stops heartbeating so that the controller
// fails it over (upstream behaviour).
func keepalivedGate(base string) string {
	l := keepalived.VRRPLayout{Base: base}
	conf := l.ConfigPath()
	if st, err := os.Stat(conf); err != nil || !st.Mode().IsRegular() {
		return ""
	}
	pidPath := l.PidPath()
	pid, err := pidfile.Read(pidPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("keepalived is configured (%s) but its pid file %s is missing", conf, pidPath)
	case err != nil:
		return fmt.Sprintf("keepalived is configured (%s) but its pid file %s is unreadable: %v", conf, pidPath, err)
	}
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return fmt.Sprintf("keepalived is configured (%s) but not running (pid %d from %s)", conf, pid, pidPath)
	}
	return ""
}
