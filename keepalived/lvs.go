package keepalived

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/amphora-agent/amphora-agent/agent/fsutil"
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
func (l LVSLayout) PidPath(id string) string { return l.file(id, ".pid") }

func (l LVSLayout) file(id, ext string) string { return filepath.Join(l.Dir(), lvsPrefix+id+ext) }

// CheckDir holds the health-check scripts the controller's configs call.
func (l LVSLayout) CheckDir() string { return filepath.Join(l.Dir(), "check") }

// UDPCheckPath is the UDP-CONNECT health monitor's MISC_CHECK script.
func (l LVSLayout) UDPCheckPath() string { return filepath.Join(l.CheckDir(), "udp_check.sh") }

func (l LVSLayout) stagedPath(id string) string { return l.ConfigPath(id) + ".new" }
func (l LVSLayout) failedPath(id string) string { return l.ConfigPath(id) + ".new-failed" }

// Files are a listener's keepalived files. None ends in ".conf" (a
// listener) or, but for the main pid file, in ".pid" with no other dot
// (what the VRRP check counts as a listener's keepalived).
func (l LVSLayout) Files(id string) Files {
	return Files{
		Dir:      l.Dir(),
		Config:   l.ConfigPath(id),
		Pid:      l.PidPath(id),
		VRRPPid:  l.file(id, ".vrrp.pid"),
		CheckPid: l.file(id, ".check.pid"),
		Log:      l.file(id, ".log"),
		State:    l.file(id, ".state.json"),
		Journal:  []string{"octavia-keepalivedlvs-" + id, "Keepalived", "Keepalived_healthcheckers"},
	}
}

// owned is every file the agent or keepalived makes for listener id.
func (l LVSLayout) owned(id string) []string {
	f := l.Files(id)
	return []string{f.Config, f.Pid, f.VRRPPid, f.CheckPid, f.Log, f.Log + ".1", f.State,
		l.stagedPath(id), l.failedPath(id)}
}

// Listeners lists LVS listener ids: files named octavia-keepalivedlvs-<id>.conf.
func (l LVSLayout) Listeners() ([]string, error) {
	entries, err := fsutil.ReadDirOrEmpty(l.Dir())
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

// VIPs are the addresses a listener's config serves (§3.6): the first
// token of each line of every virtual_server_group block, which starts at
// column 0, up to its closing brace.
func VIPs(cfg []byte) []netip.Addr {
	var addrs []netip.Addr
	in := false
	for _, line := range strings.Split(string(cfg), "\n") {
		switch {
		case strings.HasPrefix(line, "virtual_server_group "):
			in = true
		case !in:
		case strings.HasPrefix(strings.TrimSpace(line), "}"):
			in = false
		default:
			if f := strings.Fields(line); len(f) > 0 {
				if a, err := netip.ParseAddr(f[0]); err == nil {
					addrs = append(addrs, a)
				}
			}
		}
	}
	return addrs
}
