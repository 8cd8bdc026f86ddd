package netns

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// LinkReport is one interface of a namespace as reports show it.
type LinkReport struct {
	Name string
	MAC  net.HardwareAddr
	// Counted is false when the kernel gave no statistics for the link;
	// RXBytes and TXBytes are then zero.
	Counted          bool
	RXBytes, TXBytes uint64
	Addrs            []net.IP
}

// ListLinks lists the interfaces of a namespace with their byte counters
// and addresses, through a netlink handle bound to it (the calling thread
// stays where it is). Reports are informational, so after the last
// interrupted dump the partial one is used rather than failing. A
// namespace that does not exist gives an error wrapping fs.ErrNotExist.
func ListLinks(namespace string) ([]LinkReport, error) {
	if err := validName(namespace); err != nil {
		return nil, err
	}
	h, err := openHandle(namespace)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	links, err := retryDump(h.LinkList)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return nil, fmt.Errorf("list links in %s: %w", namespace, err)
	}
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return h.AddrList(nil, unix.AF_UNSPEC) })
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return nil, fmt.Errorf("list addresses in %s: %w", namespace, err)
	}
	out := make([]LinkReport, 0, len(links))
	for _, l := range links {
		a := l.Attrs()
		if a == nil {
			continue
		}
		r := LinkReport{Name: a.Name, MAC: a.HardwareAddr, Addrs: []net.IP{}}
		if a.Statistics != nil {
			r.Counted, r.RXBytes, r.TXBytes = true, a.Statistics.RxBytes, a.Statistics.TxBytes
		}
		for _, ad := range addrs {
			if ad.LinkIndex == a.Index {
				r.Addrs = append(r.Addrs, ad.IP)
			}
		}
		out = append(out, r)
	}
	return out, nil
}
