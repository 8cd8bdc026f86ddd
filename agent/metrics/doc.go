// Package metrics is the metrics endpoint of PROMETHEUS listeners
// (controllers from 11.0.0, Zed). The controller's HAProxy config binds
// HAProxy's exporter on 127.0.0.1:9101 inside the namespace and sends
// tenants' scrapes to 127.0.0.1:9102 there, where upstream's image runs a
// separate prometheus-proxy service; the agent serves that address itself,
// so the image needs no such service (and must not run one: both want the
// same port; the agent logs a warning and retries every second while the
// port is taken). Each page is HAProxy's translated (package promex) plus
// the UDP and SCTP listeners' IPVS counters (lvs.go).
//
// # A scrape
//
// Every hop is inside the network_namespace (amphora-haproxy):
//
//  1. GET http://<VIP>:<port>/metrics reaches the listener's HAProxy
//     frontend, whose default_backend prometheus-exporter-internal sends it
//     to 127.0.0.1:9102 (the controller's template renders both).
//  2. The agent answers on 127.0.0.1:9102 (prometheus_proxy_address). For
//     each scrape it reads HAProxy's built-in exporter at
//     http://127.0.0.1:9101/metrics (prometheus_exporter_address; the
//     template's prometheus-exporter-internal-endpoint frontend),
//     connecting from inside the namespace: one HTTP/1.1 GET with
//     Connection: close on a fresh connection, bounded by the scrape (a
//     scraper that leaves ends it). net/http's client is not linked: its
//     transport would add half a megabyte to the agent's resident size for
//     this one loopback request.
//  3. It streams the translation back, line by line, so memory use does
//     not grow with the number of members.
//
// # What is served
//
// On any path, as upstream does:
//
//   - GET (and HEAD): 200 with Content-Type: text/plain; version=0.0.4,
//     Cache-Control: no-cache and Connection: close. The body starts with
//     octavia_loadbalancer_cpu (the 1-minute load average over the online
//     CPUs, in percent) and octavia_loadbalancer_memory (percent of memory
//     not available, from MemAvailable), one decimal each, as upstream
//     computes them with psutil; then HAProxy's page translated as Octavia
//     11.0.0's prometheus-proxy (the controller version the interop tier
//     runs) translates it (package promex).
//   - 502 (empty body, Connection: close) when HAProxy's exporter cannot
//     be reached or does not answer 200: no load balancer with a
//     PROMETHEUS listener runs, or HAProxy is down; also when it sends no
//     answer's head within 5 s, or a head or a first line over 64 KiB.
//   - 503 when MaxScrapes scrapes are in flight and none ends within 1 s;
//     501 for other methods; 500 if /proc cannot be read.
//   - A page that fails part-way (HAProxy dies mid-answer) ends the
//     chunked answer without its last chunk, so the scraper sees an error
//     instead of a short page that parses. Upstream reads the whole page
//     first and answers without chunking; the headers are the same.
//
// UDP and SCTP listeners, which upstream's proxy leaves out, are on the
// page too, under the same families and labels (listener; pool as
// <pool>:<listener>, the shape of HAProxy's backend names; member), from
// the kernel's IPVS table read once per scrape while such a listener runs
// (LVSSource, joined to HAProxy's families through promex.Source):
// octavia_listener_status (UP while its virtual service is in the kernel),
// _current_sessions (active connections), _sessions_total and
// _connections_total (connections scheduled), _bytes_in_total and
// _bytes_out_total; octavia_pool_status, _current_sessions,
// _sessions_total, _connection_attempts_total, the two byte counters and
// _active_members (real servers with weight); octavia_member_status (the
// heartbeat's status as HAProxy's states: no check counts as UP, a drained
// member as DRAIN, a disabled one as MAINT) and, for members the kernel
// has, _current_sessions, _sessions_total, _connection_attempts_total, the
// byte counters and _weight. A PROMETHEUS listener is always HAProxy's, so
// the page exists whenever these listeners can be scraped.
//
// The endpoint is there from start-up: the agent looks for the namespace
// every second, listens inside it as soon as it exists (the first plug may
// create it after the agent starts), and when the namespace is deleted or
// created again under the same name it closes the old socket and listens
// in the new one. Upstream's proxy stays in the namespace it first
// entered.
//
// # Bounds
//
// Any client of a PROMETHEUS listener can send scrapes through the VIP, so
// what they may cost the agent is bounded (the system tier's
// TestHostileScrapeFlood and TestHostileExporterAnswer measure it; figures
// in docs/results.md):
//
//   - Threads. A socket belongs to the namespace of the thread that makes
//     it. When the endpoint opens, the agent moves one OS thread into the
//     namespace for good (netns.Dialer); that thread makes every scrape's
//     socket to the exporter, and the connect and all reading happen on the
//     agent's ordinary threads. A scrape costs no thread of its own (Go
//     never gives back a thread it made: moving a thread per connect grew
//     the agent by a thread per concurrent scrape, for good). The thread
//     goes with the endpoint when the namespace goes or is recreated.
//   - Scrapes in flight. At most MaxScrapes (8) scrapes read HAProxy's
//     page at once (a Prometheus server scrapes a target once per
//     interval). One more waits up to 1 s for its turn, then gets 503
//     (Retry-After: 1, Connection: close, empty body).
//   - Connections. The endpoint holds at most MaxConns (512) connections;
//     more wait in the kernel's accept queue, costing the agent no
//     descriptor or memory.
//   - A silent exporter. HAProxy's exporter must accept the connection and
//     send its answer's head within 5 s (HAProxy's template cuts the
//     tenant's scrape at 5 s anyway, timeout server); otherwise 502. The
//     body may take up to 30 s.
//   - A bad answer. The exporter's head (status line and headers) may take
//     64 KiB, and a line of its page 64 KiB. HAProxy's heads are about 110
//     bytes and its lines under 200 (the pages in promex/testdata); it
//     writes each line within one of its buffers (tune.bufsize, 16 KiB by
//     default, which Octavia's template does not change). A head over the
//     cap is a 502; so is a line over the cap while nothing of the page has
//     gone out (the status leaves with the first 64 KiB of the
//     translation); later, the answer is cut as for a page that fails
//     part-way. The agent stops reading at the cap, so neither costs
//     memory.
//   - Memory. Freed memory goes back to the kernel after a burst of
//     scrapes, as after a burst of API requests (package agent/memtrim).
package metrics
