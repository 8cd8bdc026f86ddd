package haproxy

import (
	"os"
	"path/filepath"
	"sort"

	"github.com/amphora-agent/amphora-agent/agent/pidfile"
)

// Layout names the files of every load balancer under base_path, as
// upstream lays them out (the controller's configs and the image rely on
// these paths).
type Layout struct {
	Base    string
	ProcDir string // "/proc"; tests point it elsewhere
}

func (l Layout) Dir(lb string) string        { return filepath.Join(l.Base, lb) }
func (l Layout) ConfigPath(lb string) string { return filepath.Join(l.Base, lb, "haproxy.cfg") }
func (l Layout) PidPath(lb string) string    { return filepath.Join(l.Base, lb, lb+".pid") }
func (l Layout) SocketPath(lb string) string { return filepath.Join(l.Base, lb+".sock") }

// MasterSocketPath is the master CLI socket of the LB's HAProxy.
func (l Layout) MasterSocketPath(lb string) string { return filepath.Join(l.Dir(lb), "master.sock") }

// LogPath collects the master's stdout and stderr: its alerts are what a
// failed start or reload answers with.
func (l Layout) LogPath(lb string) string { return filepath.Join(l.Dir(lb), "haproxy.log") }

// StatePath is the agent's record of the LB (peer name, desired state).
func (l Layout) StatePath(lb string) string { return filepath.Join(l.Dir(lb), "agent-state.json") }

// StagedPath is an upload being validated.
func (l Layout) StagedPath(lb string) string { return l.ConfigPath(lb) + ".new" }

// FailedPath keeps the last config that was refused or failed at run time.
func (l Layout) FailedPath(lb string) string { return l.ConfigPath(lb) + ".new-failed" }

// LastGoodPath holds the config that last kept HAProxy up: what the agent
// puts back when a new config fails at run time.
func (l Layout) LastGoodPath(lb string) string { return l.ConfigPath(lb) + ".last-good" }

// RunningPath holds a copy of the config HAProxy loaded last: uploads
// replace haproxy.cfg before the reload, so the running config must be
// kept apart to become the last good one.
func (l Layout) RunningPath(lb string) string { return l.ConfigPath(lb) + ".running" }

// ServersStatePath is where server states are saved before a reload
// (the controller's configs load it with server-state-file).
func (l Layout) ServersStatePath(lb string) string { return filepath.Join(l.Dir(lb), "servers-state") }

// LoadBalancers lists the ids that have a stored config, sorted.
func (l Layout) LoadBalancers() ([]string, error) {
	entries, err := os.ReadDir(l.Base)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if _, err := os.Stat(l.ConfigPath(e.Name())); err == nil {
			ids = append(ids, e.Name())
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// Running reports whether the LB's HAProxy (its pid file's process) is alive.
func (l Layout) Running(lb string) bool {
	return pidfile.Alive(l.procDir(), l.PidPath(lb))
}

// Summary parses the LB's stored config.
func (l Layout) Summary(lb string) (Summary, error) {
	data, err := os.ReadFile(l.ConfigPath(lb))
	if err != nil {
		return Summary{}, err
	}
	return Parse(data), nil
}

func (l Layout) procDir() string {
	if l.ProcDir == "" {
		return "/proc"
	}
	return l.ProcDir
}
