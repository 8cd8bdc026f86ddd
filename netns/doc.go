// Package netns owns the load balancer's network namespace: creating it,
// moving hot-plugged NICs into it by MAC, configuring them from the
// interface files (the contract upstream's amphora-interface tool reads),
// the VIP nftables rules, looking up which interface holds an address,
// address advertisements (gratuitous ARP, unsolicited neighbour
// advertisements), starting a process inside the namespace, sockets opened
// inside it (Listen, Dial), its identity (ID, to notice it was recreated)
// and the one listing of its links for reports (ListLinks).
//
// Netlink work uses handles opened in the namespace. The few things that
// must run on a thread inside the namespace (creating it, sysctls, packet
// sockets) run on a dedicated OS thread that is thrown away afterwards, so
// no goroutine ever continues in the wrong namespace; a Dialer keeps one
// such thread, which only makes sockets, for as long as it is open.
//
// # The namespace
//
// The namespace (network_namespace, amphora-haproxy by default) is the
// agent's: at start-up it creates it when missing and brings up lo. It then
// runs sysctl --system inside it (no shell, 30 s at most; a failure or a
// refused key is a warning, not a stop), as upstream's amphora-netns unit
// does for a new namespace, so an operator's tuning in /etc/sysctl.d (and
// the rest of sysctl's search path) reaches the namespace. That runs once
// per agent start, and again only for a namespace the agent had to create
// anew. The settings the amphora needs (forwarding, IPVS, non-local bind,
// TCP backlog and timeouts, ping_group_range; NamespaceSysctls) are written
// after it, so where the operator's file sets one of them too, the agent's
// value is the one in force.
//
// # Plugging
//
// POST /1.0/plug/vip/{ip} and POST /1.0/plug/network move the hot-plugged
// NIC with the given MAC into the namespace (eth1 for the VIP, the first
// free ethN for others), write the interface file
// (agent_server_network_dir/<name>.json) and a line in
// plugged_interfaces_file, and configure addresses, routes and rules from
// that file. A failure part-way undoes what was done.
//
// plugged_interfaces_file holds one line per interface: a new port given
// the name of a NIC that Nova detached since replaces that NIC's line.
// (Upstream appends one per port ever plugged, so its file grows with every
// member network change and the start-up after a reboot waits for NICs
// long gone.)
//
// Subnet host routes are taken as Neutron stores them: a destination with
// host bits set (192.0.2.7/25, which upstream leaves to the kernel to
// refuse) is written and applied as its network (192.0.2.0/25) with a
// warning naming the field, and a route the kernel refuses (a next hop that
// is an address of the amphora, broadcast or multicast) is skipped with a
// warning, as upstream skips it, at plug, interface up and start-up alike.
// Only a destination or next hop that is no address, or not of its
// subnet's family, is refused (400): upstream's bring-up fails on those.
// What else a plug refuses, and why that is safe: compatibility item 1 in
// docs/compatibility.md.
//
// # Interface files are the source of truth
//
// At start-up, and with amphora-agent interface up|down <name|all> (the
// image's amphora-interface), NICs are moved back in by MAC and configured
// from the interface files, before any load balancer starts. A plugged NIC
// that is not back yet when the agent starts (one that enumerates late
// after a reboot) is looked for every 2 s for up to 10 minutes, with a PCI
// rescan asked for every 30 s (pci_rescan_file), and moved in and
// configured as soon as it appears, with no controller call (the agent's
// watch, in agent/network.go); a warning names the ports waited for, and
// an error those that never came.
//
// Interface files name up and down scripts: for UDP and SCTP listeners,
// the masquerade script lvs_masquerade_script names (the package's
// lvs-masquerade.sh, described in cmd/amphora-agent/packaging/README.md).
// Up-scripts run when a link comes up and down-scripts when it goes down.
// The operator's amphora-interface up runs every up-script on each call,
// also on a link already up, as upstream's has since Octavia 14.0.0 (and
// 12.0.1, 13.0.1; Octavia 11 ran them only for a link that came up), so it
// puts back masquerade rules that went missing. The agent's own restore at
// start-up runs none on a link already up, and a re-plug that changes a
// file runs only the commands that changed (a port gaining IPv6 gets its
// IPv6 rules, which Octavia before 12.0.1 never added). The script replaces
// an interface's rules, so a second run adds nothing twice.
//
// # VIP firewall rules
//
// PUT /1.0/interface/{ip}/rules writes nftables_rules_file and loads it in
// the namespace with nft -o -f, as one transaction that replaces only the
// agent's table. The ruleset is upstream's (input policy drop; the VIP
// interface's traffic only through the rules' accept lines) with one
// addition: TCP that arrives untracked on another interface passes. The
// masquerade script keeps TCP on member ports out of conntrack, so with
// upstream's ruleset the members' answers to HAProxy are dropped, and a
// load balancer on an SR-IOV VIP with members on another network answers
// 503. Member ports keep their Neutron security groups.
package netns
