package haproxy

import (
	"slices"
	"strings"
	"testing"
)

// fieldsAbsPaths is absPaths as strings.Fields splits: the scan for
// slashes must find the same paths.
func fieldsAbsPaths(data []byte) []string {
	var paths []string
	for _, tok := range strings.Fields(string(data)) {
		tok = strings.TrimRight(strings.Trim(tok, `"'`), ",")
		if strings.HasPrefix(tok, "/") {
			paths = append(paths, tok)
		}
	}
	return paths
}

var absPathCases = []string{
	"",
	"/a",
	"global\n    stats socket /run/x.sock mode 0666\n    server-state-file /var/lib/s\n",
	"bind :443 ssl crt-list \"/etc/l1.crtlist\", ca-file '/a/b',,\n",
	"log-format %{+Q}r\\ /x\\ a/b ./c \"'/q'\" ,/no",
	"a\u00a0/nbsp\u2028/ls\x85/nel \xc2\x85/c2nel \xe0\xc2\x85/bad\xf0\x9f\xe2\x80\x85/y",
	"\"\"/quoted/start //double",
}

func TestAbsPathsAsFields(t *testing.T) {
	for _, in := range absPathCases {
		sameAs(t, "absPaths", []byte(in), absPaths, fieldsAbsPaths, slices.Equal)
	}
}

func FuzzAbsPaths(f *testing.F) {
	fuzzSameAs(f, "absPaths", absPathCases, absPaths, fieldsAbsPaths, slices.Equal)
}
