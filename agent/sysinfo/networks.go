package sysinfo

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// dumpAttempts bounds retries of a link dump the kernel marked as
// interrupted (the link table changed mid-dump, e.g. during a plug).
const dumpAttempts = 5

// NetStats is one entry of the "networks" object of /1.0/details.
type NetStats struct {
	TX uint64 `json:"network_tx"`
	RX uint64 `json:"network_rx"`
}

// Networks returns byte counters for every link whose name starts with
// "eth" inside the named network namespace (as created by `ip netns add`).
// A namespace that does not exist yet yields an empty map: before the first
// plug there is nothing to report, and upstream answers {} as well.
func Networks(namespace string) (map[string]NetStats, error) {
	if namespace == "" || namespace == "." || namespace == ".." || strings.Contains(namespace, "/") {
		return nil, fmt.Errorf("invalid network namespace name %q", namespace)
	}
	ns, err := netns.GetFromName(namespace)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return map[string]NetStats{}, nil
		}
		return nil, fmt.Errorf("open network namespace %s: %w", namespace, err)
	}
	defer ns.Close()

	// A handle bound to the namespace keeps the calling thread where it is;
	// only the route family is needed, so skip the other sockets.
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink handle in %s: %w", namespace, err)
	}
	defer h.Close()

	var links []netlink.Link
	for range dumpAttempts {
		links, err = h.LinkList()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	// After the last interrupted attempt the partial, possibly inconsistent
	// dump is still used: these counters are informational and failing the
	// whole /details request would be worse.
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return nil, fmt.Errorf("list links in %s: %w", namespace, err)
	}

	out := make(map[string]NetStats)
	for _, l := range links {
		a := l.Attrs()
		// Upstream skips links that carry no statistics attribute.
		if a == nil || !strings.HasPrefix(a.Name, "eth") || a.Statistics == nil {
			continue
		}
		out[a.Name] = NetStats{TX: a.Statistics.TxBytes, RX: a.Statistics.RxBytes}
	}
	return out, nil
}
