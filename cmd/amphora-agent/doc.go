// Command amphora-agent is the agent that runs inside an Octavia amphora.
//
//	amphora-agent [--config-file PATH]...   run the agent (the default)
//	amphora-agent --version                 print the version
//	amphora-agent <subcommand> [args]       run one of the tools (package cli)
//
// # Command line
//
// The agent and every tool share one contract (package
// cmd/amphora-agent/internal/cmdline): -h, -help or --help prints the
// usage on stdout and exits 0; --version prints "amphora-agent <version>"
// and exits 0; an unknown flag or a bad flag value prints the error and the
// usage on stderr and exits 2. Flags come before the other arguments.
//
// --config-file may be repeated, as with oslo.config: later files override
// earlier ones, and PUT /1.0/config replaces the first. A configuration
// error at start-up prints one line naming the file, section, key and
// value, and the agent exits with status 1.
//
// # Start-up
//
// serve (agent.go) is the order, on one screen: flags and configuration,
// logging, the base_path lock, the Agent and the heartbeat sender, the
// systemd watchdog, Agent.Restore, then the memory trim, the status
// socket, the heartbeat and metrics loops, the API, READY=1, signals and
// shutdown. What the restore brings back, in which order: agent.Restore.
//
// One agent per state folder: right after reading its configuration,
// before anything else (the first heartbeat, the status socket, the
// namespace, the restore), the agent takes an exclusive flock on
// <base_path>/amphora-agent.lock (package agent/dirlock) and holds it until
// it exits. A second agent on the same configuration, whatever its port,
// prints one line naming the holder's pid and exits with status 1, having
// changed nothing. base_path is the folder because everything else such an
// agent would write is named by the same configuration and comes after
// the lock: the status socket lives there, and so do, by default,
// base_cert_dir, plugged_interfaces_file, nftables_rules_file and
// haproxy_user_group_file. Two agents side by side (as in the tests) need
// their own base_path, namespace, ports and every other path.
//
// # Signals
//
// SIGHUP, SIGTERM and SIGINT are caught from the moment the configuration
// files are read, before the API and the first heartbeat. SIGTERM (or
// SIGINT) shuts down gracefully: requests in flight finish (up to 10 s),
// then the heartbeat loop and the start-up restore are stopped and joined;
// HAProxy and keepalived keep running, and the next agent adopts them.
// SIGHUP re-reads the configuration files and applies what can change
// live (agent/config's README); it waits its turn behind a mutation in
// progress, like PUT /1.0/config.
//
// # Logs
//
// Logs go to stderr and, with use_syslog = True, to the local syslog socket
// (/dev/log) with syslog_log_facility, as upstream's oslo.log does. Under
// systemd stderr is a journal stream (JOURNAL_STREAM names it): each line
// then starts with its priority as sd-daemon(3) describes ("<4>" for a
// warning, "<3>" for an error), so journalctl -u amphora-agent -p warning
// finds the warnings. With use_syslog (the controller always sets it) the
// records go to syslog only, since /dev/log is the journal's socket there
// and stderr would store every line a second time; journald forwards them
// to rsyslog with their facility (LOG_LOCAL1 from the controller), where
// log offloading picks them up. When the syslog socket cannot be reached
// the agent says so and logs to stderr alone. debug = True turns on debug
// logging, including one line per request.
//
// # Scheduler
//
// The agent runs its goroutines on one OS thread at a time (GOMAXPROCS 1)
// unless the environment sets GOMAXPROCS; the start-up log line
// "scheduler" shows the setting. Why: setProcs.
package main
