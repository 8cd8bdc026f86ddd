package keepalived

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"

	"github.com/amphora-agent/amphora-agent/agent/fault"
)

// includeDirectives are the keywords with which keepalived reads another
// file into a config: include, and its variants with a check letter
// (keepalived 2.3 on).
var includeDirectives = map[string]bool{
	"include": true, "includer": true, "includem": true, "includew": true, "includeb": true, "includea": true,
}

// refuseIncludes refuses an uploaded config that includes another file.
// Octavia's templates never render an include, and none is harmless:
// keepalived -t quotes each line of an included file it does not
// understand, so the answer and the log would carry any file root can
// read, and the agent's own folders hold the listeners' and the agent's
// private keys. An include assembled from parameter definitions escapes
// this look at the text; outputAbout catches it in keepalived's output.
func refuseIncludes(body []byte) error {
	for i, line := range strings.Split(string(body), "\n") {
		word := directive(line)
		if name, value, ok := definition(word, line); ok {
			// $NAME=include ... makes every later $NAME line an include.
			word, line = directive(value), name+"="+value
		}
		if includeDirectives[word] {
			return fault.Invalid("Invalid request", fmt.Sprintf("line %d: %q: a keepalived config may not include other files",
				i+1, clip(strings.TrimSpace(line), 120)))
		}
	}
	return nil
}

// directive is the keyword keepalived reads on line: its first word once
// a comment (from # or !), @system-id conditions and a ~SEQ(...) prefix
// are taken off. Being stricter than keepalived is harmless here (a # in
// quotes ends the line early, quotes around the word are dropped): the
// controller's configs hold no include to confuse with.
func directive(line string) string {
	if i := strings.IndexAny(line, "#!"); i >= 0 {
		line = line[:i]
	}
	rest := strings.TrimSpace(line)
	// Each pass takes at least one byte off rest.
	for rest != "" {
		switch {
		case strings.HasPrefix(rest, "@"):
			i := strings.IndexFunc(rest, unicode.IsSpace)
			if i < 0 {
				return ""
			}
			rest = strings.TrimSpace(rest[i:])
		case strings.HasPrefix(rest, "~SEQ"):
			i := strings.Index(rest, ")")
			if i < 0 {
				return ""
			}
			rest = strings.TrimSpace(rest[i+1:])
		default:
			return strings.Trim(strings.Fields(rest)[0], `"`)
		}
	}
	return ""
}

var definitionHead = regexp.MustCompile(`^\s*(\$[A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$`)

// definition splits a parameter definition ($NAME=value) of line, whose
// directive is word.
func definition(word, line string) (name, value string, ok bool) {
	if !strings.HasPrefix(word, "$") {
		return "", "", false
	}
	m := definitionHead.FindStringSubmatch(line)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// locatedLine matches keepalived's prefix on a line about a place in a
// file it read: "(<file>: Line <n>) ". keepalived 2.2 and later name the
// file whenever more than one was read; "(Line <n>) " alone is the
// config itself.
var locatedLine = regexp.MustCompile(`^\((.+): Line [0-9]+\) `)

// outputAbout keeps the lines of keepalived's output that are about the
// config at path, or about no file, and counts those about other files:
// those quote what an include made keepalived read.
func outputAbout(output, path string) (kept string, others int) {
	var lines []string
	for _, line := range strings.Split(output, "\n") {
		if m := locatedLine.FindStringSubmatch(line); m != nil && m[1] != path {
			others++
			continue
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n"), others
}
