package cli

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
	"github.com/amphora-agent/amphora-agent/keepalived/sctpcheck"
)

func TestParseHealthCheck(t *testing.T) {
	v4, v6 := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8::7")
	cases := []struct {
		args []string
		want healthCheckArgs
		err  string
	}{
		// What Octavia's LVS template renders.
		{[]string{"sctp", "-t", "31", "198.51.100.7", "8080"}, healthCheckArgs{v4, 8080, 31 * time.Second}, ""},
		{[]string{"SCTP", "2001:db8::7", "36412"}, healthCheckArgs{v6, 36412, 3 * time.Second}, ""},
		{[]string{"sctp", "-t", "0", "198.51.100.7", "1"}, healthCheckArgs{v4, 1, 0}, ""},
		{nil, healthCheckArgs{}, "missing protocol"},
		{[]string{"udp", "198.51.100.7", "53"}, healthCheckArgs{}, "Unsupported protocol 'udp'"},
		{[]string{"sctp", "-t"}, healthCheckArgs{}, "-t needs"},
		{[]string{"sctp", "-t", "x", "198.51.100.7", "1"}, healthCheckArgs{}, `invalid timeout "x"`},
		{[]string{"sctp", "-t", "-1", "198.51.100.7", "1"}, healthCheckArgs{}, `invalid timeout "-1"`},
		// The largest timeout the controller can store, and values past it
		// that would overflow the duration (to 290 ms, or negative).
		{[]string{"sctp", "-t", "2147483647", "198.51.100.7", "1"}, healthCheckArgs{v4, 1, 2147483647 * time.Second}, ""},
		{[]string{"sctp", "-t", "2147483648", "198.51.100.7", "1"}, healthCheckArgs{}, `timeout "2147483648" out of range`},
		{[]string{"sctp", "-t", "18446744074", "198.51.100.7", "1"}, healthCheckArgs{}, `timeout "18446744074" out of range`},
		{[]string{"sctp", "-t", "9223372036854775807", "198.51.100.7", "1"}, healthCheckArgs{}, "out of range"},
		{[]string{"sctp", "-t", "9223372036854775808", "198.51.100.7", "1"}, healthCheckArgs{}, "invalid timeout"},
		// -t is only read right after the protocol, as upstream.
		{[]string{"sctp", "198.51.100.7", "1", "-t", "3"}, healthCheckArgs{}, "want an address and a port"},
		{[]string{"sctp", "198.51.100.7"}, healthCheckArgs{}, "want an address and a port"},
		{[]string{"sctp", "member", "1"}, healthCheckArgs{}, `invalid address "member"`},
		{[]string{"sctp", "198.51.100.7", "0"}, healthCheckArgs{}, `invalid port "0"`},
		{[]string{"sctp", "198.51.100.7", "65536"}, healthCheckArgs{}, `invalid port "65536"`},
	}
	for _, c := range cases {
		got, err := parseHealthCheck(c.args)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v, want error %q", c.args, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: %+v %v, want %+v", c.args, got, err, c.want)
		}
	}
}

// TestHealthCheckExitCodes: keepalived reads only the exit status, and
// these are upstream's.
func TestHealthCheckExitCodes(t *testing.T) {
	for res, want := range map[sctpcheck.Result]int{sctpcheck.Up: 0, sctpcheck.Down: 1, sctpcheck.Timeout: 2, sctpcheck.Other: 3} {
		if int(res) != want {
			t.Errorf("result %d, want exit code %d", res, want)
		}
	}
	var out, errOut strings.Builder
	if got := runHealthCheck([]string{"udp", "198.51.100.7", "53"}, &out, &errOut); got != 1 || !strings.Contains(errOut.String(), "usage:") {
		t.Errorf("bad arguments: exit %d, stderr %q; want 1 and the usage", got, errOut.String())
	}
	errOut.Reset()
	if got := runHealthCheck([]string{"sctp", "-t", "18446744074", "127.0.0.1", "9"}, &out, &errOut); got != 1 || !strings.Contains(errOut.String(), "out of range") {
		t.Errorf("-t 18446744074: exit %d, stderr %q; want 1 and out of range", got, errOut.String())
	}
	if got := runHealthCheck([]string{"--help"}, &out, &errOut); got != 0 || !strings.Contains(out.String(), "usage:") {
		t.Errorf("--help: exit %d, stdout %q", got, out.String())
	}
	testkit.RequireRoot(t, "health-checker: a probe needs a raw socket")
	// No time to wait: the INIT goes out and the verdict is the timeout.
	out.Reset()
	if got := runHealthCheck([]string{"sctp", "-t", "0", "127.0.0.1", "9"}, &out, &errOut); got != 2 || !strings.Contains(out.String(), "Timeout after") {
		t.Errorf("-t 0: exit %d, output %q; want 2", got, out.String())
	}
}
