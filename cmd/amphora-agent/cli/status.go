package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent"
	"github.com/amphora-agent/amphora-agent/agent/config"
	"github.com/amphora-agent/amphora-agent/agent/health"
	"github.com/amphora-agent/amphora-agent/agent/status"
)

// The status command's exit codes beyond 1 (bad configuration, output
// failed) and 2 (bad arguments), as LSB init scripts' status and
// `systemctl status` use them: 0 means the agent answered.
const (
	exitAgentNotRunning = 3
	exitAgentUnknown    = 4
)

// runStatus prints what the agent, its daemons, the network and the
// heartbeats are doing. It reads files, sockets and /proc, and asks the
// running agent (on its root-only unix socket) for what only it knows; it
// changes nothing.
func runStatus(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("amphora-agent status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var files ConfigFiles
	fs.Var(&files, "config-file", "configuration file (repeatable), as given to the agent")
	asJSON := fs.Bool("json", false, "print the status as a JSON document")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "amphora-agent status: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	files, cfg, _, err := LoadConfig(files)
	if err != nil {
		fmt.Fprintf(stderr, "amphora-agent status: %v\n", err)
		return 1
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
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(r)
	} else {
		err = status.WriteText(stdout, r)
	}
	if err != nil {
		fmt.Fprintf(stderr, "amphora-agent status: %v\n", err)
		return 1
	}
	switch r.Agent.State {
	case status.AgentNotRunning:
		return exitAgentNotRunning
	case status.AgentUnknown:
		return exitAgentUnknown
	}
	return 0
}

// ServeStatus answers `amphora-agent status` on base_path/status.sock
// until ctx ends.
func ServeStatus(ctx context.Context, a *agent.Agent, hb *health.Sender, cfg *config.Config, log *zap.Logger) error {
	where := logDestination(cfg.UseSyslog)
	live := func() status.Live {
		l := a.Live()
		l.Version, l.Log = Version, where
		s := hb.State()
		l.Heartbeat = status.Heartbeat{LastSendAt: s.LastSendAt, Destination: s.Destination,
			LastResult: s.LastResult, Seq: s.Seq, Suppressed: s.Suppressed}
		return l
	}
	path := status.SocketPath(cfg)
	if err := os.MkdirAll(cfg.BasePath, 0o755); err != nil {
		return err
	}
	log.Info("status socket", zap.String("path", path))
	return status.Serve(ctx, path, live, func(err error, wait time.Duration) {
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
