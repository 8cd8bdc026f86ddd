package status

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// WriteText renders r as one screen for an operator. Times are shown
// relative to r.GeneratedAt, so the same report always renders the same.
func WriteText(w io.Writer, r Report) error {
	t := &text{now: r.GeneratedAt, notLive: "agent not running"}
	if r.Agent.State == AgentUnknown {
		t.notLive = "the agent could not be asked"
	}
	t.agent(r.Agent)
	for _, lb := range r.LoadBalancers {
		t.loadBalancer(lb)
	}
	if r.VRRP != nil {
		t.vrrp(*r.VRRP)
	} else {
		t.head("keepalived (VRRP): not configured")
	}
	for _, l := range r.LVSListeners {
		t.head("LVS listener %s: %s, %s", l.ID, l.Status, t.state(l.Process))
		t.process(l.Process)
	}
	t.network(r.Network)
	t.heartbeat(r.Heartbeat, r.Agent.Running)
	if len(r.Unknown) > 0 {
		t.head("not known")
		for _, u := range r.Unknown {
			fmt.Fprintf(&t.b, "  - %s\n", u)
		}
	}
	if r.Health.State != "" {
		t.head("health: %s", strings.ToUpper(strings.ReplaceAll(r.Health.State, "_", " ")))
		for _, p := range r.Health.Problems {
			fmt.Fprintf(&t.b, "  - %s\n", p)
		}
	}
	_, err := io.WriteString(w, t.b.String())
	return err
}

type text struct {
	now time.Time
	b   strings.Builder
	// notLive says why what only the agent knows is missing.
	notLive string
}

func (t *text) head(format string, args ...any) {
	if t.b.Len() > 0 {
		t.b.WriteString("\n")
	}
	fmt.Fprintf(&t.b, format+"\n", args...)
}

func (t *text) line(label, format string, args ...any) {
	fmt.Fprintf(&t.b, "  %-14s%s\n", label, fmt.Sprintf(format, args...))
}

// ago renders a time with its distance from the report's time.
func (t *text) ago(at time.Time) string {
	if at.IsZero() {
		return "never"
	}
	return at.UTC().Format(time.RFC3339) + " (" + t.dur(t.now.Sub(at)) + " ago)"
}

func (t *text) dur(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	return d.Round(time.Second).String()
}

func (t *text) agent(a Agent) {
	switch {
	case a.Running:
		ready := "ready"
		if !a.Ready {
			ready = "restoring (not ready yet)"
		}
		t.head("amphora-agent %s: running, pid %d, up %s, %s", a.Version, a.Pid, t.dur(t.now.Sub(a.StartedAt)), ready)
	case a.State == AgentUnknown:
		t.head("amphora-agent %s: STATE UNKNOWN, the agent could not be asked on %s: %s; the rest is read from its files",
			a.Version, a.Socket, a.StateReason)
	default:
		t.head("amphora-agent %s: NOT RUNNING (no answer on %s); the rest is read from its files", a.Version, a.Socket)
	}
	t.line("config files", "%s", strings.Join(a.ConfigFiles, ", "))
	t.line("API", "%s (mutual TLS)", a.APIAddress)
	t.line("topology", "%s", a.Topology)
	t.line("state", "%s, namespace %s", a.BasePath, a.Namespace)
	if a.Log != "" {
		t.line("log", "%s", a.Log)
	}
}

func (t *text) state(p Process) string {
	s := "stopped"
	if p.Running {
		s = "running, pid " + strconv.Itoa(p.Pid)
		if !p.StartedAt.IsZero() {
			s += ", up " + t.dur(t.now.Sub(p.StartedAt))
		}
	}
	if p.Desired != "unknown" && (p.Desired == "running") != p.Running {
		return strings.ToUpper(s) + " (should be " + p.Desired + ")"
	}
	return s + " (desired " + p.Desired + ")"
}

func (t *text) process(p Process) {
	switch {
	case p.Respawns == nil:
		t.line("respawns", "not known (%s)", t.notLive)
	case p.LastExit == "":
		t.line("respawns", "%d", *p.Respawns)
	default:
		t.line("respawns", "%d; last exit: %s at %s", *p.Respawns, p.LastExit, t.ago(p.LastExitAt))
	}
	if len(p.Journal) == 0 {
		t.line("log", "%s", p.Log)
		return
	}
	t.line("log", "the journal: journalctl -t %s", strings.Join(p.Journal, " -t "))
	t.line("", "and %s", p.Log)
}

func (t *text) loadBalancer(lb LoadBalancer) {
	t.head("load balancer %s: %s", lb.ID, t.state(lb.Process))
	if lb.Running {
		t.line("workers", "%s", ints(lb.Workers))
		if len(lb.Listeners) == 0 {
			t.line("listeners", "none")
		}
		for i, l := range lb.Listeners {
			label := ""
			if i == 0 {
				label = "listeners"
			}
			t.line(label, "%s %s", l.ID, l.Status)
		}
	}
	t.process(lb.Process)
	if lb.LastReload != nil {
		t.line("last reload", "%s %s", t.ago(lb.LastReload.At), lb.LastReload.Result)
	} else {
		t.line("last reload", "none since the agent started")
	}
	if f := lb.FailedConfig; f != nil {
		why := f.Why
		if why == "" {
			why = "reason not known (refused before the agent started, or the agent is not running)"
		}
		t.line("failed config", "%s, %s: %s", f.Path, t.ago(f.At), gist(why))
	}
}

func (t *text) vrrp(v VRRP) {
	role := v.Role
	if role == "" {
		role = "not known"
	}
	if !v.Running {
		role = "none (not running)"
	}
	t.head("keepalived (VRRP): %s, role %s", t.state(v.Process), role)
	held := "none"
	if len(v.VIPs) > 0 {
		held = strings.Join(v.VIPs, " ")
	}
	t.line("VIPs held", "%s (configured: %s)", held, strings.Join(v.ConfiguredVIPs, " "))
	t.process(v.Process)
}

func (t *text) network(n Network) {
	if !n.Present {
		t.head("network: namespace %s MISSING", n.Namespace)
	} else {
		t.head("network: namespace %s present", n.Namespace)
	}
	if len(n.Interfaces) == 0 {
		t.line("plugged", "none")
	}
	for _, i := range n.Interfaces {
		if i.Present {
			t.line(i.Name, "%s present %s", i.MAC, strings.Join(i.Addresses, " "))
		} else {
			t.line(i.Name, "%s MISSING", i.MAC)
		}
	}
}

func (t *text) heartbeat(h Heartbeat, live bool) {
	dests := "no destination (controller_ip_port_list is empty)"
	if len(h.Destinations) > 0 {
		dests = strings.Join(h.Destinations, ", ")
	}
	t.head("heartbeats: every %ss to %s", strconv.FormatFloat(h.IntervalSec, 'f', -1, 64), dests)
	if !live {
		t.line("last sent", "not known (%s)", t.notLive)
		return
	}
	if h.LastSendAt.IsZero() {
		t.line("last sent", "never")
	} else {
		t.line("last sent", "%s to %s, seq %d", t.ago(h.LastSendAt), h.Destination, h.Seq)
	}
	if h.LastResult != "" && h.LastResult != "sent" {
		t.line("last cycle", "%s", h.LastResult)
	}
	if h.Suppressed != "" {
		t.line("SUPPRESSED", "%s", h.Suppressed)
	}
}

func ints(v []int) string {
	if len(v) == 0 {
		return "none"
	}
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, " ")
}

// gist is the line of a refusal that says most: HAProxy's first alert,
// else the first line.
func gist(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for _, l := range lines {
		if i := strings.Index(l, "[ALERT]"); i >= 0 {
			return l[i:]
		}
	}
	return lines[0]
}
