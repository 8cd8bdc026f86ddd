package agent

import (
	"context"
	"os"
	"slices"
	"sort"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/sysinfo"
)

// Info is the body of GET /1.0/info; field order follows upstream.
type Info struct {
	Hostname          string `json:"hostname"`
	HAProxyVersion    string `json:"haproxy_version"`
	APIVersion        string `json:"api_version"`
	KeepalivedVersion string `json:"keepalived_version"`
	IPVSAdmVersion    string `json:"ipvsadm_version"`
}

// Details is the body of GET /1.0/details; field order follows upstream.
type Details struct {
	Hostname            string                      `json:"hostname"`
	HAProxyVersion      string                      `json:"haproxy_version"`
	APIVersion          string                      `json:"api_version"`
	Networks            map[string]sysinfo.NetStats `json:"networks"`
	Active              bool                        `json:"active"`
	HAProxyCount        int                         `json:"haproxy_count"`
	CPUCount            int                         `json:"cpu_count"`
	CPU                 sysinfo.CPU                 `json:"cpu"`
	Memory              sysinfo.Memory              `json:"memory"`
	Disk                sysinfo.Disk                `json:"disk"`
	Load                []string                    `json:"load"`
	ActiveTunedProfiles string                      `json:"active_tuned_profiles"`
	// Topology is always SINGLE upstream, even on ACTIVE_STANDBY amphorae;
	// the controller does not read it.
	Topology                string         `json:"topology"`
	TopologyStatus          string         `json:"topology_status"`
	Listeners               []string       `json:"listeners"`
	Packages                map[string]any `json:"packages"`
	LVSListenerProcessCount int            `json:"lvs_listener_process_count"`
	KeepalivedVersion       string         `json:"keepalived_version"`
	IPVSAdmVersion          string         `json:"ipvsadm_version"`
}

// Info answers GET /1.0/info.
func (a *Agent) Info(ctx context.Context) (Info, error) {
	v, err := a.packageVersions(ctx)
	if err != nil {
		return Info{}, fault.Internalf("looking up package versions: %w", err)
	}
	hostname, err := os.Hostname()
	if err != nil {
		return Info{}, fault.Internalf("hostname: %w", err)
	}
	return Info{
		Hostname:          hostname,
		HAProxyVersion:    v.HAProxy,
		APIVersion:        APIVersion,
		KeepalivedVersion: v.Keepalived,
		IPVSAdmVersion:    v.IPVSAdm,
	}, nil
}

// Details answers GET /1.0/details from the live system and the stored
// load balancer state.
func (a *Agent) Details(ctx context.Context) (Details, error) {
	v, err := a.packageVersions(ctx)
	if err != nil {
		return Details{}, fault.Internalf("looking up package versions: %w", err)
	}
	host, err := a.host.Host()
	if err != nil {
		return Details{}, fault.Internalf("reading host facts: %w", err)
	}
	cfg := a.Config()
	nets, err := sysinfo.Networks(cfg.Namespace)
	if err != nil {
		// Interface counters are informational; a namespace that cannot be
		// read must not fail the controller's listener update flow.
		a.log.Warn("reading interface counters", zap.String("namespace", cfg.Namespace), zap.Error(err))
		nets = map[string]sysinfo.NetStats{}
	}
	count, listeners, err := a.haproxyListeners()
	if err != nil {
		return Details{}, fault.Internalf("listing load balancers: %w", err)
	}
	lvsIDs, lvsRunning, err := a.lvsListeners()
	if err != nil {
		return Details{}, fault.Internalf("listing LVS listeners: %w", err)
	}
	if len(lvsIDs) > 0 {
		listeners = append(listeners, lvsIDs...)
		sort.Strings(listeners)
		listeners = slices.Compact(listeners)
	}
	return Details{
		Hostname:                host.Hostname,
		HAProxyVersion:          v.HAProxy,
		APIVersion:              APIVersion,
		Networks:                nets,
		Active:                  true,
		HAProxyCount:            count,
		CPUCount:                host.CPUCount,
		CPU:                     host.CPU,
		Memory:                  host.Memory,
		Disk:                    host.Disk,
		Load:                    host.Load,
		ActiveTunedProfiles:     host.TunedProfiles,
		Topology:                "SINGLE",
		TopologyStatus:          "OK",
		Listeners:               listeners,
		Packages:                map[string]any{},
		LVSListenerProcessCount: lvsRunning,
		KeepalivedVersion:       v.Keepalived,
		IPVSAdmVersion:          v.IPVSAdm,
	}, nil
}

// haproxyListeners counts running load balancers and lists the frontends of
// all stored configs, sorted.
func (a *Agent) haproxyListeners() (running int, listeners []string, err error) {
	layout := a.haproxyLayout()
	lbs, err := layout.LoadBalancers()
	if err != nil {
		return 0, nil, err
	}
	listeners = []string{}
	for _, lb := range lbs {
		if layout.Running(lb) {
			running++
		}
		sum, err := layout.Summary(lb)
		if err != nil {
			return 0, nil, err
		}
		for _, f := range sum.Frontends {
			listeners = append(listeners, f.Name)
		}
	}
	sort.Strings(listeners)
	return running, listeners, nil
}

func (a *Agent) lvsListeners() (ids []string, running int, err error) {
	layout := a.lvsLayout()
	ids, err = layout.Listeners()
	for _, id := range ids {
		if layout.Running(id) {
			running++
		}
	}
	return ids, running, err
}

// ListenerStatus is one entry of GET /1.0/listeners.
type ListenerStatus struct {
	Status string `json:"status"`
	UUID   string `json:"uuid"`
	Type   string `json:"type"`
}

// Listeners answers GET /1.0/listeners: every HAProxy frontend of every
// stored load balancer (always ACTIVE, as upstream), then every LVS
// listener with its process state.
func (a *Agent) Listeners(ctx context.Context) ([]ListenerStatus, error) {
	out := []ListenerStatus{}
	layout := a.haproxyLayout()
	lbs, err := layout.LoadBalancers()
	if err != nil {
		return nil, fault.Internalf("listing load balancers: %w", err)
	}
	for _, lb := range lbs {
		sum, err := layout.Summary(lb)
		if err != nil {
			return nil, fault.Internalf("reading load balancer %s: %w", lb, err)
		}
		for _, f := range sum.Frontends {
			out = append(out, ListenerStatus{Status: "ACTIVE", UUID: f.Name, Type: f.Mode})
		}
	}
	lvs := a.lvsLayout()
	ids, err := lvs.Listeners()
	if err != nil {
		return nil, fault.Internalf("listing LVS listeners: %w", err)
	}
	for _, id := range ids {
		// UDP and SCTP listeners alike are reported as UDP upstream.
		out = append(out, ListenerStatus{Status: lvs.Status(id), UUID: id, Type: "UDP"})
	}
	return out, nil
}
