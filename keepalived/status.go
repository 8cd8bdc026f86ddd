package keepalived

import (
	"bufio"
	"bytes"
	"net/netip"
	"os"
	"regexp"
	"strings"
)

// VRRPVIPs are the addresses of the virtual_ipaddress and
// virtual_ipaddress_excluded blocks of a VRRP config: what keepalived adds
// to the interface while it is MASTER.
func VRRPVIPs(cfg []byte) []netip.Addr {
	var addrs []netip.Addr
	in := false
	for _, line := range strings.Split(string(cfg), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case !in && (f[0] == "virtual_ipaddress" || f[0] == "virtual_ipaddress_excluded"):
			in = len(f) > 1 && f[1] == "{"
		case !in:
		case f[0] == "}":
			in = false
		default:
			if p, err := netip.ParsePrefix(f[0]); err == nil {
				addrs = append(addrs, p.Addr())
			} else if a, err := netip.ParseAddr(f[0]); err == nil {
				addrs = append(addrs, a)
			}
		}
	}
	return addrs
}

var (
	enteringState = regexp.MustCompile(`\) Entering ([A-Z]+) STATE`)
	startingLine  = []byte("Starting Keepalived")
	stoppedLine   = []byte("Stopped Keepalived")
)

// Role is the VRRP state keepalived last logged in its output file
// (keepalived runs with --log-console, so its log lines land there, as
// "(instance) Entering MASTER STATE"), "" when the current run has not
// logged one. The file of the previous run or of the part moved away by
// the size cap (<log>.1) is read first; a "Starting Keepalived" line
// forgets what came before it. Reading the file disturbs nobody, unlike a
// signal asking keepalived to dump its state.
func Role(logPath string) string {
	role := ""
	for _, p := range []string{logPath + ".1", logPath} {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			switch {
			case bytes.Contains(line, startingLine), bytes.Contains(line, stoppedLine):
				role = ""
			default:
				if m := enteringState.FindSubmatch(line); m != nil {
					role = string(m[1])
				}
			}
		}
	}
	return role
}
