package haproxy

import (
	"bytes"
	"fmt"
	"regexp"
)

// compatConfig writes what Octavia up to 2025.1 (16.x) renders and current
// HAProxy refuses as upstream's templates write it since 2025.2, which
// every HAProxy the amphora images carry (2.6 and 3.0) reads the same:
// hidden health-check headers (splitHTTPCheckHeaders, refused by 3.0) and
// `option http-use-htx` (dropHTX, refused since 2.5). It says what it
// changed, for the log.
func compatConfig(cfg []byte) ([]byte, []string) {
	var changed []string
	cfg, n := splitHTTPCheckHeaders(cfg)
	if n > 0 {
		changed = append(changed, fmt.Sprintf("%d health checks' hidden headers written as http-check send", n))
	}
	cfg, n = dropHTX(cfg)
	if n > 0 {
		changed = append(changed, fmt.Sprintf("%d 'option http-use-htx' lines dropped", n))
	}
	return cfg, changed
}

// Octavia renders `option http-use-htx` in the PROMETHEUS listener's
// internal frontend. HTX has been HAProxy's only HTTP engine since 2.1,
// and 2.5 dropped the option: HAProxy 2.6 and 3.0 refuse the config
// ("unknown option"). Debian's Octavia 11 patches the line out of its
// template; upstream's releases up to 16.x and Debian's Octavia 16 render
// it, and upstream dropped it in 2025.2. dropHTX drops it (and its
// negation) and says how many lines went.
func dropHTX(cfg []byte) ([]byte, int) {
	if !bytes.Contains(cfg, []byte("http-use-htx")) {
		return cfg, 0
	}
	return rewriteLines(cfg, true, func(line []byte) ([]byte, bool) {
		return nil, htxLine.Match(line)
	})
}

// rewriteLines passes each line of cfg (without its newline) to fix and
// puts what fix returns in its place when fix says so; with drop, such a
// line goes with its newline. It copies cfg only once a line changes, and
// says how many did.
func rewriteLines(cfg []byte, drop bool, fix func(line []byte) ([]byte, bool)) ([]byte, int) {
	var out []byte
	n, last := 0, 0 // cfg[last:] is not yet copied to out
	for start := 0; start < len(cfg); {
		end := len(cfg)
		if i := bytes.IndexByte(cfg[start:], '\n'); i >= 0 {
			end = start + i
		}
		next := min(end+1, len(cfg))
		if fixed, ok := fix(cfg[start:end]); ok {
			if out == nil {
				out = make([]byte, 0, len(cfg)+64)
			}
			out = append(append(out, cfg[last:start]...), fixed...)
			last = end
			if drop {
				last = next
			}
			n++
		}
		start = next
	}
	if out == nil {
		return cfg, 0
	}
	return append(out, cfg[last:]...), n
}

var htxLine = regexp.MustCompile(`^[ \t]*(no[ \t]+)?option[ \t]+http-use-htx[ \t]*$`)

// Octavia up to 2025.1 (16.x) renders an HTTP health monitor's version
// and Host header into the version word of `option httpchk`:
//
//	option httpchk GET /healthz HTTP/1.1\r\nHost:\ www.example.com
//	option httpchk GET /healthz HTTP/1.0\r\n
//
// HAProxy 2.x accepts that; HAProxy 3.0 refuses every config with a "\r\n"
// in that word ("hiding headers or body at the end of the version string
// is unsupported"), so with such a controller every load balancer with
// such a monitor would fail to upload on a trixie amphora, with the
// Python agent as with this one. splitHTTPCheckHeaders writes those lines
// as upstream's own template does since 2025.2 (the fix of Launchpad bug
// 2119489), which HAProxy has understood since 2.2:
//
//	option httpchk GET /healthz HTTP/1.1
//	http-check send hdr Host www.example.com
//
// A line with a body, or with anything it cannot read as headers, is left
// for HAProxy to judge. It reports how many lines it rewrote.
func splitHTTPCheckHeaders(cfg []byte) ([]byte, int) {
	if !bytes.Contains(cfg, []byte(`\r\n`)) {
		return cfg, 0
	}
	return rewriteLines(cfg, false, splitHTTPCheckLine)
}

// httpchkLine is `option httpchk METHOD URI VERSION\r\nHEADERS`: its
// indentation, the line up to the version's end, and what follows the
// first "\r\n".
var httpchkLine = regexp.MustCompile(`^([ \t]*)(option[ \t]+httpchk[ \t]+\S+[ \t]+\S+[ \t]+HTTP/[0-9.]+)\\r\\n(.*?)[ \t]*$`)

// httpchkHeader is one hidden header as Octavia writes it, `Name:\ value`
// (its spaces escaped); the value keeps its escapes, which `http-check
// send hdr` reads the same way.
var httpchkHeader = regexp.MustCompile(`^([A-Za-z0-9!#$%&'*+.^_|~-]+):(?:\\ )*(\S+)$`)

func splitHTTPCheckLine(line []byte) ([]byte, bool) {
	m := httpchkLine.FindSubmatch(line)
	if m == nil {
		return nil, false
	}
	indent, option, rest := m[1], m[2], m[3]
	if bytes.HasPrefix(rest, []byte(`\r\n`)) || bytes.Contains(rest, []byte(`\r\n\r\n`)) {
		return nil, false // a body
	}
	fixed := append(append([]byte{}, indent...), option...)
	for _, h := range bytes.Split(rest, []byte(`\r\n`)) {
		if len(h) == 0 {
			continue
		}
		hm := httpchkHeader.FindSubmatch(h)
		if hm == nil {
			return nil, false
		}
		fixed = append(fixed, '\n')
		fixed = append(fixed, indent...)
		fixed = append(fixed, "http-check send hdr "...)
		fixed = append(append(append(fixed, hm[1]...), ' '), hm[2]...)
	}
	return fixed, true
}
