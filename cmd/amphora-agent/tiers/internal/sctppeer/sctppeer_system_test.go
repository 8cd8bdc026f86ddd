//go:build system

package sctppeer_test

import (
	"context"
	"io"
	"net/netip"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
	"github.com/amphora-agent/amphora-agent/keepalived/sctpcheck"
)

// icmpUnreachSent is the namespace's count of ICMP destination
// unreachables it sent (protocol unreachable among them).
func icmpUnreachSent(t *testing.T, ns *topo.Namespace) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := ns.Exec(ctx, "cat", "/proc/net/snmp")
	if err != nil {
		t.Fatal(err)
	}
	// The Icmp: header line names the fields, the next one counts them.
	lines := regexp.MustCompile(`(?m)^Icmp: (.*)$`).FindAllStringSubmatch(string(out), 2)
	if len(lines) != 2 {
		t.Fatalf("no Icmp lines in /proc/net/snmp:\n%s", out)
	}
	names, values := regexp.MustCompile(`\S+`).FindAllString(lines[0][1], -1), regexp.MustCompile(`\S+`).FindAllString(lines[1][1], -1)
	for i, n := range names {
		if n == "OutDestUnreachs" && i < len(values) {
			v, _ := strconv.Atoi(values[i])
			return v
		}
	}
	t.Fatalf("no OutDestUnreachs in /proc/net/snmp:\n%s", out)
	return 0
}

// probe runs the amphora-health-checker's probe from inside ns.
func probe(t *testing.T, ns *topo.Namespace, addr string, port uint16) (sctpcheck.Result, error) {
	t.Helper()
	var res sctpcheck.Result
	var perr error
	if err := ns.Run(func() error {
		res, perr = sctpcheck.Probe(context.Background(), netip.MustParseAddr(addr), port, 2*time.Second, io.Discard)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return res, perr
}

// TestPeerBetweenNamespaces: a client namespace and a member namespace on
// a veth pair, over IPv4 and IPv6; the member's kernel needs no SCTP. The
// client's associations are answered and the health checker's probe says
// Up; the member's namespace sends no ICMP for the SCTP it takes. Stopped,
// the member is refused by the probe (the kernel's protocol unreachable:
// exit 1, down) and the client gets no answer; started again, both work.
func TestPeerBetweenNamespaces(t *testing.T) {
	topo.RequireRoot(t)
	client, member := topo.NewNamespace(t, "aasc"), topo.NewNamespace(t, "aasm")
	topo.Link(t, client, "", []string{"198.51.100.2/24", "2001:db8::2/64"}, member, "", []string{"198.51.100.1/24", "2001:db8::1/64"})
	const port = 3868
	for _, c := range []struct{ name, addr, hostPort string }{
		{"IPv4", "198.51.100.1", "198.51.100.1:3868"},
		{"IPv6", "2001:db8::1", "[2001:db8::1]:3868"},
	} {
		t.Run(c.name, func(t *testing.T) {
			echo := member.ServeSCTPEcho(t, c.hostPort, "sctp-member-1")
			unreach := icmpUnreachSent(t, member)
			start := time.Now()
			for i := range 5 {
				if got, err := client.SCTPAsk(c.hostPort, []byte("ping"), 3*time.Second); err != nil || got != "sctp-member-1" {
					t.Fatalf("association %d: %q %v", i, got, err)
				}
			}
			t.Logf("5 associations (handshake, DATA, answer, ABORT) in %v", time.Since(start).Round(time.Millisecond))
			if echo.Served() != 5 {
				t.Errorf("the member served %d messages, want 5", echo.Served())
			}
			if res, err := probe(t, client, c.addr, port); err != nil || res != sctpcheck.Up {
				t.Fatalf("health probe of the running member: %d %v, want Up", res, err)
			}
			if c.addr == "198.51.100.1" { // the IPv4 counters
				if now := icmpUnreachSent(t, member); now != unreach {
					t.Errorf("the member's namespace sent %d ICMP destination unreachables while it answered", now-unreach)
				}
			}

			echo.Stop()
			res, err := probe(t, client, c.addr, port)
			if res == sctpcheck.Up || res == sctpcheck.Other {
				t.Fatalf("health probe of the stopped member: %d %v, want down or timeout", res, err)
			}
			t.Logf("stopped member: probe result %d, error %v", res, err)
			if got, err := client.SCTPAsk(c.hostPort, []byte("ping"), time.Second); err == nil {
				t.Fatalf("the stopped member answered %q", got)
			}

			if err := echo.Start(); err != nil {
				t.Fatal(err)
			}
			testenv.WaitFor(t, 10*time.Second, "the restarted member's answer", func() bool {
				got, err := client.SCTPAsk(c.hostPort, []byte("ping"), time.Second)
				return err == nil && got == "sctp-member-1"
			})
			if res, err := probe(t, client, c.addr, port); err != nil || res != sctpcheck.Up {
				t.Fatalf("health probe of the restarted member: %d %v, want Up", res, err)
			}
		})
	}
}
