package config

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// ParseError is a syntax error in a configuration source. The whole source
// is rejected, like oslo.config does.
type ParseError struct {
	Source string // source name (file path)
	Line   int    // 1-based
	Text   string // the offending line
	Msg    string
}

// Error leaves the line's text out: a malformed heartbeat_key line would
// otherwise put the key in the log.
func (e *ParseError) Error() string {
	return fmt.Sprintf("%s:%d: %s", e.Source, e.Line, e.Msg)
}

// entry is one assignment as written in a source, before any name
// normalisation.
type entry struct {
	section string
	key     string
	value   string
	line    int // line of the key; continuation lines do not move it
}

// parseINI splits data into assignments following oslo.config's iniparser:
// no inline comments, indented lines continue a value, a blank line ends
// it, and quotes are removed only when they wrap the whole first line.
func parseINI(source string, data []byte) ([]entry, error) {
	text := string(data)
	// A BOM would otherwise turn "[DEFAULT]" into a bad assignment line.
	text = strings.TrimPrefix(text, "\ufeff")
	// Python reads the file with universal newlines.
	text = strings.ReplaceAll(text, "\r\n", "\n")
	text = strings.ReplaceAll(text, "\r", "\n")

	var (
		out        []entry
		section    string
		inSection  bool
		pending    *entry
		pendingVal []string
	)
	flush := func() {
		if pending != nil {
			pending.value = strings.Join(pendingVal, "\n")
			out = append(out, *pending)
			pending, pendingVal = nil, nil
		}
	}
	fail := func(n int, line, msg string) error {
		return &ParseError{Source: source, Line: n, Text: line, Msg: msg}
	}

	for i, raw := range strings.Split(text, "\n") {
		n := i + 1
		line := strings.TrimRightFunc(raw, unicode.IsSpace)
		if line == "" {
			flush()
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			if pending == nil {
				return nil, fail(n, raw, "continuation line without an option before it")
			}
			pendingVal = append(pendingVal, strings.TrimLeftFunc(line, unicode.IsSpace))
			continue
		}
		flush()

		switch line[0] {
		case '[':
			if !strings.HasSuffix(line, "]") {
				return nil, fail(n, raw, "section header must end with ]")
			}
			name := strings.TrimSpace(line[1 : len(line)-1])
			if name == "" {
				return nil, fail(n, raw, "empty section name")
			}
			section, inSection = name, true
		case '#', ';':
			// Comment; only recognised at the start of a line.
		default:
			key, value, err := splitAssignment(line)
			if err != nil {
				return nil, fail(n, raw, err.Error())
			}
			if !inSection {
				return nil, fail(n, raw, "option before any [section]")
			}
			pending = &entry{section: section, key: key, line: n}
			pendingVal = []string{value}
		}
	}
	flush()
	return out, nil
}

// splitAssignment splits "key = value" or "key: value" at whichever
// separator comes first.
func splitAssignment(line string) (key, value string, err error) {
	i := strings.IndexAny(line, "=:")
	if i < 0 {
		return "", "", errors.New(`not a section, comment or "key = value" line`)
	}
	key = strings.TrimSpace(line[:i])
	if key == "" {
		return "", "", errors.New("empty option name")
	}
	value = strings.TrimSpace(line[i+1:])
	// oslo strips one pair of matching quotes around the whole value (a lone
	// quote character becomes the empty string there too).
	if value != "" && (value[0] == '"' || value[0] == '\'') && value[len(value)-1] == value[0] {
		if len(value) == 1 {
			value = ""
		} else {
			value = value[1 : len(value)-1]
		}
	}
	return key, value, nil
}

// Viper resolves nested keys on ".", so a section or option name holding
// one could shadow a real option; no option we read has one.
const viperKeyDelim = "."

// sectionName maps a section name as written to the name used as the viper
// key, or "" when oslo would never read it.
func sectionName(raw string) string {
	if raw == "DEFAULT" {
		return "default"
	}
	s := normName(raw)
	// Only the exact spelling DEFAULT is the default group; "[default]" is
	// an unknown group to oslo.
	if s == "default" || strings.Contains(s, viperKeyDelim) {
		return ""
	}
	return s
}

// normName folds case and treats '-' like '_' (operators write both).
func normName(raw string) string {
	return strings.ReplaceAll(strings.ToLower(raw), "-", "_")
}

// origin is where the winning value of an option was written.
type origin struct {
	Source string
	Line   int
}

// osloCodec is a viper codec for oslo's INI dialect. Viper only sees the
// values; the codec also remembers where each one came from so that errors
// can name the file. Set source before each MergeConfig: every Decode call
// records origins, and a later call overwrites earlier ones exactly as the
// later values override earlier ones in viper.
type osloCodec struct {
	source  string
	origins map[string]map[string]origin
}

func newOsloCodec() *osloCodec {
	return &osloCodec{origins: map[string]map[string]origin{}}
}

// Decode fills m with section -> option -> string value.
func (c *osloCodec) Decode(b []byte, m map[string]any) error {
	entries, err := parseINI(c.source, b)
	if err != nil {
		return err
	}
	for _, e := range entries {
		sec := sectionName(e.section)
		key := normName(e.key)
		if sec == "" || strings.Contains(key, viperKeyDelim) {
			continue
		}
		opts, ok := m[sec].(map[string]any)
		if !ok {
			opts = map[string]any{}
			m[sec] = opts
		}
		opts[key] = e.value
		if c.origins[sec] == nil {
			c.origins[sec] = map[string]origin{}
		}
		c.origins[sec][key] = origin{Source: c.source, Line: e.line}
	}
	return nil
}

// Encode is not needed: the agent never writes its configuration through
// viper (PUT /1.0/config stores the uploaded bytes as they are).
func (c *osloCodec) Encode(map[string]any) ([]byte, error) {
	return nil, errors.New("oslo ini: encoding is not supported")
}

// interpolate applies oslo's template rules to a value: "$$" and "\$" are
// a literal '$', a '$' not followed by a name stays as it is, and a
// reference ($name, ${name}, ${group.name}) is refused instead of being
// substituted.
func interpolate(s string) (string, error) {
	if !strings.Contains(s, "$") {
		return s, nil
	}
	// Same order as oslo: "\$" becomes "$$" before the template scan.
	s = strings.ReplaceAll(s, `\$`, "$$")
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' {
			b.WriteByte(s[i])
			continue
		}
		rest := s[i+1:]
		if strings.HasPrefix(rest, "$") {
			b.WriteByte('$')
			i++
			continue
		}
		if n := identLen(rest); n > 0 {
			return "", fmt.Errorf("substitution of %q is not supported (write $$ or \\$ for a literal $)", "$"+rest[:n])
		}
		if strings.HasPrefix(rest, "{") {
			if n := identLen(rest[1:]); n > 0 && strings.HasPrefix(rest[1+n:], "}") {
				return "", fmt.Errorf("substitution of %q is not supported (write $$ or \\$ for a literal $)", "$"+rest[:n+2])
			}
		}
		b.WriteByte('$')
	}
	return b.String(), nil
}

// identLen is the length of the oslo template identifier at the start of s
// ([_a-z][._a-z0-9]*, case-insensitive), or 0.
func identLen(s string) int {
	isStart := func(c byte) bool { return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
	if s == "" || !isStart(s[0]) {
		return 0
	}
	n := 1
	for n < len(s) && (isStart(s[n]) || s[n] == '.' || '0' <= s[n] && s[n] <= '9') {
		n++
	}
	return n
}
