package keepalived

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/amphora-agent/amphora-agent/agent/fsutil"
)

// CheckScripts manages the VRRP check_scripts folder: keepalived's
// vrrp_script runs every file there and sums their exit codes, so an
// amphora whose HAProxy stopped answering gives up MASTER.
type CheckScripts struct {
	Layout VRRPLayout
}

func (c CheckScripts) Dir() string { return c.Layout.CheckScriptsDir() }

// HAProxyScriptPath is the script that checks every load balancer's stats
// socket.
func (c CheckScripts) HAProxyScriptPath() string {
	return filepath.Join(c.Dir(), "haproxy_check_script.sh")
}

// VRRPInUse reports whether a VRRP config was ever uploaded (upstream
// looks for the top-level check script).
func (c CheckScripts) VRRPInUse() bool {
	_, err := os.Stat(c.Layout.CheckScriptPath())
	return err == nil
}

// UpdateHAProxyCheck rewrites the HAProxy check script for the load
// balancers lbs (excluding one that is being stopped), as upstream does:
// with no load balancer and no LVS listener the script fails (keepalived
// must not claim MASTER with nothing to serve); with only LVS listeners it
// is removed (their own check covers them).
func (c CheckScripts) UpdateHAProxyCheck(lbs []string, excluded string, lvsListeners []string, socketPath func(lb string) string) error {
	if err := os.MkdirAll(c.Dir(), 0o755); err != nil {
		return err
	}
	path := c.HAProxyScriptPath()
	if len(lbs) == 0 {
		if len(lvsListeners) > 0 {
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			return nil
		}
		return fsutil.WriteFile(path, []byte("exit 1"), 0o644)
	}
	// Like upstream, excluding the last load balancer leaves a check with
	// no sockets, which passes.
	socks := make([]string, 0, len(lbs))
	for _, lb := range lbs {
		if lb != excluded {
			socks = append(socks, socketPath(lb))
		}
	}
	slices.Sort(socks)
	return fsutil.WriteFile(path, []byte("haproxy-vrrp-check "+strings.Join(socks, " ")+"; exit $?"), 0o644)
}

// LVSScriptPath is the script that checks the listeners' keepalived.
func (c CheckScripts) LVSScriptPath() string { return filepath.Join(c.Dir(), "lvs_udp_check.sh") }

// WriteLVSCheck installs the check that fails while a UDP or SCTP
// listener's keepalived is dead: every main pid file under lvsDir must
// name a live process. A stopped listener has no pid file (its stop
// removes it), so only a crash counts, as upstream's
// `systemctl status` check.
func (c CheckScripts) WriteLVSCheck(lvsDir string) error {
	if err := os.MkdirAll(c.Dir(), 0o755); err != nil {
		return err
	}
	return fsutil.WriteFile(c.LVSScriptPath(), []byte(`#!/bin/bash

# Don't try to run the directory when it is empty
shopt -s nullglob

status=0
for file in `+lvsDir+`/`+lvsPrefix+`*.pid
do
  case $(basename "$file") in
    *.*.pid) continue ;; # a VRRP or checker child's pid file
  esac
  echo "Check keepalived pid file: " $file
  kill -0 "$(cat "$file")"
  status=$(( $status + $? ))
done
exit $status
`), 0o755)
}
