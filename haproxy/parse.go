package haproxy

import (
	"bytes"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"
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
	// LoadsServerState reports a `load-server-state-from-file` other than
	// none: the servers' states are then worth saving before a reload.
	LoadsServerState bool
}

// sectionKeywords start a new section of an HAProxy config.
var sectionKeywords = map[string]bool{
	"global": true, "defaults": true, "frontend": true, "backend": true,
	"listen": true, "peers": true, "resolvers": true, "userlist": true,
	"mailers": true, "program": true, "http-errors": true, "ring": true,
	"cache": true,
}

// summaryKeywords start the lines inside sections that Parse reads.
var summaryKeywords = map[string]bool{
	"stats": true, "option": true, "maxconn": true, "mode": true, "bind": true, "load-server-state-from-file": true,
}

// firstWord is line's first field as strings.Fields splits it, when the
// line starts with ASCII; ok is false when it cannot tell (a byte beyond
// ASCII before the first word ends, which may be a Unicode space).
func firstWord(line []byte) (word []byte, ok bool) {
	i := 0
	for i < len(line) && asciiSpace(line[i]) {
		i++
	}
	start := i
	for i < len(line) && !asciiSpace(line[i]) {
		if line[i] >= utf8.RuneSelf {
			return nil, false
		}
		i++
	}
	return line[start:i], true
}

// asciiSpace is the ASCII white space strings.Fields splits at.
func asciiSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// Parse extracts frontends and the stats socket. Sections begin with a
// keyword at the start of a line, as the controller renders them; options
// inside them are indented, but indentation is not required.
func Parse(cfg []byte) Summary { return parse(cfg, true) }

// parse is Parse; skip passes over lines by their first word (without,
// every line is split: what tests compare with).
func parse(cfg []byte, skip bool) Summary {
	var sum Summary
	var cur *Frontend
	// HAProxy's own default mode; a `defaults` section may change it.
	defaultMode, inDefaults, inGlobal := "TCP", false, false
	seen := map[netip.Addr]bool{}
	for rest := cfg; len(rest) > 0; {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		// Most lines (servers, timeouts) say nothing the summary needs:
		// they are passed over by their first word, without splitting.
		if w, ok := firstWord(line); skip && ok && !sectionKeywords[string(w)] && !summaryKeywords[string(w)] {
			continue
		}
		fields := strings.Fields(string(line))
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
		case fields[0] == "load-server-state-from-file" && len(fields) > 1 && fields[1] != "none":
			sum.LoadsServerState = true
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
