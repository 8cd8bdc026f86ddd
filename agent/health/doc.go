// Package health builds and sends the heartbeats the Octavia health
// manager (HM) reads: the version 3 status message, its envelope (zlib and
// a hex HMAC-SHA256), the counter deltas persisted across restarts, and the
// UDP sender loop. What a heartbeat holds and what the health manager does
// with it, the contract this package keeps, is in its README.md.
//
// # A cycle
//
// A timer (shared instants, package agent/tick) starts each cycle: the
// keepalived gate; one show stat -1 -1 -1 on the stats socket of each load
// balancer whose master runs, all load balancers read at once; one reading
// of the kernel's IPVS table for the UDP and SCTP listeners (package
// keepalived/ipvs); the message with counter deltas; the counters file,
// rewritten only when a counter moved; zlib and the HMAC; one UDP datagram
// to the next destination.
//
// A heartbeat never leaves out a load balancer whose HAProxy answers,
// however slowly: the health manager takes a missing listener for a fault
// (it marks the listener ERROR and does not refresh the amphora's health),
// and upstream's agent blocks until HAProxy answers. So:
//
//   - The cycle waits for each read up to half the interval (2 s at most).
//     A load balancer still being read then is reported from its last good
//     reading while the read goes on, and the next cycle joins that read
//     instead of starting another. One with no reading yet, just after
//     start-up, is waited for.
//   - A read may take the interval, within 5 to 10 s, far inside the health
//     manager's heartbeat_timeout (60 s by default). A read that hits that
//     limit is asked once more on a new connection for up to 2 s: an agent
//     starved of CPU sees every timer fire at once, before HAProxy had the
//     chance to answer.
//   - A HAProxy that has not answered by then (stopped or wedged) is
//     unresponsive: its load balancer is left out until it answers again,
//     and is waited for only the half interval, so it holds back neither
//     the datagram nor the other load balancers.
//   - Whether a load balancer runs, and whether the agent is busy
//     starting, reloading or restoring it, is the supervisor's answer
//     (haproxy.Supervisor.State), asked every cycle without waiting for the
//     operation: a stopped load balancer leaves the heartbeat at once, and
//     no pid file is read, so a master rewriting its own during a reload
//     is never taken for a stop.
//   - A read that races a reload (the socket refused or closed without an
//     answer) is retried briefly, then answered from the last good
//     reading: for up to MaxBusyStandIn while the agent is busy with the
//     load balancer (as for UDP and SCTP listeners), once otherwise.
//   - A reloading master that cannot take the listening sockets over from
//     its worker within 1 s (a worker still starting during back-to-back
//     reloads, or short of CPU) binds a new stats socket over the path, and
//     a read queued on the old one would wait for the stalled worker. So
//     until an answer begins, the stats client looks at the socket path
//     every 50 ms and, once it names another socket, sends its command
//     again on a new connection.
//
// # Cost
//
// A steady load balancer's heartbeat costs little CPU and allocates almost
// nothing; measured figures are in docs/results.md.
//
//   - Reading: the stats socket is read in rounds a few milliseconds
//     apart through raw system calls (package
//     haproxy/stats/internal/rawsock), so a long answer costs a handful of
//     thread wake-ups instead of one per HAProxy buffer.
//   - Memory: each load balancer's answer buffer is reused from cycle to
//     cycle (the names a reading keeps are copied out of it, and shared
//     with the previous reading), and so is the array its members are cut
//     from: a reading equal to the last one shares its members, any other
//     copies them out once. An answer whose header line is the last one's
//     shares its column map, and the counters file is rendered only after
//     a counter moved.
//   - Parsing: only the fields the message needs are cut out of the CSV (a
//     server row's proxy, server, status and weight): the commas of 8 bytes
//     are found at once, and a word whose commas all come before the next
//     wanted field is passed over by counting them. The JSON is written
//     without reflection, byte for byte what encoding/json writes.
//   - Compressing: zlib is github.com/klauspost/compress at level 1
//     (ZlibLevel), which fits more members in a datagram than upstream's
//     level 9 for a fraction of the CPU; levels 2 and 3 compress under 1%
//     better for a little more. The pools part of the JSON (member
//     statuses, most of its bytes) is its own deflate run after a sync
//     flush: its compressed bytes and Adler-32 are reused while it is
//     unchanged, and while the pools read are the last heartbeat's it is
//     not even built again. The second run loses only back-references into
//     the first (a few listener ids), well under 1% of the size. Only a
//     pools part of 32 KiB or more goes through a kept level-1 writer
//     (about 600 KiB of tables); smaller parts use the stateless
//     compressor, so an agent with few members keeps no tables.
package health
