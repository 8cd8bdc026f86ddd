package cmdline

import (
	"bytes"
	"strings"
	"testing"
)

func TestParseNoArgsRefusesArguments(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		code     int
		exit     bool
		inStderr string
	}{
		{args: []string{"--dry"}},
		{args: []string{"--dry", "extra"}, code: ExitUsage, exit: true, inStderr: `cmd sub: unexpected argument "extra"`},
		{args: []string{"--nope"}, code: ExitUsage, exit: true, inStderr: "flag provided but not defined"},
		{args: []string{"--version", "extra"}, exit: true},
	} {
		var stdout, stderr bytes.Buffer
		f := New("cmd sub", "usage: cmd sub [--dry]", "1.0", &stdout, &stderr)
		f.Bool("dry", false, "do nothing")
		code, exit := f.ParseNoArgs(tc.args)
		if code != tc.code || exit != tc.exit {
			t.Errorf("%q: code %d exit %v, want %d %v", tc.args, code, exit, tc.code, tc.exit)
		}
		if tc.inStderr != "" && (!strings.Contains(stderr.String(), tc.inStderr) || !strings.Contains(stderr.String(), "usage: cmd sub")) {
			t.Errorf("%q: stderr %q, want %q and the usage", tc.args, stderr.String(), tc.inStderr)
		}
	}
}
