package keepalived

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strings"

	"github.com/amphora-agent/amphora-agent/keepalived/ipvs"
)

// Member statuses of LVS pools, as the health manager reads them
// (agent/health/README.md, "UDP and SCTP listeners").
const (
	MemberUp         = "UP"
	MemberDown       = "DOWN"
	MemberDrain      = "DRAIN"
	MemberMaint      = "MAINT"
	MemberNoCheck    = "no check"
	MemberRestarting = "RESTARTING"
	PoolUp           = "UP"
	PoolDown         = "DOWN"
)

// LVSConfig is what the controller's keepalived file for one listener
// says about itself in its machine-readable comments and blocks.
type LVSConfig struct {
	Disabled bool   // "# Listener <id> is disabled"
	Protocol string // UDP or SCTP, from `protocol` (empty when no virtual server)
	// VIPs are the first address line of each virtual_server_group, with
	// the listener's port (upstream reads only the first).
	VIPs          []netip.AddrPort
	PoolID        string // "# Configuration for Pool <id>"; empty for none or a disabled pool
	HealthMonitor bool   // a MISC_CHECK, HTTP_GET or TCP_CHECK anywhere
	Members       []LVSMember
}

// LVSMember is one member: Addr is invalid for a disabled member.
type LVSMember struct {
	ID       string
	Addr     netip.AddrPort
	Disabled bool
}

var (
	uuidRE       = `[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`
	configForRE  = regexp.MustCompile(`#\s*Configuration\s+for\s+(\w+)\s+(` + uuidRE + `)`)
	disabledRE   = regexp.MustCompile(`#\s*(\w+)\s+(` + uuidRE + `)\s+is\s+disabled`)
	checkerRE    = regexp.MustCompile(`\b(MISC_CHECK|HTTP_GET|TCP_CHECK)\b`)
	realServerRE = regexp.MustCompile(`^\s*real_server\s+(\S+)\s+(\d{1,5})\b`)
	protocolRE   = regexp.MustCompile(`^\s*protocol\s+(\w+)`)
)

// ParseLVSConfig reads a listener's keepalived config as upstream's
// heartbeat code does, line by line: a member's comment names the
// real_server line that follows it.
func ParseLVSConfig(cfg []byte) LVSConfig {
	var c LVSConfig
	var pendingMember string
	inGroup, groupFirst := false, false
	var groupAddrs []netip.AddrPort
	for _, line := range strings.Split(string(cfg), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "virtual_server_group "):
			inGroup, groupFirst = true, true
			continue
		case inGroup && strings.HasPrefix(trimmed, "}"):
			inGroup = false
			continue
		case inGroup:
			if f := strings.Fields(trimmed); groupFirst && len(f) == 2 {
				if ap, err := netip.ParseAddrPort(joinHostPort(f[0], f[1])); err == nil {
					groupAddrs = append(groupAddrs, ap)
				}
				groupFirst = false
			}
			continue
		}
		if m := disabledRE.FindStringSubmatch(trimmed); m != nil {
			switch m[1] {
			case "Listener":
				c.Disabled = true
			case "Member":
				c.Members = append(c.Members, LVSMember{ID: m[2], Disabled: true})
			}
			continue
		}
		if m := configForRE.FindStringSubmatch(trimmed); m != nil {
			switch m[1] {
			case "Pool":
				if c.PoolID == "" {
					c.PoolID = m[2]
				}
			case "Member":
				pendingMember = m[2]
			}
			continue
		}
		if m := realServerRE.FindStringSubmatch(line); m != nil {
			if ap, err := netip.ParseAddrPort(joinHostPort(m[1], m[2])); err == nil && pendingMember != "" {
				c.Members = append(c.Members, LVSMember{ID: pendingMember, Addr: ap})
			}
			pendingMember = ""
			continue
		}
		if m := protocolRE.FindStringSubmatch(line); m != nil && c.Protocol == "" {
			c.Protocol = strings.ToUpper(m[1])
		}
	}
	c.VIPs = groupAddrs
	c.HealthMonitor = checkerRE.Match(cfg)
	return c
}

func joinHostPort(host, port string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

// LVSListenerState is one running LVS listener as the kernel serves it:
// the heartbeat's listener and pool entries, and the counters a metrics
// exporter reads.
type LVSListenerState struct {
	ID string
	// Found: a virtual service of the listener is in the kernel table
	// (without one, zeros are reported, as upstream).
	Found bool
	// Stats and ActiveConns are summed over the listener's virtual
	// services in the kernel (one per VIP address family).
	Stats       ipvs.Stats
	ActiveConns uint64
	// Services are the listener's virtual services as the kernel has
	// them, each with its own counters and real servers.
	Services []ipvs.Service
	Pool     *LVSPoolState // nil: the heartbeat carries no pool entry
}

// LVSPoolState is a listener's pool.
type LVSPoolState struct {
	ID      string
	Status  string // UP or DOWN
	Members []LVSMemberState
}

// LVSMemberState is a member: its heartbeat status and, when the kernel
// has it as a real server, its counters.
type LVSMemberState struct {
	ID          string
	Addr        netip.AddrPort // invalid for a disabled member
	Status      string
	InKernel    bool
	Weight      int
	ActiveConns uint64
	InActConns  uint64
	Stats       ipvs.Stats
}

// LVSStates reads every running LVS listener that is not disabled and
// what the kernel's IPVS table (read once, and only when a listener has
// a virtual server) says about it, as agent/health/README.md lays out:
// the heartbeat's statuses, and the counters of each virtual service and
// real server keyed by listener, pool and member ids (for metrics).
// A listener whose files cannot be read is left out and named in the
// error; the others are still returned.
func (l LVSLayout) LVSStates(ctx context.Context, r ipvs.Reader) ([]LVSListenerState, error) {
	ids, err := l.Listeners()
	if err != nil {
		return nil, err
	}
	type listener struct {
		id         string
		cfg        LVSConfig
		restarting bool
	}
	var todo []listener
	var errs []error
	needTable := false
	for _, id := range ids {
		if !l.Running(id) {
			continue
		}
		data, err := os.ReadFile(l.ConfigPath(id))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cfg := ParseLVSConfig(data)
		if cfg.Disabled {
			continue
		}
		needTable = needTable || len(cfg.VIPs) > 0
		todo = append(todo, listener{id: id, cfg: cfg, restarting: l.restarting(id)})
	}
	var table ipvs.Table
	tableOK := false
	if needTable && r != nil {
		if table, err = r.Read(ctx); err != nil {
			errs = append(errs, err)
		} else {
			tableOK = true
		}
	}
	states := make([]LVSListenerState, 0, len(todo))
	for _, t := range todo {
		s := LVSListenerState{ID: t.id}
		if len(t.cfg.VIPs) > 0 && tableOK {
			s = listenerState(t.id, t.cfg, table, t.restarting)
		}
		states = append(states, s)
	}
	return states, errors.Join(errs...)
}

// restarting is upstream's "uploaded but not restarted yet": the config
// is newer than the checker's pid file, which keepalived alone writes when
// its checker starts (a missing one: the checker has not started yet).
func (l LVSLayout) restarting(id string) bool {
	f := l.Files(id)
	cfg, err := os.Stat(f.Config)
	if err != nil {
		return false
	}
	check, err := os.Stat(f.CheckPid)
	if err != nil {
		return true
	}
	return cfg.ModTime().After(check.ModTime())
}

// listenerState matches a listener's config against the kernel table.
func listenerState(id string, cfg LVSConfig, table ipvs.Table, restarting bool) LVSListenerState {
	s := LVSListenerState{ID: id}
	dests := map[netip.AddrPort]ipvs.Dest{}
	for _, vip := range cfg.VIPs {
		svc := lookup(table, cfg.Protocol, vip)
		if svc == nil {
			continue
		}
		s.Found = true
		s.Services = append(s.Services, *svc)
		s.Stats.Add(svc.Stats)
		for _, d := range svc.Dests {
			s.ActiveConns += d.ActiveConn
			dests[d.Addr] = d
		}
	}
	if cfg.PoolID == "" {
		return s
	}
	p := &LVSPoolState{ID: cfg.PoolID, Status: PoolUp}
	s.Pool = p
	present := MemberNoCheck
	if cfg.HealthMonitor {
		present = MemberUp
	}
	missing := MemberDown
	if restarting {
		missing = MemberRestarting
	}
	if len(dests) == 0 && cfg.HealthMonitor && len(cfg.Members) > 0 {
		p.Status = PoolDown
	}
	for _, m := range cfg.Members {
		ms := LVSMemberState{ID: m.ID, Addr: m.Addr}
		d, in := dests[m.Addr]
		switch {
		case m.Disabled:
			ms.Status = MemberMaint
		case !in && len(dests) == 0 && !cfg.HealthMonitor:
			// No real server at all and nothing checks them.
			ms.Status = MemberNoCheck
		case !in:
			ms.Status = missing
		case d.Weight == 0:
			ms.Status = MemberDrain
		default:
			ms.Status = present
		}
		if in && !m.Disabled {
			ms.InKernel, ms.Weight, ms.ActiveConns, ms.InActConns, ms.Stats = true, d.Weight, d.ActiveConn, d.InActConn, d.Stats
		}
		p.Members = append(p.Members, ms)
	}
	return s
}

// lookup finds a VIP's virtual service; without a protocol in the config
// (never rendered so) UDP, then SCTP.
func lookup(t ipvs.Table, proto string, vip netip.AddrPort) *ipvs.Service {
	if proto != "" {
		return t.Service(ipvs.Key{Protocol: proto, Addr: vip})
	}
	for _, p := range []string{"UDP", "SCTP"} {
		if s := t.Service(ipvs.Key{Protocol: p, Addr: vip}); s != nil {
			return s
		}
	}
	return nil
}

// String is for logs.
func (s LVSListenerState) String() string {
	return fmt.Sprintf("%s found=%v %+v", s.ID, s.Found, s.Stats)
}
