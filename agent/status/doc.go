// Package status is what amphora-agent status shows: one report of the
// agent, its load balancers, keepalived, the network and the heartbeats,
// as text (one screen) or as a JSON document (--json). Upstream's
// systemctl status haproxy-<lb> and journalctl -u octavia-keepalived show
// nothing on this agent's amphorae, since it supervises HAProxy and
// keepalived itself; this report, and the journal identifiers it names,
// take their place.
//
// # What it shows
//
// For the agent: version, pid and uptime, config files, API address,
// topology, namespace, whether the start-up restore is over (ready), and
// where its log goes. For each load balancer: desired and actual state,
// master pid and uptime, workers, listeners (frontends) with HAProxy's
// status, respawns since the agent started and how the last process ended,
// the last reload and its result, and a refused config kept as
// haproxy.cfg.new-failed with when and why. For the VRRP keepalived:
// desired and actual state, pid, the VRRP role (MASTER, BACKUP or FAULT)
// keepalived last logged, and which of the configured VIPs this amphora
// holds; the same for each UDP or SCTP listener's keepalived. For every
// daemon, where its output is (its output file, and under systemd its
// journal identifiers). The namespace and the plugged interfaces (name,
// MAC, present or missing, addresses). The heartbeats: destinations,
// interval, last send time, destination and seq, the last cycle's failure,
// and whether they are withheld and why (a stopped keepalived). A last
// section lists what could not be found out.
//
// # Where it comes from
//
// It never changes anything. Most of it is read from the agent's files
// (desired states, pid files, interface records), /proc (a pid counts only
// when its command line is the daemon's), HAProxy's master and stats
// sockets (show proc, show stat) and a netlink dump of the namespace, so it
// works while the agent is down: it then says so, and that restarts,
// reloads, readiness and heartbeats are not known.
//
// What only the running agent knows it asks on a unix socket,
// <base_path>/status.sock (Serve, Fetch). The socket has mode 0600 from the
// moment it has its name (bound under a temporary name, chmod'ed, renamed),
// and a peer that is not root (or the agent's own user) is refused by its
// credentials. The agent answers each connection with one JSON document
// and closes it; it reads nothing from the client. Nothing is added to the
// network and the mutual-TLS API is not used. A failed accept (the agent
// out of file descriptors) is tried again after 5 ms, doubling up to 1 s
// (package agent/acceptretry): the socket stays in place, and a status
// that connected meanwhile is answered once descriptors are free again.
//
// # Health and exit status
//
// The exit status says whether everything the agent wants is running, for
// a script or a monitoring check, with the codes of LSB init scripts and
// systemctl status. The screen's last section, "health:", says the same
// with one line per problem, and so do health.state (ok, degraded,
// not_running, unknown) and health.problems in the JSON document (Assess):
//
//	0  OK           the agent answered, every load balancer and keepalived
//	                (VRRP or LVS) it wants running runs, and the namespace
//	                is there
//	1  DEGRADED     the agent runs, but a load balancer's HAProxy or a
//	                keepalived it wants running is not (dead, or between two
//	                starts of a respawn), the namespace is missing, or the
//	                agent accepted the connection and did not answer within
//	                5 s (stuck)
//	2  (none)       bad command line (usage on stderr)
//	3  NOT RUNNING  no socket, or nothing listens on it (left by a killed
//	                agent)
//	4  UNKNOWN      the agent could not be asked: permission denied (not
//	                root: the socket is root's, 0600) or an unreadable
//	                answer; or the configuration cannot be read, or the
//	                report cannot be written
//
// A daemon stopped on purpose (desired stopped, as after PUT
// /1.0/vrrp/stop) or never recorded is not a problem. A stuck agent is 1,
// not 4: something holds its socket, so it runs, and does not do its job.
// The headline says what became of asking the agent: "running, pid ...",
// "NOT RUNNING", or "STATE UNKNOWN, the agent could not be asked on ...:
// <why>". In the JSON document agent.state is running, not_running or
// unknown, and agent.state_reason says why when it is not running.
// amphora-agent status --help prints the codes.
//
// # The JSON document
//
// It has "schema": 1 (Schema); within a schema fields are only added. Top
// level: generated_at, agent, load_balancers, vrrp (null without a VRRP
// config), lvs_listeners, network, heartbeat, unknown, health (state,
// problems). Each daemon has desired (running, stopped, unknown), running,
// pid, started_at, respawns (null without the agent), last_exit,
// last_exit_at, log (its output file) and journal (the identifiers of its
// output in the journal, for journalctl -t; empty where no journal
// listens). agent.goroutines is the running agent's goroutine count (make
// soak watches it for leaks). Times are RFC 3339 UTC.
package status
