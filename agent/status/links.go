package status

import "github.com/amphora-agent/amphora-agent/netns"

// namespaceLinks is the report's view of netns.ListLinks: names, MACs and
// addresses without prefix length.
func namespaceLinks(namespace string) ([]Link, error) {
	links, err := netns.ListLinks(namespace)
	if err != nil {
		return nil, err
	}
	var out []Link
	for _, l := range links {
		ln := Link{Name: l.Name, MAC: l.MAC.String(), Addrs: []string{}}
		for _, ip := range l.Addrs {
			ln.Addrs = append(ln.Addrs, ip.String())
		}
		out = append(out, ln)
	}
	return out, nil
}
