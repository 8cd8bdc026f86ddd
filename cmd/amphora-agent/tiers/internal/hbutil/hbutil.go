// Package hbutil is the heartbeat side of the system, interop and VM
// tiers: a health manager's UDP socket that decodes what the agent sends,
// and the load balancer config (haproxy.cfg.tmpl) their heartbeat tests
// render.
package hbutil

import (
	"bytes"
	"embed"
	"net"
	"testing"
	"text/template"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/health"
	"github.com/amphora-agent/amphora-agent/agent/health/healthtest"
)

// The Octavia objects of the heartbeat tests' load balancer.
const (
	LB       = "3f0c8a4e-2b1d-4c6e-9a7f-5d4e3c2b1a09"
	Listener = "c1d2e3f4-a5b6-4c7d-8e9f-0a1b2c3d4e5f"
	Pool     = "d2e3f4a5-b6c7-4d8e-9f0a-1b2c3d4e5f6a"
)

// Wait bounds every wait for a heartbeat.
const Wait = 30 * time.Second

// Member is one server line of the rendered config.
type Member struct {
	ID       string
	Addr     string // host:port
	Weight   int
	Check    bool
	Disabled bool
}

//go:embed haproxy.cfg.tmpl
var configTemplate embed.FS

// Config renders haproxy.cfg.tmpl.
func Config(t *testing.T, base, bind string, members []Member) string {
	t.Helper()
	tmpl := template.Must(template.ParseFS(configTemplate, "haproxy.cfg.tmpl"))
	var b bytes.Buffer
	err := tmpl.Execute(&b, map[string]any{
		"LB": LB, "Listener": Listener, "Pool": Pool, "Base": base, "Bind": bind,
		"MaxConn": 1000, "Members": members,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// Receiver is a health manager's UDP socket on loopback.
type Receiver struct {
	t    *testing.T
	conn *net.UDPConn
}

func NewReceiver(t *testing.T) *Receiver {
	t.Helper()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &Receiver{t: t, conn: conn}
}

// Addr is the receiver as a controller_ip_port_list item.
func (r *Receiver) Addr() string { return r.conn.LocalAddr().String() }

// Next returns the next datagram, or nil at the deadline.
func (r *Receiver) Next(deadline time.Time) []byte {
	buf := make([]byte, 1<<16)
	r.conn.SetReadDeadline(deadline)
	n, _, err := r.conn.ReadFromUDP(buf)
	if err != nil {
		return nil
	}
	return buf[:n]
}

// NextMessage returns the next heartbeat decoded with key, or false at
// the deadline. A datagram that does not verify with key is a test failure.
func (r *Receiver) NextMessage(deadline time.Time, key string) (health.Message, bool) {
	r.t.Helper()
	d := r.Next(deadline)
	if d == nil {
		return health.Message{}, false
	}
	m, err := healthtest.Decode[health.Message](d, key)
	if err != nil {
		r.t.Fatalf("heartbeat does not verify with key %q: %v", key, err)
	}
	return m, true
}

// WaitFor reads heartbeats until one decoded with key satisfies cond and
// returns it with its datagram. Datagrams that do not verify with key are
// a test failure.
func (r *Receiver) WaitFor(timeout time.Duration, key, what string, cond func(health.Message) bool) (health.Message, []byte) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	var last *health.Message
	for {
		d := r.Next(deadline)
		if d == nil {
			r.t.Fatalf("no heartbeat with %s within %v; last one: %+v", what, timeout, last)
		}
		m, err := healthtest.Decode[health.Message](d, key)
		if err != nil {
			r.t.Fatalf("heartbeat does not verify with key %q: %v", key, err)
		}
		if cond(m) {
			return m, d
		}
		last = &m
	}
}
