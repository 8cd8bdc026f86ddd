package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"syscall"

	"github.com/amphora-agent/amphora-agent/agent"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/amphora-agent/amphora-agent/agent/config"
	"github.com/amphora-agent/amphora-agent/agent/logging"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/internal/cmdline"
	"github.com/amphora-agent/amphora-agent/netns"
)

// runInterface is `amphora-agent interface [--config-file F]... up|down
// <name|all>`, the agent's take on upstream's amphora-interface image
// tool: it applies (or removes) the interface files of
// agent_server_network_dir inside the configured namespace. The agent
// runs the same code at start-up. Exit status: 1 for a usage error, 2 when
// an interface failed (upstream's codes), 2 for an unknown flag too (as
// upstream's oslo.config parser).
func runInterface(args []string, stdout, stderr io.Writer) int {
	fset := cmdline.New("amphora-agent interface",
		"usage: amphora-agent interface [--config-file PATH]... up|down <interface|all>", Version, stdout, stderr)
	var files ConfigFiles
	fset.Var(&files, "config-file", "configuration file (repeatable)")
	if code, exit := fset.Parse(args); exit {
		return code
	}
	if fset.NArg() != 2 || (fset.Arg(0) != "up" && fset.Arg(0) != "down") {
		fset.Usage(stderr)
		return 1
	}
	action, name := fset.Arg(0), fset.Arg(1)

	cfg, err := interfaceConfig(files)
	if err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return 2
	}
	log, closeLog := logging.New(zap.NewAtomicLevelAt(zapcore.InfoLevel), logging.Options{})
	defer closeLog()
	defer log.Sync()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	n := netns.NewNetwork(agent.NetworkConfig(cfg, cfg.ActiveStandby), nil, log.Named("interface"))
	if err := n.Interfaces(ctx, action, name); err != nil {
		fmt.Fprintf(stderr, "Error: Could not configure interface: %v\n", err)
		return 2
	}
	return 0
}

// interfaceConfig loads the agent configuration; without --config-file the
// default file is used when present, and the defaults otherwise (the image
// tool works without one too).
func interfaceConfig(files ConfigFiles) (*config.Config, error) {
	if len(files) == 0 {
		if _, err := os.Stat(DefaultConfigFile); errors.Is(err, fs.ErrNotExist) {
			cfg, _, err := config.Load(nil)
			return cfg, err
		}
		files = ConfigFiles{DefaultConfigFile}
	}
	sources, err := config.ReadFiles(files)
	if err != nil {
		return nil, err
	}
	cfg, _, err := config.Load(sources)
	return cfg, err
}
