// Package cli holds the tools that share the agent's binary: each is a
// subcommand (amphora-agent <name>) and some are also reached through a
// symlink under upstream's name (busybox style), as image scripts and
// keepalived call them. The package also holds the --config-file flag and
// loader the agent and the tools share, and Version. Every tool keeps the
// command-line contract of package cmd/amphora-agent/internal/cmdline
// (flags before the other arguments; exit status 2 for a bad flag).
//
// # interface (amphora-interface)
//
// amphora-agent interface up|down <name|all> applies or removes the
// interface files of agent_server_network_dir inside the namespace, the
// same code the agent runs at start-up (package netns). It takes all or
// the name of an interface one of the files describes, looked up among
// those files as upstream does; anything else (eth7 without a file, or a
// path such as ../x) is refused with "could not find interface" and exit
// status 2 (upstream's), and nothing is applied. up runs every up-script
// on each call, also for a link already up.
//
// # haproxy-vrrp-check
//
// keepalived runs it, through the VRRP check script, with every load
// balancer's stats socket. The exit status is the number of sockets that
// answered nothing; a socket that cannot be queried at all fails the check
// outright.
//
// # health-checker (amphora-health-checker)
//
// amphora-agent health-checker sctp [-t SECONDS] <address> <port> is
// upstream's SCTP probe without Python, which keepalived runs for each
// member of an SCTP pool with a health monitor: an INIT sent on a raw
// socket (no sctp kernel module needed, as upstream), then an ABORT (the
// packets: package keepalived/sctpcheck). Exit status 0 when an INIT ACK
// answers, 1 for an ABORT (nothing listens) or bad arguments, 2 when
// nothing answers within -t seconds (default 3), 3 for any other answer.
// -t comes after the protocol, as upstream's argument, and takes 0 to
// 2147483647 (any health monitor timeout the controller can store); a
// negative or larger value is a bad argument (exit status 1, with a
// message). It needs CAP_NET_RAW, as keepalived's checks have.
//
// # config-drive
//
// Writes the files Nova's config drive lists, once per instance, for
// images without cloud-init (amphora-config-drive.service; what it checks
// before it writes: cmd/amphora-agent/packaging/README.md).
//
// # status
//
// Prints what the agent, its daemons, the network and the heartbeats are
// doing, and says by its exit status whether everything the agent wants
// runs (package agent/status). It also holds the status socket the running
// agent serves for it.
package cli
