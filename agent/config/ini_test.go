package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseINI(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []entry
		wantErr string
	}{
		{
			name: "equals and colon, first separator wins",
			in:   "[s]\na = b:c\nd: e=f\ng=h\n",
			want: []entry{{"s", "a", "b:c", 2}, {"s", "d", "e=f", 3}, {"s", "g", "h", 4}},
		},
		{
			name: "trimmed key and value, empty value",
			in:   "[s]\n  \t\nk \t=  v v  \nempty =\n",
			want: []entry{{"s", "k", "v v", 3}, {"s", "empty", "", 4}},
		},
		{
			name: "quotes wrapping the whole value are removed once",
			in:   "[s]\na = \"x y\"\nb = 'x'\nc = \"x'\nd = a \"b\" c\ne = \"\"\"\"\nf = \"\n",
			want: []entry{
				{"s", "a", "x y", 2}, {"s", "b", "x", 3}, {"s", "c", "\"x'", 4},
				{"s", "d", "a \"b\" c", 5}, {"s", "e", "\"\"", 6}, {"s", "f", "", 7},
			},
		},
		{
			name: "comments only at line start, no inline comments",
			in:   "# c\n; c\n[s]\n#a = 1\nb = 2 # not a comment\nc = 3 ; nor this\n",
			want: []entry{{"s", "b", "2 # not a comment", 5}, {"s", "c", "3 ; nor this", 6}},
		},
		{
			name: "continuation lines join with newline until a blank line",
			in:   "[s]\na = one\n  two\n\t# three\n\nb = x\n",
			want: []entry{{"s", "a", "one\ntwo\n# three", 2}, {"s", "b", "x", 6}},
		},
		{
			name: "quotes are only stripped on the first line",
			in:   "[s]\na = \"x\"\n  y\"\n",
			want: []entry{{"s", "a", "x\ny\"", 2}},
		},
		{
			name: "CRLF and a BOM",
			in:   "\ufeff[s]\r\na = 1\r\nb = 2\r\n",
			want: []entry{{"s", "a", "1", 2}, {"s", "b", "2", 3}},
		},
		{
			name: "sections are kept as written; repeated keys all reported",
			in:   "[A-b]\nk = 1\n[ c ]\nk = 2\nk = 3\n",
			want: []entry{{"A-b", "k", "1", 2}, {"c", "k", "2", 4}, {"c", "k", "3", 5}},
		},
		{name: "key before any section", in: "# x\n\ndebug = true\n[DEFAULT]\n", wantErr: "f.conf:3: option before any [section]"},
		{name: "garbage line", in: "[DEFAULT]\ndebug = true\nthis is not valid\n", wantErr: `f.conf:3: not a section, comment or "key = value" line`},
		{name: "garbage before a section", in: "garbage\n", wantErr: `f.conf:1: not a section, comment or "key = value" line`},
		{name: "empty key", in: "[s]\n= v\n", wantErr: "f.conf:2: empty option name"},
		{name: "unterminated section", in: "[s\n", wantErr: "f.conf:1: section header must end with ]"},
		{name: "section with trailing text", in: "[s] # c\n", wantErr: "f.conf:1: section header must end with ]"},
		{name: "empty section", in: "[]\n", wantErr: "f.conf:1: empty section name"},
		{name: "continuation after a section header", in: "[s]\n  x\n", wantErr: "f.conf:2: continuation line without an option before it"},
		{name: "continuation after a blank line", in: "[s]\na = 1\n\n  x\n", wantErr: "f.conf:4: continuation line without an option before it"},
		{name: "continuation after a comment", in: "[s]\na = 1\n# c\n  x\n", wantErr: "f.conf:4: continuation line without an option before it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseINI("f.conf", []byte(tt.in))
			if tt.wantErr != "" {
				var pe *ParseError
				if !errors.As(err, &pe) || err.Error() != tt.wantErr {
					t.Fatalf("err = %v, want ParseError %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func TestCodecDecode(t *testing.T) {
	c := newOsloCodec()
	m := map[string]any{}
	c.source = "a.conf"
	in := "[DEFAULT]\ndebug = 1\n[default]\ndebug = 2\n[Haproxy-Amphora]\nBind-Port = 1\n" +
		"[haproxy_amphora]\nbind_port = 2\n[x.y]\nk = v\n[z]\na.b = c\n"
	if err := c.Decode([]byte(in), m); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"default":         map[string]any{"debug": "1"},
		"haproxy_amphora": map[string]any{"bind_port": "2"},
	}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("decoded %#v\nwant    %#v", m, want)
	}
	if got := c.origins["haproxy_amphora"]["bind_port"]; got != (origin{"a.conf", 8}) {
		t.Errorf("origin after a.conf = %+v", got)
	}

	// A second source overwrites the origin of what it sets, and only that.
	c.source = "b.conf"
	if err := c.Decode([]byte("\n[haproxy-amphora]\nbind-port = 3\n"), map[string]any{}); err != nil {
		t.Fatal(err)
	}
	if got := c.origins["haproxy_amphora"]["bind_port"]; got != (origin{"b.conf", 3}) {
		t.Errorf("origin after b.conf = %+v", got)
	}
	if got := c.origins["default"]["debug"]; got != (origin{"a.conf", 2}) {
		t.Errorf("debug origin = %+v", got)
	}

	if _, err := c.Encode(nil); err == nil {
		t.Error("Encode succeeded")
	}
}

func TestInterpolate(t *testing.T) {
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "plain", want: "plain"},
		{in: "a$$b", want: "a$b"},
		{in: `a\$b`, want: "a$b"},
		{in: "$$$$", want: "$$"},
		{in: "cost: 5$", want: "cost: 5$"},
		{in: "$ x $1 ${ ${1}", want: "$ x $1 ${ ${1}"},
		{in: "$$name", want: "$name"},
		{in: "a$name", wantErr: `"$name"`},
		{in: "$Name_2.x/y", wantErr: `"$Name_2.x"`},
		{in: "${name}", wantErr: `"${name}"`},
		{in: "x${haproxy_amphora.base_path}/y", wantErr: `"${haproxy_amphora.base_path}"`},
		// oslo turns \$ into $$ before scanning, so \$$x is "$" then $x.
		{in: `\$$x`, wantErr: `"$x"`},
	}
	for _, tt := range tests {
		got, err := interpolate(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "not supported") {
				t.Errorf("interpolate(%q) = %q, %v; want error naming %s", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("interpolate(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}
