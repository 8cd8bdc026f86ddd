package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent"
	"github.com/amphora-agent/amphora-agent/agent/config"
	"github.com/amphora-agent/amphora-agent/agent/health"
	"github.com/amphora-agent/amphora-agent/agent/status"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/internal/cmdline"
)

// statusUsage is `status --help`: the synopsis and the exit statuses a
// script can rely on (package agent/status says more).
const statusUsage = `usage: amphora-agent status [--config-file PATH]... [--json]

Print what the agent, its daemons, the network and the heartbeats are
doing. It only reads; it changes nothing.

exit status (as systemctl status and LSB init scripts):
  0  the agent runs, and every load balancer and keepalived it wants runs
  1  degraded: the agent runs but a load balancer or keepalived it wants is
     down (dead, or being respawned), the network namespace is missing, or
     the agent holds its socket but does not answer
  2  bad command line
  3  the agent is not running
  4  unknown: the agent could not be asked (not root), or the configuration
     or the output failed`

// Exit statuses of `status` beyond 0 and cmdline.ExitUsage.
const (
	exitDegraded        = 1
	exitAgentNotRunning = 3
	exitStatusUnknown   = 4
)

// healthExit is the exit status for each health state.
var healthExit = map[string]int{
	status.HealthOK:         0,
	status.HealthDegraded:   exitDegraded,
	status.HealthNotRunning: exitAgentNotRunning,
	status.HealthUnknown:    exitStatusUnknown,
}

// runStatus prints what the agent, its daemons, the network and the
// heartbeats are doing. It reads files, sockets and /proc, and asks the
// running agent (on its root-only unix socket) for what only it knows; it
// changes nothing.
func runStatus(args []string, stdout, stderr io.Writer) int {
	fs := cmdline.New("amphora-agent status", statusUsage, Version, stdout, stderr)
	var files ConfigFiles
	fs.Var(&files, "config-file", "configuration file (repeatable), as given to the agent")
	asJSON := fs.Bool("json", false, "print the status as a JSON document")
	if code, exit := fs.ParseNoArgs(args); exit {
		return code
	}
	files, cfg, _, err := LoadConfig(files)
	if err != nil {
		fmt.Fprintf(stderr, "amphora-agent status: %v\n", err)
		return exitStatusUnknown
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := status.Collect(ctx, cfg, files, Version, status.System{})
	r.GeneratedAt = time.Now().UTC()
	if live, err := status.Fetch(ctx, status.SocketPath(cfg)); err == nil {
		status.Merge(&r, live)
	} else {
		status.NotLive(&r, err)
	}
	status.Assess(&r)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(r)
	} else {
		err = status.WriteText(stdout, r)
	}
	if err != nil {
		fmt.Fprintf(stderr, "amphora-agent status: %v\n", err)
		return exitStatusUnknown
	}
	return healthExit[r.Health.State]
}

// ListenStatus binds base_path/status.sock for `amphora-agent status`;
// ServeStatus answers on it until ctx ends.
func ListenStatus(cfg *config.Config, log *zap.Logger) (*status.Socket, error) {
	path := status.SocketPath(cfg)
	if err := os.MkdirAll(cfg.BasePath, 0o755); err != nil {
		return nil, err
	}
	sock, err := status.Listen(path)
	if err != nil {
		return nil, err
	}
	log.Info("status socket", zap.String("path", path))
	return sock, nil
}

// ServeStatus answers `amphora-agent status` on sock until ctx ends.
func ServeStatus(ctx context.Context, sock *status.Socket, a *agent.Agent, hb *health.Sender, cfg *config.Config, log *zap.Logger) error {
	where := logDestination(cfg.UseSyslog)
	live := func() status.Live {
		l := a.Live()
		l.Version, l.Log = Version, where
		s := hb.State()
		l.Heartbeat = status.Heartbeat{LastSendAt: s.LastSendAt, Destination: s.Destination,
			LastResult: s.LastResult, Seq: s.Seq, Suppressed: s.Suppressed}
		return l
	}
	return sock.Serve(ctx, live, func(err error, wait time.Duration) {
		log.Warn("accept failed; retrying", zap.Error(err), zap.Duration("in", wait))
	})
}

// logDestination says where the agent's own log goes: the journal when
// systemd connected stderr to it, else whatever stderr is.
func logDestination(useSyslog bool) string {
	where := "stderr"
	if os.Getenv("JOURNAL_STREAM") != "" {
		where = "the journal (journalctl -u amphora-agent)"
	} else if target, err := os.Readlink("/proc/self/fd/2"); err == nil {
		where = "stderr (" + target + ")"
	}
	if useSyslog {
		where += " and syslog"
	}
	return where
}
