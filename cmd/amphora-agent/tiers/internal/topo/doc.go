// Package topo builds real network topologies for system tests: named
// network namespaces, veth pairs between them, routes, sysctls, HTTP member
// servers and clients that live inside a namespace, and a ready-made
// load-balancer topology shaped like an amphora (LBTopology).
//
// Everything a helper creates is removed in t.Cleanup, also when the test
// fails: servers and idle client connections are closed, processes still
// inside a namespace are killed, namespaces are deleted, and veth ends left
// in the test process's own ("default") namespace are deleted explicitly.
// Names are unique per test process (see Tag and UniqueName), so tests in
// parallel `go test` processes do not collide.
//
// Helpers that take a testing.TB call t.Fatal on failure and must be called
// from the test goroutine. A nil *Namespace means the namespace the test
// process started in.
//
// The calling goroutine's thread never changes namespace: configuration goes
// through netlink handles bound to the namespace, and code that must run
// inside (creating sockets, writing /proc/sys) runs via Run on a separate,
// locked OS thread.
//
// Typical use in a system test of the agent:
//
//	topo.RequireRoot(t)
//	lb := topo.LBTopology(t, topo.LBOptions{Members: 2, AmphoraName: topo.UniqueName("amp")})
//	// configure the agent with network_namespace = lb.Amphora.Name, upload an
//	// HAProxy config whose frontend binds lb.VIP:80 and whose servers are
//	// lb.Members[i].HostPort(), then:
//	resp, err := lb.HTTPClient(false).Get(lb.URL(80, "/"))
//	lb.Members[0].Server.Stop() // member down; Start() brings it back
//
// For the plug tests, HotplugNIC leaves a NIC in the default namespace for
// the agent to find by MAC, and AdoptNamespace makes the test delete the
// namespace the agent creates.
package topo
