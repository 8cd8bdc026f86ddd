package keepalived

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/caller"
	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/fsutil"
	"github.com/amphora-agent/amphora-agent/agent/procgroup"
	"github.com/amphora-agent/amphora-agent/agent/procwatch"
	"github.com/amphora-agent/amphora-agent/netns"
)

// VRRPLayout names the files of the VRRP keepalived under base_path/vrrp.
type VRRPLayout struct{ Base string }

func (l VRRPLayout) Dir() string { return filepath.Join(l.Base, "vrrp") }

// ConfigPath is the controller's keepalived config; its existence is what
// makes the heartbeat sender require a running keepalived.
func (l VRRPLayout) ConfigPath() string { return filepath.Join(l.Dir(), "octavia-keepalived.conf") }

// PidPath holds keepalived's main pid (written by keepalived, -p).
func (l VRRPLayout) PidPath() string { return filepath.Join(l.Dir(), "octavia-keepalived.pid") }

// CheckScriptPath is the vrrp_script the controller's config tracks.
func (l VRRPLayout) CheckScriptPath() string { return filepath.Join(l.Dir(), "check_script.sh") }

// CheckScriptsDir holds the checks check_script.sh runs.
func (l VRRPLayout) CheckScriptsDir() string { return filepath.Join(l.Dir(), "check_scripts") }

// LogPath collects keepalived's stdout and stderr.
func (l VRRPLayout) LogPath() string { return filepath.Join(l.Dir(), "octavia-keepalived.log") }

// StatePath is the desired state.
func (l VRRPLayout) StatePath() string { return filepath.Join(l.Dir(), "agent-state.json") }

func (l VRRPLayout) stagedPath() string { return l.ConfigPath() + ".new" }
func (l VRRPLayout) failedPath() string { return l.ConfigPath() + ".new-failed" }

// Files are the VRRP keepalived's files as its supervision needs them.
func (l VRRPLayout) Files() Files {
	return Files{
		Dir:      l.Dir(),
		Config:   l.ConfigPath(),
		Pid:      l.PidPath(),
		VRRPPid:  filepath.Join(l.Dir(), "octavia-keepalived.vrrp.pid"),
		CheckPid: filepath.Join(l.Dir(), "octavia-keepalived.check.pid"),
		Log:      l.LogPath(),
		State:    l.StatePath(),
		Journal:  []string{"octavia-keepalived", "Keepalived", "Keepalived_vrrp"},
	}
}

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

// Validator checks a staged keepalived config and returns keepalived's
// output; an error means the config must not be used, except
// ErrComplaints.
type Validator func(ctx context.Context, path string) (string, error)

// ErrComplaints is what a Validator returns, with keepalived's output, for
// a config keepalived finds fault with but runs all the same, skipping
// what it names: the config is stored and the complaints are logged.
var ErrComplaints = errors.New("keepalived -t complains about parts keepalived skips")

// ErrNotChecked is what a Validator returns when the check gave no verdict
// (it could not run, or was cut short when the client stopped waiting):
// the config is stored unchecked, as upstream stores every config, and a
// warning logged.
var ErrNotChecked = errors.New("keepalived -t did not check the config")

// ErrIncludesFiles is what Test returns for a config that made keepalived
// read other files: refused, with keepalived's output about them left out.
var ErrIncludesFiles = errors.New("the config includes other files")

// VRRPStore keeps the controller's VRRP keepalived config: validated
// before it replaces the stored one, with check_script.sh and the
// check_scripts folder it tracks.
type VRRPStore struct {
	Layout   VRRPLayout
	Validate Validator
	Log      *zap.Logger
}

// Upload validates a keepalived config and stores it, with
// check_script.sh and the check_scripts folder. An invalid config is
// refused with keepalived's output and the stored one is kept.
func (s *VRRPStore) Upload(ctx context.Context, body []byte) error {
	l := s.Layout
	if err := os.MkdirAll(l.CheckScriptsDir(), 0o755); err != nil {
		return fault.Internalf("creating %s: %w", l.CheckScriptsDir(), err)
	}
	// The check script goes first: keepalived -t looks for it.
	if err := fsutil.WriteFile(l.CheckScriptPath(), []byte(CheckScript(l.CheckScriptsDir())), 0o755); err != nil {
		return fault.Internalf("writing the VRRP check script: %w", err)
	}
	return storeValidated(ctx, s.Validate, s.Log, body, l.ConfigPath(), l.stagedPath(), l.failedPath())
}

// storeValidated stages body next to final, has validate check it, and
// renames it into place; a refused config is kept as failed for
// inspection, answered with keepalived's output, and final is untouched.
func storeValidated(ctx context.Context, validate Validator, log *zap.Logger, body []byte, final, staged, failed string) error {
	if err := refuseIncludes(body); err != nil {
		return err
	}
	if err := fsutil.WriteFile(staged, body, 0o644); err != nil {
		return fault.Internalf("staging the keepalived config: %w", err)
	}
	out, err := validate(ctx, staged)
	if errors.Is(err, ErrComplaints) {
		log.Warn("keepalived config stored despite keepalived -t's complaints; keepalived skips what they name",
			zap.String("config", final), zap.String("output", out))
	} else if errors.Is(err, ErrNotChecked) {
		log.Warn("keepalived config stored unchecked, as upstream stores it: keepalived -t gave no verdict",
			zap.String("config", final), zap.String("output", out), zap.Error(err))
	} else if err != nil {
		if rerr := os.Rename(staged, failed); rerr != nil {
			os.Remove(staged)
		}
		log.Warn("keepalived config rejected", zap.String("config", final), zap.String("output", out), zap.Error(err))
		return fault.Invalid("Invalid request", out)
	}
	if err := os.Rename(staged, final); err != nil {
		os.Remove(staged)
		return fault.Internalf("storing the keepalived config: %w", err)
	}
	if err := fsutil.SyncDir(filepath.Dir(final)); err != nil {
		return fault.Internalf("storing the keepalived config: %w", err)
	}
	return nil
}

// Configured reports whether a VRRP config was uploaded.
func (s *VRRPStore) Configured() bool {
	_, err := os.Stat(s.Layout.ConfigPath())
	return err == nil
}

// Test is a Validator running `keepalived -t` inside the namespace, where
// the config's interfaces are. keepalived -t fails controller configs for
// parts keepalived skips while it runs the rest (a pool without members,
// an IPv6 persistence_granularity), and upstream stores every config
// unchecked: so only braces that do not pair up, which Octavia's
// templates cannot produce, refuse a config, and other faults come with
// ErrComplaints. Exit status 6 (script security) hides all other faults.
// A config that made keepalived read another file is refused with
// ErrIncludesFiles, and the output returned is only what keepalived said
// about the config itself (see outputAbout). It runs as long as the
// client that asked waits (caller.Of; ctx otherwise): upstream runs no
// check, so one that cannot run or is cut short is ErrNotChecked.
func Test(cmdPath, namespace string) Validator {
	return func(ctx context.Context, path string) (string, error) {
		ctx = caller.Or(ctx)
		cmd := procgroup.Command(ctx, cmdPath, "-t", "-f", path)
		cmd.Env = procwatch.CleanEnv()
		out, err := procgroup.CombinedOutput(cmd, func(cmd *exec.Cmd) error { return netns.StartIn(namespace, cmd) })
		text, others := outputAbout(strings.TrimSpace(string(out)), path)
		var ee *exec.ExitError
		switch {
		case others > 0:
			// An include refuseIncludes did not see (one assembled from
			// parameter definitions): what keepalived said about the
			// included file is its content, so only the count is told.
			return strings.TrimSpace(fmt.Sprintf("keepalived read files other than the uploaded config (an include): "+
				"the config is refused, and %d lines of keepalived's output about those files are left out\n%s", others, text)), ErrIncludesFiles
		case err == nil:
			return text, nil
		case ctx.Err() != nil:
			return text, fmt.Errorf("%w: it did not finish: %w", ErrNotChecked, ctx.Err())
		case procgroup.NotRun(err):
			return text, fmt.Errorf("%w: it could not run: %w", ErrNotChecked, err)
		case errors.As(err, &ee) && (ee.ExitCode() == exitConfigTest || ee.ExitCode() == exitConfigTestSecurity):
			if unpairedBraces(text) {
				return text, err
			}
			if ee.ExitCode() == exitConfigTest {
				return text, ErrComplaints
			}
			return text, nil
		}
		if text == "" {
			text = err.Error()
		}
		return text, err
	}
}

// keepalived's KEEPALIVED_EXIT_CONFIG_TEST (the test found errors) and
// KEEPALIVED_EXIT_CONFIG_TEST_SECURITY (scripts without script security).
const (
	exitConfigTest         = 5
	exitConfigTestSecurity = 6
)

// unpairedBraces reports whether keepalived's output says the config's
// braces do not pair up: a body cut short, or not keepalived's at all.
// Should a later keepalived word it otherwise, such configs are stored
// with their complaints logged, as upstream stores them.
func unpairedBraces(output string) bool {
	return strings.Contains(output, "Extra '}' found") || strings.Contains(output, "missing '}'s or extra '{'s")
}
