package haproxy

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/amphora-agent/amphora-agent/agent/fsutil"
	"github.com/amphora-agent/amphora-agent/agent/pidfile"
	"github.com/amphora-agent/amphora-agent/agent/procwatch"
)

// Layout names the files of every load balancer under base_path, as
// upstream lays them out (the controller's configs and the image rely on
// these paths).
type Layout struct {
	Base    string
	ProcDir string // "/proc"; tests point it elsewhere
	// Reserved returns the names of the entries under Base that the agent
	// keeps for other things (VRRP, LVS, certificates, records), each with
	// what it holds. Such a name is never a load balancer id. Nil: none.
	Reserved func() map[string]string
}

func (l Layout) Dir(lb string) string        { return filepath.Join(l.Base, lb) }
func (l Layout) ConfigPath(lb string) string { return filepath.Join(l.Base, lb, "haproxy.cfg") }
func (l Layout) PidPath(lb string) string    { return filepath.Join(l.Base, lb, lb+".pid") }
func (l Layout) SocketPath(lb string) string { return filepath.Join(l.Base, lb+".sock") }

// MasterSocketPath is the master CLI socket of the LB's HAProxy.
func (l Layout) MasterSocketPath(lb string) string { return filepath.Join(l.Dir(lb), "master.sock") }

// Runs tells whether args, a process's command line, is that of load
// balancer lb's HAProxy (master or worker): its master socket and config.
// Supervision adopts by it and status recognizes the process by it.
func (l Layout) Runs(lb string, args []string) bool {
	sock, cfg := l.MasterSocketPath(lb), l.ConfigPath(lb)
	return procwatch.ArgAfter(args, "-S", func(v string) bool { return v == sock || strings.HasPrefix(v, sock+",") }) &&
		procwatch.ArgAfter(args, "-f", func(v string) bool { return v == cfg })
}

// LogPath collects the master's stdout and stderr: its alerts are what a
// failed start or reload answers with.
func (l Layout) LogPath(lb string) string { return filepath.Join(l.Dir(lb), "haproxy.log") }

// JournalIdentifier names the LB's HAProxy output in the journal
// (journalctl -t), after upstream's unit for it.
func (l Layout) JournalIdentifier(lb string) string { return "haproxy-" + lb }

// StatePath is the agent's record of the LB (peer name, desired state).
func (l Layout) StatePath(lb string) string { return filepath.Join(l.Dir(lb), "agent-state.json") }

// StagedPath is an upload being validated.
func (l Layout) StagedPath(lb string) string { return l.ConfigPath(lb) + ".new" }

// FailedPath keeps the last config that was refused or failed at run time.
func (l Layout) FailedPath(lb string) string { return l.ConfigPath(lb) + ".new-failed" }

// LastGoodPath holds the config that last kept HAProxy up: what the agent
// puts back when a new config fails at run time.
func (l Layout) LastGoodPath(lb string) string { return l.ConfigPath(lb) + ".last-good" }

// ServersStatePath is where server states are saved before a reload
// (the controller's configs load it with server-state-file).
func (l Layout) ServersStatePath(lb string) string { return filepath.Join(l.Dir(lb), "servers-state") }

// CheckID refuses an id that is not one safe path element, or that names
// one of the agent's own entries under Base: upstream would write the
// upload into, or delete, VRRP's or the certificates' folder.
func (l Layout) CheckID(lb string) error {
	if err := ValidateID("load balancer id", lb); err != nil {
		return err
	}
	if l.Reserved == nil {
		return nil
	}
	if what, ok := l.Reserved()[lb]; ok {
		return fmt.Errorf("load balancer id %q is reserved: %s holds %s", lb, l.Dir(lb), what)
	}
	return nil
}

// Known reports whether lb's folder is one the agent made for a load
// balancer: it holds the agent's record, a config, or an upload being
// validated or refused. Only such a folder is ever removed.
func (l Layout) Known(lb string) bool {
	if l.CheckID(lb) != nil {
		return false
	}
	for _, p := range []string{l.ConfigPath(lb), l.StatePath(lb), l.StagedPath(lb), l.FailedPath(lb)} {
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
			return true
		}
	}
	return false
}

// LoadBalancers lists the ids that have a stored config, sorted.
func (l Layout) LoadBalancers() ([]string, error) {
	entries, err := fsutil.ReadDirOrEmpty(l.Base)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if !e.IsDir() || l.CheckID(e.Name()) != nil {
			continue
		}
		if _, err := os.Stat(l.ConfigPath(e.Name())); err == nil {
			ids = append(ids, e.Name())
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// RunsConfig reports whether the LB's pid file names a live process
// running the LB's config (-f): a HAProxy serving it whether or not the
// agent supervises it, such as one that upstream's systemd unit started
// before the agent replaced the Python one in place. A recycled pid
// running something else is not.
func (l Layout) RunsConfig(lb string) bool {
	pid, err := pidfile.Read(l.PidPath(lb))
	if err != nil {
		return false
	}
	args, err := procwatch.Cmdline(l.procDir(), pid)
	cfg := l.ConfigPath(lb)
	return err == nil && procwatch.ArgAfter(args, "-f", func(v string) bool { return v == cfg })
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
