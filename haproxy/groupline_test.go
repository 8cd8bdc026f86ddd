package haproxy

import (
	"bytes"
	"regexp"
	"testing"
)

// upstreamGroupLine is the pattern upstream strips uploads with; the scan
// must remove exactly what it removes.
var upstreamGroupLine = regexp.MustCompile(`\s+group\s.+`)

var groupLineCases = []string{
	"",
	"global\n    group nogroup\n",
	"global\n    user nobody\n    group haproxy\n    maxconn 1000\n",
	"global\n\tgroup\thaproxy\r\n    maxconn 1\n",
	"  group x",
	"group nogroup\n",        // no whitespace before: kept
	"\n    group\n",          // nothing after the word: kept
	"\n    group \n",         // only the separator: kept
	"\n    group\nnext line", // the separator may be the newline
	"\n    groups x\n",
	"\n    mygroup x\n",
	"acl a hdr(x) -m str group  abc\nbackend b\n",
	"\n group a\n group b\n\n  group c",
	"\n group a group b\n",
	"\n\v group a\n",
	"\n group \xff\xfe\n",
	"x\n    group é\n",
}

func stripUpstream(in []byte) []byte { return upstreamGroupLine.ReplaceAll(in, nil) }

func TestStripGroupLinesAsUpstreamPattern(t *testing.T) {
	for _, in := range groupLineCases {
		sameAs(t, "stripGroupLines", []byte(in), stripGroupLines, stripUpstream, bytes.Equal)
	}
}

func FuzzStripGroupLines(f *testing.F) {
	fuzzSameAs(f, "stripGroupLines", groupLineCases, stripGroupLines, stripUpstream, bytes.Equal)
}
