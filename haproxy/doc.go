// Package haproxy runs the load balancers: the per-LB files on disk
// (Layout), the validated upload (Store), HAProxy's part of supervision
// (Supervisor, over one procwatch.Daemon per load balancer), reloads, and
// the parsing of stored configs.
//
// # Upload
//
// The controller uploads one HAProxy config per load balancer. The agent
// checks it with haproxy -c -L <peer> -f <config> -f <user/group file>
// before it replaces the stored one (<base_path>/<lb>/haproxy.cfg, 0600);
// a config HAProxy rejects is answered 400 with HAProxy's output and kept
// as haproxy.cfg.new-failed. The peer name is derived from the amphora id
// of the upload path, as the controller derives it (PeerName), and every
// HAProxy invocation carries it. If the image lacks its user/group file,
// the agent writes a default one and says so in the log.
//
// The check runs as long as the controller waits. Only HAProxy's own
// verdict is a 400; a check that cannot be run (a missing or
// non-executable haproxy_cmd) or is cut short because the controller went
// away is a 500 "Error checking haproxy configuration" with the reason, and
// keeps nothing as haproxy.cfg.new-failed.
//
// # Least privilege
//
// An agent running as root runs the check (at upload and before a reload)
// as the haproxy user and group, or nobody and nogroup where there is no
// haproxy user, with no supplementary groups: a lua-load script in an
// uploaded config, which HAProxy runs while parsing, runs unprivileged.
// The certificates stay 0600 root. For each check the agent copies this
// load balancer's certificate folder and the staged config into a folder
// under base_cert_dir (a RAM file system on an amphora, so key copies never
// reach a disk), owned by the check user, and runs the check in a mount
// namespace of its own where that folder is mounted over base_cert_dir and
// the config copy over the staged config: paths in the config and its
// crt-lists stay as the controller wrote them, and other load balancers'
// certificates are not visible. The copies are removed after the check.
//
// The check does not depend on the modes of the folders above base_path,
// base_cert_dir and the user/group file. Where one of them is closed to the
// check user (base_path under a 0700 folder, which upstream copes with
// because it checks as root), the check's mount namespace shows that folder
// as an empty tmpfs holding only the way to what the check reads: the
// config and certificate copies, the user/group file, and each file or
// folder the config names under base_path (a lua-load script, an
// errorfile, a map, the server-state file). Each is seen as it is on disk,
// so its own mode still decides whether the check user may read it;
// nothing else of the closed folder shows, and no mode on disk changes. A
// file the config names outside base_path must be reachable and readable
// by the check user.
//
// Still root, and why:
//
//   - the HAProxy master parses the config again when it starts or
//     reloads, lua-load scripts included, as upstream: it binds the
//     listeners and reads the certificates before its workers drop to the
//     config's user and group. The check only keeps a config that fails
//     validation from ever running as root;
//   - keepalived -t (VRRP and UDP/SCTP listener uploads): it only parses
//     and runs none of the config's scripts, and its verdict depends on
//     root: run as any other user, keepalived 2.2 disables every
//     track_script of a controller-rendered config (script_user root,
//     enable_script_security) as insecure and exits 5, refusing configs the
//     real, root keepalived accepts;
//   - nft, ip, interface scripts, and keepalived itself, which configure
//     the network namespace. keepalived also runs the VRRP and LVS check
//     scripts under base_path as root, as upstream: the controller's
//     configs name no script_user, so keepalived would use a
//     keepalived_script user, which the image does not have.
//
// # Load balancer ids
//
// Load balancer ids are single path elements (letters, digits, '-', '_';
// ValidateID), and never the name of something the agent keeps under
// base_path for itself: vrrp, lvs, the certificate folder when
// base_cert_dir lies inside base_path, and any other configured file or
// folder there (Layout.CheckID, with the list the agent builds from its
// layouts and configuration). An upload for such an id is answered 400
// saying so; a delete, start, stop or reload is answered as for an unknown
// id (200 for a delete, 404 otherwise) with nothing touched. A delete
// removes only a folder the agent made for a load balancer (Layout.Known),
// and only sockets at the stats socket paths.
//
// # Supervision
//
// Upstream writes a systemd unit per load balancer; the agent supervises
// HAProxy itself, so it needs no init system. HAProxy must outlive the
// agent, so the agent's unit has KillMode=process (see
// cmd/amphora-agent/packaging/README.md).
//
// Each load balancer runs one HAProxy master in master-worker mode (-Ws -S
// <base_path>/<lb>/master.sock -p <base_path>/<lb>/<lb>.pid) inside the
// network_namespace, in its own session: a process group in the agent's
// session would be orphaned when the agent exits, and the kernel then
// sends SIGHUP and SIGCONT to a stopped HAProxy or keepalived, which both
// take SIGHUP as a reload. Its stderr goes to <base_path>/<lb>/haproxy.log:
// each start moves the previous run's output to haproxy.log.1, and while it
// runs the file is held to 4 MiB, the older part going to haproxy.log.1.
// Under systemd the agent forwards those lines to the journal as
// haproxy-<lb> (package agent/journalfwd).
//
// Start. A start answers once the master lists a worker and the pid file
// names the new master (what a later agent adopts it by).
//
//   - Nothing is started without room for the pid file: HAProxy and
//     keepalived run on when they cannot write it, and such a process is
//     one no later agent finds, so a second one would be started next to
//     it. Just before launching, the agent writes and syncs a small probe
//     file in the pid file's folder; on a full disk the start fails at
//     once, answered 500 with "no space left on device", nothing runs, and
//     the retry starts HAProxy once there is room. A master whose disk
//     filled up while it started is killed, with its process group, and
//     the answer says so.
//   - A master that exits while starting (a config HAProxy cannot load, a
//     bind that fails) is answered 500 with its output at once.
//   - A start the controller asks for (and a reload that starts a stopped
//     load balancer) waits as upstream's systemctl start waits for
//     HAProxy's READY: until the master lists a worker, for up to systemd's
//     default 90 s and as long as the controller keeps the connection
//     open. It is answered 202 once HAProxy serves, never before, so the
//     load balancer stays PENDING while HAProxy loads and a failed start is
//     reported instead of ending in a failover. A start or reload asked for
//     while an earlier start is still loading waits for that start the same
//     way (the controller sends its request again after its 60 s read
//     timeout), as systemctl start joins the start job under way.
//   - When the controller goes away, or 90 s pass, with the master alive
//     and still loading, the start is slow, not failed: the agent answers
//     202, logs a warning, keeps the master and follows its start for up
//     to 3 minutes. A restore at start-up and a respawn, which nobody waits
//     on, are followed the same way after 12 s. Once ready, its config
//     starts its 10 s towards last good (below) from then; if the master
//     dies, that is logged with HAProxy's output and handled as any master
//     that dies soon after loading a new config; still not ready after 3
//     minutes, it is killed and started again with backoff (systemd's
//     TimeoutStartSec with Restart=always).
//
// Reload. A reload checks the config, saves show servers state to
// servers-state when the config has load-server-state-from-file (Octavia
// renders it for pools with a health monitor), sends SIGUSR2 and answers
// 202 as soon as the master lists a new worker generation (polled every
// 1 ms). The config that ran until now is made the last good one
// (durably) while the master reloads, before any rollback and before the
// answer. Reloads queued while one runs are served by a single follow-up
// reload.
//
//   - The check is skipped when the stored config is byte for byte the one
//     the upload checked in this process, with the same HAProxy binary
//     (path, size, inode, times), user/group file and peer name, and every
//     absolute path the config names unchanged (certificates, CA and CRL
//     files, crt-lists and the files they name, folders' entries, error
//     files); a config that loads Lua is always checked again.
//   - A master that answers its CLI 2 s after the signal with the reload
//     count from before it did not take the signal (one that lands as the
//     master finishes re-executing can be lost), and is signalled again.
//   - The new worker is watched for 300 ms after the answer: if it leaves
//     the master's list meanwhile, the last good config is put back. A
//     master that does not answer that question (asked three times, 3 s
//     each) is left alone with a warning, as only its word that the worker
//     is gone justifies a rollback.
//   - A master that is alive but has neither listed a new worker nor
//     reported a failed load after 12 s (a busy hypervisor) is not a
//     failure: upstream's reload returns once HAProxy is signalled, so the
//     agent answers 202 too, logs a warning and follows the load for up to
//     3 minutes in the background: a new worker is watched as above, a load
//     that fails is rolled back (logged, as the controller already had its
//     answer), and a master that never finishes is logged and left serving
//     its old workers.
//
// Last good config. If a new config fails at run time (a bind fails, the
// worker dies) the last good config (haproxy.cfg.last-good) is put back
// and served, the failed one is kept as haproxy.cfg.new-failed, and the
// answer is 500 with HAProxy's output, as soon as the failure shows (a
// reload's within 30 s). A config becomes the last good one after HAProxy
// stayed up on it for 10 s, or served until the next reload or a
// deliberate stop; a master that dies before that is restarted on the last
// good config, so a bad push cannot leave a crash loop behind.
//
// Respawn. A master that dies is restarted: the first respawn_count
// restarts of a crash streak at once, then after respawn_interval seconds
// (at least 1), doubling up to 30 s, for ever; a process that stays up 30 s
// ends the streak. Each restart is logged with the exit status (after five
// in a row, only every tenth). A start (or restore) that fails while the
// load balancer should run is answered 500 with HAProxy's output and then
// retried the same way, so the load balancer never stays down without
// supervision.
//
// Adoption. The desired state (agent-state.json in the load balancer's
// folder: running from the first start until stop or delete) survives
// restarts. At start-up the agent adopts every master still running from
// its previous process that the pid file names and whose command line is
// that load balancer's (-S <lb>/master.sock, -f <lb>/haproxy.cfg), however
// busy: a master too slow or stopped to answer still serves through its
// workers, and upstream never touches HAProxy when its agent restarts.
// Whether it answers show proc is asked afterwards in the background (5 s
// per question, pauses of 5 s doubling to 1 min); silence is only logged
// (a warning, an error after 3 minutes, an info line once it answers). A
// process of the load balancer that no pid file names (one still starting
// when the agent ended) is ended before a new start. Masters that should
// run but do not (after a reboot) are started, four load balancers at a
// time.
//
// Open files. When a config's global maxconn needs more open files than
// the hard limit HAProxy inherits allows, the upload is refused with the
// numbers and the setting to change (compatibility item 5 in
// docs/compatibility.md).
//
// # HAProxy and keepalived releases
//
// The agent is tested on Debian bookworm's HAProxy 2.6.12 and keepalived
// 2.2.7 and on Debian trixie's HAProxy 3.0.11 and keepalived 2.3.3; the
// captured output of each is kept as testdata (haproxy/testdata/output,
// haproxy/stats/testdata, keepalived/testdata/check, agent/sysinfo/testdata/
// versions) and read by the same tests, so none of the agent's parsers
// depends on one release. What differs, as far as the agent is concerned:
//
//   - haproxy -c on a valid config: 2.6 prints "Configuration file is
//     valid", 3.0 prints nothing (only with -V). The agent goes by the exit
//     status alone (0 valid, also with warnings; 1 invalid or missing),
//     which is the same, as are the [NOTICE]/[WARNING]/[ALERT] lines of a
//     refusal and the "Cannot raise FD limit" alert explainOutput words.
//   - show proc on the master CLI: the same table. In both the "[failed:
//     N]" count goes back to 0 after a load that succeeds, so only a count
//     above the one before the signal means the reload failed, which is
//     how the reload compares them.
//   - show stat: 3.0 has 205 columns where 2.6 has 128; the added ones
//     (per-protocol session and request counters, HTTP/3 and QUIC
//     counters) all follow those the heartbeat reads, which keep their
//     places, and columns are found by name anyway.
//   - show info: 3.0 adds seven keys (TotalWarnings, BootTime_ms,
//     CurrStreams, ...) and spells TotalSplicedBytesOut right (2.6:
//     TotalSplicdedBytesOut); the agent reads neither.
//   - A master's log through a start, a reload and a failed reload: the
//     same lines ("Loading success.", "Loading failure!"), except that 2.6
//     also reports its internal <HTTPCLIENT> proxy stopping.
//   - An HTTP health monitor with a version (and a Host): Octavia up to
//     2025.1 hides "\r\nHost:\ name" in the version word of `option
//     httpchk`, which 2.6 sends and 3.0 refuses outright, whatever
//     follows; upstream fixed its template only in 2025.2. Upload writes
//     such a line as that template does (compat.go), so Octavia 11 and 16
//     drive a 3.0 amphora; the check asks the member the same on 2.6.
//   - `option http-use-htx`, which Octavia up to 2025.1 renders for every
//     PROMETHEUS listener (Debian's Octavia 11 patches it out, its Octavia
//     16 does not): gone since HAProxy 2.5, so 2.6 and 3.0 both refuse
//     it. Upload drops it, as upstream's 2025.2 template does.
//   - haproxy -v and keepalived -v: the same banner shapes.
//   - keepalived -t: the same exit statuses (0, 5 for faults, 6 for script
//     security, which every Octavia VRRP config draws) and the same words
//     for unpaired braces and for an included file's lines; 2.3 names the
//     config file on more lines (a virtual server without real servers)
//     and words a VRRP instance on an interface it cannot use (lo)
//     otherwise.
//
// Not checked: TLS listeners (crt-list, client certificates), a peers
// section between two amphorae, Lua, load-server-state-from-file, SCTP,
// keepalived -t run as another user than root, a real VRRP failover or
// IPVS under keepalived 2.3, HAProxy releases after 3.0 (3.1 reworks the
// master process), and RHEL-family or Ubuntu packages.
package haproxy
