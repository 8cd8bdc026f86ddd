package haproxy

import "bytes"

// stripGroupLines removes what upstream strips from uploads with the
// pattern `\s+group\s.+`: a run of whitespace, the word group, one
// whitespace character and the rest of that line (at least one
// character); the group comes from the image's user/group file instead.
// A word search replaces the regular expression, which cost milliseconds
// on a large config. A match can only begin where the whitespace before
// a "group" begins, so each occurrence is tried once, in order.
func stripGroupLines(cfg []byte) []byte {
	var out []byte
	last := 0 // cfg[last:] is not yet copied to out
	for from := 0; ; {
		k := bytes.Index(cfg[from:], []byte("group"))
		if k < 0 {
			break
		}
		g := from + k
		from = g + 1
		start := g
		for start > last && isRESpace(cfg[start-1]) {
			start--
		}
		if start == g || len(cfg)-g < 7 || !isRESpace(cfg[g+5]) || cfg[g+6] == '\n' {
			continue
		}
		end := g + 7
		if nl := bytes.IndexByte(cfg[end:], '\n'); nl >= 0 {
			end += nl
		} else {
			end = len(cfg)
		}
		if out == nil {
			out = make([]byte, 0, len(cfg))
		}
		out = append(out, cfg[last:start]...)
		last, from = end, end
	}
	if out == nil {
		return cfg
	}
	return append(out, cfg[last:]...)
}

// isRESpace is Go regexp's \s: ASCII tab, newline, form feed, carriage
// return and space.
func isRESpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r'
}
