package topo

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/sctppeer"
)

// SCTPEcho answers every SCTP association's message with its name, from a
// user-space peer (sctppeer) inside a namespace, so that it works on a
// kernel without SCTP; a test can take it down (Stop: such a kernel then
// answers ICMP protocol unreachable, one with SCTP an ABORT) and bring it
// back on the same address (Start).
type SCTPEcho struct {
	ns   *Namespace
	addr netip.AddrPort
	name string

	mu     sync.Mutex
	server *sctppeer.Server
}

// ServeSCTPEcho starts an SCTP echo of name on addr inside the namespace;
// it is stopped in t.Cleanup.
func (n *Namespace) ServeSCTPEcho(t testing.TB, addr, name string) *SCTPEcho {
	t.Helper()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	e := &SCTPEcho{ns: n, addr: ap, name: name}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	return e
}

// Start opens the server; it answers until Stop.
func (e *SCTPEcho) Start() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.server != nil {
		return fmt.Errorf("topo: SCTP echo %s in %s is already running", e.addr, e.ns.String())
	}
	return e.ns.Run(func() error {
		var err error
		e.server, err = sctppeer.Listen(e.addr, e.name)
		return err
	})
}

// Stop closes the server and waits until its socket is closed.
func (e *SCTPEcho) Stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.server != nil {
		e.server.Close()
		e.server = nil
	}
}

// Served is how many messages the echo answered since its last Start.
func (e *SCTPEcho) Served() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.server == nil {
		return 0
	}
	return e.server.Served()
}

// SCTPAsk opens one SCTP association to addr from inside the namespace (a
// fresh source port: a new flow for a load balancer), sends msg, and
// returns the answer; the association is aborted afterwards.
func (n *Namespace) SCTPAsk(addr string, msg []byte, timeout time.Duration) (string, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return "", err
	}
	var c *sctppeer.Client
	if err := n.Run(func() error {
		var err error
		c, err = sctppeer.Dial(ap)
		return err
	}); err != nil {
		return "", err
	}
	defer c.Close()
	return c.Ask(msg, timeout)
}
