package status

// Assess sums r up in r.Health; call it once the report is complete
// (after Merge or NotLive). An agent that answers, with every load
// balancer and keepalived it wants running and its namespace present, is
// OK. An agent that holds its socket but does not answer is degraded, not
// unknown: it runs, and is not doing its job. Only an agent this caller
// may not ask (or whose answer it cannot read) leaves the health unknown.
func Assess(r *Report) {
	problems := []string{}
	for _, lb := range r.LoadBalancers {
		if p, down := wantedDown(lb.Process); down {
			problems = append(problems, "load balancer "+lb.ID+": "+p)
		}
	}
	if r.VRRP != nil {
		if p, down := wantedDown(r.VRRP.Process); down {
			problems = append(problems, "keepalived (VRRP): "+p)
		}
	}
	for _, l := range r.LVSListeners {
		if p, down := wantedDown(l.Process); down {
			problems = append(problems, "keepalived of LVS listener "+l.ID+": "+p)
		}
	}
	if !r.Network.Present {
		problems = append(problems, "network namespace "+r.Network.Namespace+" is missing")
	}
	state := HealthOK
	switch {
	case r.Agent.State == AgentNotRunning:
		state = HealthNotRunning
		problems = append([]string{"the agent is not running (" + r.Agent.StateReason + ")"}, problems...)
	case r.Agent.State == AgentUnknown && r.Agent.StateReason == reasonNoAnswer:
		state = HealthDegraded
		problems = append([]string{"the agent does not answer on " + r.Agent.Socket + " (" + reasonNoAnswer + ")"}, problems...)
	case r.Agent.State == AgentUnknown:
		state = HealthUnknown
		problems = append([]string{"the agent could not be asked (" + r.Agent.StateReason + ")"}, problems...)
	case len(problems) > 0:
		state = HealthDegraded
	}
	r.Health = Health{State: state, Problems: problems}
}

// wantedDown reports a daemon the agent wants running that is not: dead,
// or between two starts of a respawn.
func wantedDown(p Process) (string, bool) {
	if p.Desired != "running" || p.Running {
		return "", false
	}
	what := "should be running, is not"
	if p.LastExit != "" {
		what += " (last exit: " + p.LastExit + ")"
	}
	return what, true
}
