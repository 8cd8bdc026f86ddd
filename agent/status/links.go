package status

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// namespaceLinks lists the interfaces of a namespace and their addresses
// through a netlink handle bound to it (the calling thread stays where it
// is). A namespace that does not exist gives an error wrapping
// fs.ErrNotExist.
func namespaceLinks(namespace string) ([]Link, error) {
	if namespace == "" || strings.Contains(namespace, "/") || namespace == "." || namespace == ".." {
		return nil, fmt.Errorf("invalid network namespace name %q", namespace)
	}
	ns, err := vnetns.GetFromName(namespace)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("namespace %s: %w", namespace, fs.ErrNotExist)
		}
		return nil, err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return nil, err
	}
	var out []Link
	for _, l := range links {
		a := l.Attrs()
		ln := Link{Name: a.Name, MAC: a.HardwareAddr.String(), Addrs: []string{}}
		addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
		if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
			return nil, err
		}
		for _, ad := range addrs {
			ln.Addrs = append(ln.Addrs, ad.IP.String())
		}
		out = append(out, ln)
	}
	return out, nil
}
