// Package sdnotify tells systemd (Type=notify, sd_notify(3)) how the
// agent's start-up and shutdown go, and feeds its watchdog while the
// agent's loops are live. It speaks through go-systemd's daemon package;
// without NOTIFY_SOCKET (outside systemd, as under make run) it sends
// nothing.
//
// What the unit (cmd/amphora-agent/packaging/systemd/amphora-agent.service)
// sees:
//
//   - STATUS= while the agent starts: "restoring network namespace",
//     "restoring load balancers", "restoring UDP and SCTP listeners",
//     "restoring keepalived", then for example "ready: 2 of 2 load
//     balancers running" with what failed to come back. systemctl status
//     amphora-agent shows the last one.
//   - READY=1 once the namespace and its interfaces, the load balancers,
//     the UDP and SCTP listeners and keepalived are restored and the API
//     serves. A failed restore does not hold it back: the controller needs
//     the API to repair or fail over.
//   - WATCHDOG=1 every half WatchdogSec while the API server runs and the
//     heartbeat loop has finished a cycle within heartbeat_interval plus a
//     minute. Otherwise the ping is withheld, with one error line and an
//     "unhealthy: ..." STATUS, and systemd kills the agent and starts a new
//     one, which adopts HAProxy and keepalived (KillMode=process). The
//     restore and the mutation lock are not watched: they may rightly be
//     busy for minutes, and the controller sees that through the API.
//   - STOPPING=1 on SIGTERM, with "stopping; HAProxy and keepalived keep
//     running".
package sdnotify
