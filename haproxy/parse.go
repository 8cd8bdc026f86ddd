// Package haproxy runs the load balancers: the per-LB files on disk, config
// validation, supervision of the HAProxy master, reloads and the stats
// socket.
package haproxy

import (
	"bufio"
	"bytes"
	"net/netip"
	"strconv"
	"strings"
)

// Frontend is what the agent needs to know about one listener of a stored
// config.
type Frontend struct {
	Name string
	// Mode is the frontend's `mode`, upper-cased, or TERMINATED_HTTPS when a
	// bind line terminates TLS with a crt-list (as upstream reports it).
	Mode    string
	CrtList string
}

// Summary is the parsed essence of a stored haproxy.cfg.
type Summary struct {
	Frontends   []Frontend
	StatsSocket string
	// GlobalMaxconn is the global section's maxconn, 0 when absent.
	GlobalMaxconn int
	// Splice reports an `option splice-*` anywhere: HAProxy then keeps
	// pipes (two descriptors each) for a quarter of maxconn.
	Splice bool
	// BindAddresses are the IP addresses of the frontends' bind lines, in
	// order of appearance, without duplicates (the VIPs to advertise).
	BindAddresses []netip.Addr
}

// sectionKeywords start a new section of an HAProxy config.
var sectionKeywords = map[string]bool{
	"global": true, "defaults": true, "frontend": true, "backend": true,
	"listen": true, "peers": true, "resolvers": true, "userlist": true,
	"mailers": true, "program": true, "http-errors": true, "ring": true,
	"cache": true,
}

// Parse extracts frontends and the stats socket. Sections begin with a
// keyword at the start of a line, as the controller renders them; options
// inside them are indented, but indentation is not required.
func Parse(cfg []byte) Summary {
	var sum Summary
	var cur *Frontend
	// HAProxy's own default mode; a `defaults` section may change it.
	defaultMode, inDefaults, inGlobal := "TCP", false, false
	seen := map[netip.Addr]bool{}
	sc := bufio.NewScanner(bytes.NewReader(cfg))
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		if sectionKeywords[fields[0]] {
			cur = nil
			inDefaults = fields[0] == "defaults"
			inGlobal = fields[0] == "global"
			if fields[0] == "frontend" && len(fields) > 1 {
				sum.Frontends = append(sum.Frontends, Frontend{Name: fields[1]})
				cur = &sum.Frontends[len(sum.Frontends)-1]
			}
			continue
		}
		switch {
		case fields[0] == "stats" && len(fields) > 2 && fields[1] == "socket" && sum.StatsSocket == "":
			sum.StatsSocket = fields[2]
		case fields[0] == "option" && len(fields) > 1 && strings.HasPrefix(fields[1], "splice-"):
			sum.Splice = true
		case inGlobal && fields[0] == "maxconn" && len(fields) > 1:
			sum.GlobalMaxconn, _ = strconv.Atoi(fields[1])
		case inDefaults && fields[0] == "mode" && len(fields) > 1:
			defaultMode = strings.ToUpper(fields[1])
		case cur != nil && fields[0] == "mode" && len(fields) > 1:
			if cur.Mode != "TERMINATED_HTTPS" {
				cur.Mode = strings.ToUpper(fields[1])
			}
		case cur != nil && fields[0] == "bind":
			if path := crtList(fields); path != "" {
				cur.Mode, cur.CrtList = "TERMINATED_HTTPS", path
			}
			if len(fields) > 1 {
				if a, ok := bindAddress(fields[1]); ok && !seen[a] {
					seen[a] = true
					sum.BindAddresses = append(sum.BindAddresses, a)
				}
			}
		}
	}
	for i := range sum.Frontends {
		if sum.Frontends[i].Mode == "" {
			sum.Frontends[i].Mode = defaultMode
		}
	}
	return sum
}

// bindAddress extracts the IP of a bind address such as 203.0.113.10:80,
// [2001:db8::1]:443 or 2001:db8::1:443 (HAProxy splits at the last colon).
func bindAddress(spec string) (netip.Addr, bool) {
	spec, _, _ = strings.Cut(spec, ",")
	i := strings.LastIndexByte(spec, ':')
	if i < 0 {
		return netip.Addr{}, false
	}
	host := strings.TrimSuffix(strings.TrimPrefix(spec[:i], "["), "]")
	a, err := netip.ParseAddr(host)
	if err != nil || a.IsUnspecified() {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

func crtList(bind []string) string {
	ssl := false
	for i, f := range bind {
		if f == "ssl" {
			ssl = true
		}
		if f == "crt-list" && i+1 < len(bind) && ssl {
			return bind[i+1]
		}
	}
	return ""
}
