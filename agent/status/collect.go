package status

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/config"
	"github.com/amphora-agent/amphora-agent/agent/journalfwd"
	"github.com/amphora-agent/amphora-agent/agent/pidfile"
	"github.com/amphora-agent/amphora-agent/agent/procwatch"
	"github.com/amphora-agent/amphora-agent/haproxy"
	"github.com/amphora-agent/amphora-agent/haproxy/stats"
	"github.com/amphora-agent/amphora-agent/keepalived"
	"github.com/amphora-agent/amphora-agent/netns"
)

// SocketName is the status socket's file in base_path.
const SocketName = "status.sock"

// SocketPath is where the running agent answers status requests.
func SocketPath(cfg *config.Config) string { return filepath.Join(cfg.BasePath, SocketName) }

// Link is one interface of the data-plane namespace.
type Link struct {
	Name  string
	MAC   string
	Addrs []string // without prefix length
}

// System is what the collector reads beyond plain files. Every method
// only reads.
type System struct {
	ProcDir string
	// HAProxy sends one command to a HAProxy CLI socket (the stats socket
	// or the master socket); nil is the real one.
	HAProxy func(ctx context.Context, socket, cmd string) ([]byte, error)
	// Links lists the namespace's interfaces; an error wrapping
	// fs.ErrNotExist means there is no such namespace. nil is netlink.
	Links func(namespace string) ([]Link, error)
	// BootTime turns /proc start times into wall-clock times; nil reads
	// /proc/stat.
	BootTime func() (time.Time, error)
	// Journal reports whether a journal listens (systemd), to which the
	// agent forwards the daemons' output; nil asks journalfwd.
	Journal func() bool
}

func (s *System) defaults() {
	if s.ProcDir == "" {
		s.ProcDir = "/proc"
	}
	if s.HAProxy == nil {
		s.HAProxy = stats.Command
	}
	if s.Links == nil {
		s.Links = namespaceLinks
	}
	if s.BootTime == nil {
		s.BootTime = func() (time.Time, error) { return bootTime(s.ProcDir) }
	}
	if s.Journal == nil {
		s.Journal = journalfwd.Available
	}
}

// Collect builds the report from the files, the sockets and /proc, for
// configuration cfg; version is this binary's. The live parts are left
// empty (see Merge).
func Collect(ctx context.Context, cfg *config.Config, configFiles []string, version string, sys System) Report {
	sys.defaults()
	r := Report{
		Schema: Schema,
		Agent: Agent{
			State:  AgentUnknown,
			Socket: SocketPath(cfg), Version: version, ConfigFiles: configFiles,
			APIAddress: cfg.ListenAddress(), Topology: cfg.Topology,
			Namespace: cfg.Namespace, BasePath: cfg.BasePath,
		},
		LoadBalancers: []LoadBalancer{},
		LVSListeners:  []LVSListener{},
		Heartbeat: Heartbeat{
			Destinations: nonNil(cfg.ControllerIPPortList),
			IntervalSec:  cfg.HeartbeatInterval.Seconds(),
		},
		Unknown: []string{},
	}
	c := collector{sys: sys, r: &r, journal: sys.Journal()}
	links, nsErr := sys.Links(cfg.Namespace)
	c.network(cfg, links, nsErr)
	c.loadBalancers(ctx, haproxy.Layout{Base: cfg.BasePath, ProcDir: sys.ProcDir})
	c.vrrp(keepalived.VRRPLayout{Base: cfg.BasePath}, links)
	c.lvs(keepalived.LVSLayout{Base: cfg.BasePath, ProcDir: sys.ProcDir})
	return r
}

type collector struct {
	sys     System
	r       *Report
	journal bool
}

func (c *collector) unknown(what string) { c.r.Unknown = append(c.r.Unknown, what) }

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// process fills the part every daemon shares: desired state, pid (only
// when the pid file's process is this daemon: ours checks its command
// line), start time, output file and, under systemd, its journal
// identifiers.
func (c *collector) process(statePath, pidPath, logPath string, journal []string, ours func([]string) bool) Process {
	p := Process{Desired: "unknown", Log: logPath, Journal: []string{}}
	if c.journal {
		p.Journal = append(p.Journal, journal...)
	}
	if running, recorded, err := procwatch.ReadDesired(statePath); err == nil && recorded {
		p.Desired = map[bool]string{true: "running", false: "stopped"}[running]
	}
	pid, err := pidfile.Read(pidPath)
	if err != nil {
		return p
	}
	args, err := procwatch.Cmdline(c.sys.ProcDir, pid)
	if err != nil || !ours(args) {
		return p
	}
	p.Running, p.Pid = true, pid
	p.StartedAt = c.startTime(pid)
	return p
}

func (c *collector) loadBalancers(ctx context.Context, l haproxy.Layout) {
	ids, err := l.LoadBalancers()
	if err != nil {
		c.unknown("load balancers: " + err.Error())
	}
	for _, lb := range ids {
		p := c.process(l.StatePath(lb), l.PidPath(lb), l.LogPath(lb), []string{l.JournalIdentifier(lb)}, func(args []string) bool {
			return l.Runs(lb, args)
		})
		out := LoadBalancer{ID: lb, Process: p, Workers: []int{}, Listeners: []Listener{}}
		if p.Running {
			qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			if ans, err := c.sys.HAProxy(qctx, l.MasterSocketPath(lb), "show proc; quit"); err == nil {
				if proc, err := stats.ParseShowProc(ans); err == nil {
					out.Workers = nonNil(proc.Workers)
				}
			} else {
				c.unknown("workers of " + lb + ": " + err.Error())
			}
			sock := l.SocketPath(lb)
			if sum, err := l.Summary(lb); err == nil && sum.StatsSocket != "" {
				sock = sum.StatsSocket
			}
			if ans, err := c.sys.HAProxy(qctx, sock, "show stat -1 1 -1"); err == nil {
				rows, _ := stats.ParseStat(ans)
				for _, row := range rows {
					if row.SvName() == stats.Frontend {
						out.Listeners = append(out.Listeners, Listener{ID: row.PxName(), Status: row.Status()})
					}
				}
			} else {
				c.unknown("listeners of " + lb + ": " + err.Error())
			}
			cancel()
		}
		if st, err := os.Stat(l.FailedPath(lb)); err == nil {
			out.FailedConfig = &FailedConfig{Path: l.FailedPath(lb), At: st.ModTime().UTC()}
		}
		c.r.LoadBalancers = append(c.r.LoadBalancers, out)
	}
}

func (c *collector) vrrp(l keepalived.VRRPLayout, links []Link) {
	cfg, err := os.ReadFile(l.ConfigPath())
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			c.unknown("keepalived: " + err.Error())
		}
		return
	}
	f := l.Files()
	p := c.process(f.State, f.Pid, f.Log, f.Journal, f.Runs)
	v := &VRRP{Process: p, VIPs: []string{}, ConfiguredVIPs: []string{}}
	held := map[string]bool{}
	for _, ln := range links {
		for _, a := range ln.Addrs {
			held[a] = true
		}
	}
	for _, a := range keepalived.VRRPVIPs(cfg) {
		v.ConfiguredVIPs = append(v.ConfiguredVIPs, a.String())
		if held[a.String()] {
			v.VIPs = append(v.VIPs, a.String())
		}
	}
	if p.Running {
		v.Role = keepalived.Role(f.Log)
		if v.Role == "" {
			c.unknown("VRRP role: keepalived has not logged one in " + f.Log)
		}
	}
	c.r.VRRP = v
}

func (c *collector) lvs(l keepalived.LVSLayout) {
	ids, err := l.Listeners()
	if err != nil {
		c.unknown("LVS listeners: " + err.Error())
	}
	for _, id := range ids {
		f := l.Files(id)
		c.r.LVSListeners = append(c.r.LVSListeners, LVSListener{ID: id,
			Process: c.process(f.State, f.Pid, f.Log, f.Journal, f.Runs), Status: l.Status(id)})
	}
}

func (c *collector) network(cfg *config.Config, links []Link, nsErr error) {
	n := Network{Namespace: cfg.Namespace, Interfaces: []Interface{}}
	switch {
	case nsErr == nil:
		n.Present = true
	case errors.Is(nsErr, fs.ErrNotExist):
	default:
		c.unknown("namespace " + cfg.Namespace + ": " + nsErr.Error())
	}
	plugged, err := netns.ReadPlugged(cfg.PluggedInterfacesFile)
	if err != nil {
		c.unknown("plugged interfaces: " + err.Error())
	}
	for _, p := range plugged {
		i := Interface{Name: p.Name, MAC: p.MAC.String(), Addresses: []string{}}
		for _, ln := range links {
			if ln.Name == p.Name && strings.EqualFold(ln.MAC, i.MAC) {
				i.Present = true
				i.Addresses = nonNil(ln.Addrs)
			}
		}
		n.Interfaces = append(n.Interfaces, i)
	}
	c.r.Network = n
}

// startTime is when pid started, from field 22 of /proc/<pid>/stat (clock
// ticks after boot; USER_HZ is 100 on every Linux the agent runs on).
func (c *collector) startTime(pid int) time.Time {
	data, err := os.ReadFile(filepath.Join(c.sys.ProcDir, strconv.Itoa(pid), "stat"))
	if err != nil {
		return time.Time{}
	}
	// The command name may hold spaces; fields start after its ")".
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return time.Time{}
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 {
		return time.Time{}
	}
	ticks, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return time.Time{}
	}
	boot, err := c.sys.BootTime()
	if err != nil {
		return time.Time{}
	}
	return boot.Add(time.Duration(ticks) * 10 * time.Millisecond).UTC()
}

func bootTime(procDir string) (time.Time, error) {
	data, err := os.ReadFile(filepath.Join(procDir, "stat"))
	if err != nil {
		return time.Time{}, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, err
			}
			return time.Unix(s, 0), nil
		}
	}
	return time.Time{}, errors.New("no btime in /proc/stat")
}
