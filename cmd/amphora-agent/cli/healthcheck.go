package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/internal/cmdline"
	"github.com/amphora-agent/amphora-agent/keepalived/sctpcheck"
)

// healthCheckUsage is the command line Octavia's LVS template renders
// into keepalived's MISC_CHECK (misc_path).
const healthCheckUsage = "usage: amphora-health-checker sctp [-t SECONDS] ADDRESS PORT"

// healthCheckDefaultTimeout is upstream's, when -t is not given.
const healthCheckDefaultTimeout = 3 * time.Second

// healthCheckMaxTimeout bounds -t, in seconds, so that the duration
// cannot overflow (18446744074 s would wrap to 290 ms). It is the largest
// health monitor timeout the controller can render: its API takes any
// integer from 0 and stores it in a 32-bit column. A narrower bound would
// turn members that answer into DOWN for a value upstream waits out.
const healthCheckMaxTimeout = math.MaxInt32

// healthCheckArgs is a parsed health-checker command line.
type healthCheckArgs struct {
	addr    netip.Addr
	port    uint16
	timeout time.Duration
}

// parseHealthCheck reads upstream's arguments: the protocol first, then
// an optional "-t SECONDS" (only there, as upstream), the member's
// address and port.
func parseHealthCheck(args []string) (healthCheckArgs, error) {
	a := healthCheckArgs{timeout: healthCheckDefaultTimeout}
	if len(args) == 0 {
		return a, errors.New("missing protocol")
	}
	protocol, args := args[0], args[1:]
	if !strings.EqualFold(protocol, "sctp") {
		//lint:ignore ST1005 upstream's health_checker.py prints these very words
		return a, fmt.Errorf("Unsupported protocol '%s'", protocol)
	}
	if len(args) > 0 && args[0] == "-t" {
		if len(args) < 2 {
			return a, errors.New("-t needs a number of seconds")
		}
		s, err := strconv.Atoi(args[1])
		if err != nil || s < 0 {
			return a, fmt.Errorf("invalid timeout %q", args[1])
		}
		if s > healthCheckMaxTimeout {
			return a, fmt.Errorf("timeout %q out of range: at most %d seconds", args[1], healthCheckMaxTimeout)
		}
		a.timeout = time.Duration(s) * time.Second
		args = args[2:]
	}
	if len(args) != 2 {
		return a, errors.New("want an address and a port")
	}
	addr, err := netip.ParseAddr(args[0])
	if err != nil {
		return a, fmt.Errorf("invalid address %q", args[0])
	}
	port, err := strconv.ParseUint(args[1], 10, 16)
	if err != nil || port == 0 {
		return a, fmt.Errorf("invalid port %q", args[1])
	}
	a.addr, a.port = addr, uint16(port)
	return a, nil
}

// runHealthCheck is the image's amphora-health-checker: keepalived runs it
// for each member of an SCTP pool with a health monitor. The exit code is
// upstream's: 0 up (INIT ACK), 1 down (ABORT, or no probe possible),
// 2 no answer in time, 3 another answer.
func runHealthCheck(args []string, stdout, stderr io.Writer) int {
	// The protocol comes first, so only a flag before it is taken for one;
	// "-t" after it is upstream's argument.
	fs := cmdline.New("amphora-health-checker", healthCheckUsage, Version, stdout, stderr)
	if code, exit := fs.Parse(args); exit {
		return code
	}
	a, err := parseHealthCheck(fs.Args())
	if err != nil {
		fmt.Fprintf(stderr, "amphora-health-checker: %v\n%s\n", err, healthCheckUsage)
		return int(sctpcheck.Down)
	}
	res, err := sctpcheck.Probe(context.Background(), a.addr, a.port, a.timeout, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "amphora-health-checker: %v\n", err)
		return int(sctpcheck.Down)
	}
	return int(res)
}
