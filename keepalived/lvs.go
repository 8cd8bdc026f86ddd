// Package keepalived runs keepalived: the VRRP instance of ACTIVE_STANDBY
// amphorae and one LVS instance per UDP/SCTP listener.
package keepalived

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/amphora-agent/amphora-agent/agent/pidfile"
)

const lvsPrefix = "octavia-keepalivedlvs-"

// LVSLayout names the files of LVS listeners under base_path/lvs.
type LVSLayout struct {
	Base    string
	ProcDir string
}

func (l LVSLayout) Dir() string { return filepath.Join(l.Base, "lvs") }
func (l LVSLayout) ConfigPath(id string) string {
	return filepath.Join(l.Dir(), lvsPrefix+id+".conf")
}
func (l LVSLayout) PidPath(id string) string { return filepath.Join(l.Dir(), lvsPrefix+id+".pid") }

// Listeners lists LVS listener ids: files named octavia-keepalivedlvs-<id>.conf.
func (l LVSLayout) Listeners() ([]string, error) {
	entries, err := os.ReadDir(l.Dir())
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasPrefix(name, lvsPrefix) || !strings.HasSuffix(name, ".conf") {
			continue
		}
		id, _, _ := strings.Cut(strings.TrimPrefix(name, lvsPrefix), ".")
		if id != "" {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// Listener status values reported by GET /1.0/listeners.
const (
	StatusActive  = "ACTIVE"
	StatusOffline = "OFFLINE"
	StatusError   = "ERROR"
)

// Status is the listener's state as upstream reports it: ACTIVE when its
// keepalived runs a config with a virtual_server, OFFLINE when it is not
// started (no pid file) or has nothing to serve, ERROR when it died.
func (l LVSLayout) Status(id string) string {
	if _, err := os.Stat(l.PidPath(id)); err != nil {
		return StatusOffline
	}
	if !l.Running(id) {
		return StatusError
	}
	cfg, err := os.ReadFile(l.ConfigPath(id))
	if err != nil || !bytes.Contains(cfg, []byte("virtual_server")) {
		return StatusOffline
	}
	return StatusActive
}

// Running reports whether the listener's keepalived is alive.
func (l LVSLayout) Running(id string) bool {
	proc := l.ProcDir
	if proc == "" {
		proc = "/proc"
	}
	return pidfile.Alive(proc, l.PidPath(id))
}
