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
