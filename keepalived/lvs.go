// Package keepalived runs keepalived: the VRRP instance of ACTIVE_STANDBY
// amphorae and one LVS instance per UDP/SCTP listener.
package keepalived

import (
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

// Running reports whether the listener's keepalived is alive.
func (l LVSLayout) Running(id string) bool {
	proc := l.ProcDir
	if proc == "" {
		proc = "/proc"
	}
	return pidfile.Alive(proc, l.PidPath(id))
}
