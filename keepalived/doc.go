// Package keepalived runs keepalived: the VRRP instance of ACTIVE_STANDBY
// amphorae and one LVS instance per UDP or SCTP listener. daemon.go is
// keepalived's own part of supervision, shared by both kinds, over a
// procwatch.Daemon: the command line with private pid files, reload by
// SIGHUP, and "ready" when the pid file names the new process.
// vrrp_store.go and vrrp.go hold the VRRP store (VRRPLayout, the
// validated upload, check_script.sh) and kind; lvs.go, lvs_store.go and
// lvs_listeners.go the listeners' layout, store and kind.
//
// # Uploads
//
// PUT /1.0/vrrp/upload and a listener's upload check the controller's
// config with keepalived -t inside the network_namespace (where its
// interfaces are) before it replaces the stored one. Only a config whose
// braces keepalived finds unpaired (a body cut short, which Octavia's
// templates cannot produce) is refused: 400 with keepalived's output, the
// config kept as <name>.new-failed, the stored one left in force. Any other
// fault keepalived -t finds is logged as a warning with its output and the
// config stored, as upstream stores every config unchecked: keepalived -t
// finds fault with configs the controller renders, in parts keepalived
// skips while it runs the rest (a UDP pool without members or with every
// weight 0, an IPv6 persistence_granularity, the gateway of a VIP host
// route), and its exit status 6 (script-security warnings, drawn by every
// config with a check script) hides every other fault. keepalived -t runs
// as long as the controller waits; one that cannot be run, or is cut short
// because the controller went away, is logged and the config stored.
//
// A config that includes another file is refused (400 naming the line)
// before keepalived sees it: include and its variants (includer,
// includea, ...), also behind @host conditions, ~SEQ(...) or in a $NAME=
// definition. Octavia's templates never render one, and none is harmless:
// keepalived -t names every line of an included file it does not
// understand, so include /etc/shadow would put the first words of any file
// root can read into the answer and the agent's log, and the agent's own
// folders hold the listeners' and its own private keys. An include the
// text does not show (assembled from parameter definitions, ${A}${B}
// /etc/shadow) is caught in keepalived's output: a line about another file
// than the uploaded one refuses the config, and only keepalived's lines
// about the upload itself are answered and logged, with a count of those
// left out.
//
// The interop tier's TestInteropKeepalivedShapes proves no controller
// config is refused: every shape of VRRP and LVS config Octavia 11.0.0's
// own templaters render is accepted by the real keepalived -t, while
// configs cut short are refused.
//
// # VRRP
//
// The upload stores <base_path>/vrrp/octavia-keepalived.conf (0644),
// writes vrrp/check_script.sh (it runs every file of vrrp/check_scripts/
// with bash and exits with the sum of their exit codes), refreshes
// vrrp/check_scripts/haproxy_check_script.sh and records VRRP as enabled.
// It does not start keepalived.
//
// As with HAProxy, the agent supervises keepalived itself instead of a
// systemd unit:
//
//   - keepalived --dont-fork --log-console
//     --log-facility=<administrative_log_facility> -f <conf> -p
//     vrrp/octavia-keepalived.pid -r ...vrrp.pid -c ...check.pid runs inside
//     the namespace in its own session (see package haproxy), with stdout
//     and stderr in vrrp/octavia-keepalived.log, rotated and capped like
//     HAProxy's. With --log-console its log lines are in that file too;
//     they also go to syslog, and so to the journal under systemd, where
//     the rest of the file is forwarded as octavia-keepalived. The child
//     pid files live under vrrp/ so that no other keepalived on the host
//     collides with it. The pid file holds the main pid, which the
//     heartbeat sender's keepalived gate checks.
//   - start answers once the pid file holds the new process and it stayed
//     up briefly (without room for the pid file nothing is started, as for
//     HAProxy). A start the controller asks for waits for the pid file as
//     upstream's systemctl start of its Type=forking unit does: up to 90 s
//     while the controller waits, and 500 with keepalived's output if it
//     dies meanwhile. Past that, or at a restore or respawn after 20 s, one
//     alive without its pid file is answered for and followed, as a slow
//     HAProxy start; a reload asked for meanwhile is sent once it is ready
//     (a SIGHUP before keepalived set up its signals would end it).
//   - start of a running keepalived is a reload (SIGHUP), as upstream;
//     reload of a stopped one starts it; stop sends SIGTERM (keepalived
//     gives up its VIPs) and waits.
//   - a keepalived that dies is restarted with the same backoff as HAProxy
//     (upstream leaves it dead, and the amphora is failed over once its
//     heartbeats stop); each death and restart is logged, and a failed
//     start is retried.
//   - the desired state (vrrp/agent-state.json: running from the first
//     upload, stopped from stop until the next start or reload) survives
//     restarts: at start-up, after the network, the load balancers and the
//     listeners, the agent adopts a keepalived still running from its
//     previous process (pid file and command line) or starts one that
//     should run. Stopping the agent leaves keepalived running.
//
// The VRRP role status reports comes from keepalived's own "(instance)
// Entering MASTER STATE" lines in its output file (the last one of the
// current run): reading them disturbs nothing, whereas asking keepalived
// for a state dump (SIGUSR1, SIGRTMIN+2) makes it write files under /tmp.
//
// # UDP and SCTP listeners
//
// UDP and SCTP listeners are not HAProxy's: each is one keepalived, keyed
// by the listener id, that programs IPVS virtual servers inside the
// namespace (a virtual service per VIP and port, NAT to the members) and
// health-checks the members from inside it: UDP-CONNECT with
// lvs/check/udp_check.sh (netcat), SCTP with amphora-health-checker (the
// binary's SCTP probe, package keepalived/sctpcheck), HTTP and TCP with
// keepalived's own checkers. A member that fails is removed from IPVS. The
// kernel forwards the datagrams; the interface scripts' masquerade rules
// give them the amphora's address on the member network, so replies come
// back through it. In ACTIVE_STANDBY every amphora runs the listeners;
// only the VRRP MASTER holds the VIP.
//
//   - PUT /1.0/listeners/{amp}/{id}/udp_listener stores
//     <base_path>/lvs/octavia-keepalivedlvs-<id>.conf after keepalived -t
//     (as above), installs lvs/check/udp_check.sh and records the listener
//     as wanted. Nothing starts. In ACTIVE_STANDBY it adds
//     vrrp/check_scripts/lvs_udp_check.sh, which fails while a listener's
//     keepalived is dead, so a dead listener counts against the MASTER.
//   - PUT /1.0/loadbalancer/{id}/start|stop|reload and DELETE
//     /1.0/listeners/{id} reach the listener when no load balancer has that
//     id. reload is keepalived's own reload (SIGHUP) when keepalived
//     --version, read once at the first reload, says 2.2.2 or later, and a
//     restart, as upstream, otherwise or when the version cannot be read.
//     Upstream restarts because a reload did not restore members to their
//     checked state; keepalived 2.0.14 fixed that (its commit f6e353da: a
//     reload recounts each member's failed checks and adds it to or removes
//     it from IPVS to match), and 2.2.2 made a changed weight reach IPVS
//     (commit 4127af50). A reload leaves the IPVS table and the flows
//     through it in place; a restart empties it until the new keepalived
//     has filled it and its checks have passed. The answer says reloaded or
//     restarted. Delete stops it and removes only the files made for it.
//   - A controller's change to any listener of a load balancer reloads
//     every UDP and SCTP listener.
//   - Each keepalived runs under the same supervision as HAProxy and the
//     VRRP keepalived: restarted with backoff when it dies, a stop
//     remembered, adopted by a restarted agent, and brought back at
//     start-up after the network and the load balancers, before the VRRP
//     keepalived. Each has its own .pid, .vrrp.pid and .check.pid next to
//     its config; keepalived alone writes the checker's at a start, and
//     after a SIGHUP the agent sets its date to that of the config it
//     loaded, so "config newer than .check.pid" still means "uploaded but
//     not loaded yet" to the heartbeat.
//   - GET /1.0/listeners and /1.0/details report them (typed UDP, SCTP ones
//     too, as upstream).
//
// What the heartbeat reports for them, and how a listener is stood in for
// while the agent restarts its keepalived: agent/health/README.md. The
// kernel's table is read by package keepalived/ipvs; LVSLayout.LVSStates
// gives the same reading with each virtual service's and real server's
// counters, keyed by listener, pool and member ids, for the metrics page.
//
// No sctp kernel module is needed on the amphora: IPVS's SCTP support is
// part of Debian's ip_vs, the masquerade's SCTP NAT is netfilter's, and the
// checker uses raw sockets.
package keepalived
