package sysinfo

import (
	"errors"
	"io/fs"
	"strings"

	"github.com/amphora-agent/amphora-agent/netns"
)

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
	links, err := netns.ListLinks(namespace)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]NetStats{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := make(map[string]NetStats)
	for _, l := range links {
		// Upstream skips links that carry no statistics attribute.
		if !strings.HasPrefix(l.Name, "eth") || !l.Counted {
			continue
		}
		out[l.Name] = NetStats{TX: l.TXBytes, RX: l.RXBytes}
	}
	return out, nil
}
