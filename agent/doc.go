// Package agent is the amphora agent itself: it owns the live
// configuration, the one lock that serializes mutations, the operations
// behind each endpoint of the API, and the start-up restore. It knows
// nothing of HTTP: package agent/api calls it, and it calls the domain
// packages (haproxy, keepalived, netns, certs), which supervise daemons
// through agent/procwatch and run short commands through agent/procgroup.
//
// # The mutation lock
//
// The Agent owns it: each of its exported methods that changes state takes
// it inside (the API layer never holds it), and waits for it as long as the
// caller's context lives, so a request queues as long as its client keeps
// the connection open, as upstream's single worker queues requests. Reads
// take no lock. Once a mutation holds the lock it runs to completion under
// its own deadline: a controller that hangs up, or a budget that runs out,
// never causes a rollback, a kill or a half-done start, stop, reload or
// delete. Work detached from the request that asked for it (a start's
// readiness wait, a config check) still lasts as long as that client waits
// (package agent/caller); a restore or a respawn has no client.
//
// # Start-up
//
// Restore owns the order in which the amphora comes back after a reboot
// or an agent restart: the namespace and the plugged ports before it
// returns, so the API and the first heartbeat find them; then, in the
// background while the API answers, the load balancers, the UDP and SCTP
// listeners and last the VRRP keepalived, each under the mutation lock so
// that controller requests wait. A failed step is logged and the next one
// still runs: nothing in the restore ends the agent, since the controller
// needs the API to repair or fail over. An agent without root skips the
// namespace with one warning and serves the API, configuration and
// heartbeats.
//
// # Files
//
// Every file the agent writes is written atomically (package
// agent/fsutil); secrets and configs are 0600. Uploads are validated
// before they touch the file in force: an invalid PUT /1.0/config or PUT
// /1.0/certificate is answered 400 and leaves the old file in force.
package agent
