package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/internal/cmdline"
	"github.com/amphora-agent/amphora-agent/haproxy/stats"
)

// vrrpCheckTimeout bounds each socket query, as upstream's check does.
const vrrpCheckTimeout = 5 * time.Second

// runVRRPCheck is the image's haproxy-vrrp-check: keepalived runs it
// through the check script with every load balancer's stats socket. The
// exit code is the number of sockets that answered nothing; a socket that
// cannot be queried at all fails the check outright.
func runVRRPCheck(args []string, stdout, stderr io.Writer) int {
	// keepalived passes absolute socket paths, never a flag.
	fs := cmdline.New("haproxy-vrrp-check", "usage: haproxy-vrrp-check <stats socket>...", Version, stdout, stderr)
	if code, exit := fs.Parse(args); exit {
		return code
	}
	failed := 0
	for _, sock := range fs.Args() {
		ctx, cancel := context.WithTimeout(context.Background(), vrrpCheckTimeout)
		out, err := stats.Command(ctx, sock, "show stat -1 -1 -1")
		cancel()
		if err != nil {
			fmt.Fprintf(stderr, "haproxy-vrrp-check: %s: %v\n", sock, err)
			return 1
		}
		if len(out) == 0 {
			failed++
		}
	}
	return failed
}
