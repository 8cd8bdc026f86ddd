package topo

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
)

// UDPEcho answers every datagram with its name, from a socket inside a
// namespace; a test can take it down (Stop: the port is closed, so the
// host answers ICMP port unreachable, as a dead UDP service does) and
// bring it back on the same address (Start).
type UDPEcho struct {
	ns   *Namespace
	addr string
	name string

	mu   sync.Mutex
	conn net.PacketConn
	done chan struct{}
}

// ServeUDPEcho starts a UDP echo of name on addr inside the namespace; it
// is closed in t.Cleanup.
func (n *Namespace) ServeUDPEcho(t testing.TB, addr, name string) *UDPEcho {
	t.Helper()
	e := &UDPEcho{ns: n, addr: addr, name: name}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Stop() })
	return e
}

// Start binds the address and answers until Stop.
func (e *UDPEcho) Start() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.conn != nil {
		return fmt.Errorf("topo: UDP echo %s in %s is already running", e.addr, e.ns.String())
	}
	c, err := e.ns.ListenPacket("udp", e.addr)
	if err != nil {
		return fmt.Errorf("topo: UDP echo on %s in %s: %w", e.addr, e.ns.String(), err)
	}
	e.conn, e.done = c, make(chan struct{})
	go func(c net.PacketConn, done chan struct{}) {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			_, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			c.WriteTo([]byte(e.name), from)
		}
	}(c, e.done)
	return nil
}

// Stop closes the socket and waits for the server to end.
func (e *UDPEcho) Stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.conn == nil {
		return
	}
	e.conn.Close()
	<-e.done
	e.conn = nil
}

// UDPAsk sends one datagram to addr from a fresh socket (a new source
// port, so a load balancer sees a new flow) inside the namespace and
// returns the first answer, or an error after timeout.
func (n *Namespace) UDPAsk(addr string, msg []byte, timeout time.Duration) (string, error) {
	c, err := n.ListenPacket("udp", ":0")
	if err != nil {
		return "", err
	}
	defer c.Close()
	to, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return "", err
	}
	if _, err := c.WriteTo(msg, to); err != nil {
		return "", err
	}
	c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 2048)
	nr, _, err := c.ReadFrom(buf)
	if err != nil {
		return "", err
	}
	return string(buf[:nr]), nil
}
