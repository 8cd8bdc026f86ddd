package keepalived

import (
	"context"
	"errors"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/fsutil"
)

// UDPCheckScript is the UDP-CONNECT health monitor keepalived runs as
// MISC_CHECK with the member's address and port: a UDP "connect" with
// netcat, whose timeout option depends on its flavour (nmap's or
// OpenBSD's).
const UDPCheckScript = `#!/bin/bash

nc_cmd=$(command -v nc)
case "$($nc_cmd --version 2>&1)" in
*nmap*) wait_opt="-i1" ;;
*) wait_opt="-w1" ;;
esac

$nc_cmd -uzv $wait_opt "$1" "$2" > /dev/null
exit $?
`

// LVSStore keeps the controller's per-listener keepalived configs, each
// validated before it replaces the stored one, with the check scripts
// they call.
type LVSStore struct {
	Layout   LVSLayout
	Validate Validator
	Log      *zap.Logger
}

// Upload validates a listener's config and stores it. One keepalived
// refuses is answered with its output and the stored one is kept.
func (s *LVSStore) Upload(ctx context.Context, id string, body []byte) error {
	l := s.Layout
	if err := os.MkdirAll(l.CheckDir(), 0o755); err != nil {
		return fault.Internalf("creating %s: %w", l.CheckDir(), err)
	}
	// Before validation: keepalived -t looks for the scripts a config runs.
	if err := fsutil.WriteFile(l.UDPCheckPath(), []byte(UDPCheckScript), 0o755); err != nil {
		return fault.Internalf("writing the UDP check script: %w", err)
	}
	if err := storeValidated(ctx, s.Validate, s.Log, body, l.ConfigPath(id), l.stagedPath(id), l.failedPath(id)); err != nil {
		return err
	}
	newerThanChecker(l.ConfigPath(id), l.Files(id).CheckPid, s.Log)
	return nil
}

// newerThanChecker makes the stored config's time later than the checker's
// pid file's: that order is how a config not restarted yet is told
// (LVSLayout.restarting), and file times advance with the kernel's clock
// tick, so an upload within a few milliseconds of a start would otherwise
// look already loaded.
func newerThanChecker(config, checkPid string, log *zap.Logger) {
	cfg, err := os.Stat(config)
	if err != nil {
		return
	}
	check, err := os.Stat(checkPid)
	if err != nil || cfg.ModTime().After(check.ModTime()) {
		return
	}
	t := check.ModTime().Add(time.Microsecond)
	if err := os.Chtimes(config, t, t); err != nil {
		log.Warn("marking the new config as not loaded yet", zap.String("config", config), zap.Error(err))
	}
}

// Config returns a listener's stored config.
func (s *LVSStore) Config(id string) ([]byte, error) {
	data, err := os.ReadFile(s.Layout.ConfigPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, lvsNotFound(id)
	}
	return data, err
}

// Exists reports whether listener id has a stored config.
func (s *LVSStore) Exists(id string) bool {
	_, err := os.Stat(s.Layout.ConfigPath(id))
	return err == nil
}

// remove deletes what was made for listener id; the shared check scripts
// stay for the other listeners.
func (s *LVSStore) remove(id string) error {
	var errs []error
	for _, p := range s.Layout.owned(id) {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func lvsNotFound(id string) error {
	return fault.NotFound("UDP Listener Not Found", "No UDP listener with UUID: "+id)
}
