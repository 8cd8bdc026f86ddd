package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/cli"
)

// Every subcommand, the agent itself and every alias meet one contract
// -h, -help and --help print the usage on stdout and
// exit 0; --version prints the version on stdout and exits 0; an unknown
// flag exits 2 with the usage on stderr and nothing on stdout.
func TestEveryCommandHelpAndVersion(t *testing.T) {
	invocations := map[string][]string{"amphora-agent": {"/usr/local/bin/amphora-agent"}}
	for _, name := range cli.Names() {
		invocations[name] = []string{"/usr/local/bin/amphora-agent", name}
	}
	for alias := range cli.Aliases {
		invocations[alias+" (alias)"] = []string{"/usr/local/bin/" + alias}
	}
	for name, argv := range invocations {
		for _, tc := range []struct {
			flag   string
			code   int
			stdout string // a prefix; "" for no output
			stderr string // a substring; "" for no output
		}{
			{"-h", 0, "usage: ", ""},
			{"-help", 0, "usage: ", ""},
			{"--help", 0, "usage: ", ""},
			{"--version", 0, "amphora-agent " + cli.Version + "\n", ""},
			{"--no-such-flag", 2, "", "usage: "},
		} {
			var stdout, stderr bytes.Buffer
			code := run(cli.ArgsFor(append(append([]string(nil), argv...), tc.flag)), &stdout, &stderr)
			okOut := strings.HasPrefix(stdout.String(), tc.stdout) && (tc.stdout != "" || stdout.Len() == 0)
			okErr := strings.Contains(stderr.String(), tc.stderr) && (tc.stderr != "" || stderr.Len() == 0)
			if code != tc.code || !okOut || !okErr {
				t.Errorf("%s %s: exit %d, want %d\nstdout: %q\nstderr: %q", name, tc.flag, code, tc.code, stdout.String(), stderr.String())
			}
			if tc.code == 0 && tc.stdout == "usage: " && !strings.Contains(stdout.String(), "-version") {
				t.Errorf("%s %s: the usage does not list --version:\n%s", name, tc.flag, stdout.String())
			}
		}
	}
}

// `status --help` carries the exit statuses a script relies on.
func TestStatusHelpExitTable(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"status", "--help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("status --help: exit %d\n%s", code, stderr.String())
	}
	for _, want := range []string{"  0  the agent runs", "  1  degraded", "  2  bad command line", "  3  the agent is not running", "  4  unknown"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("status --help lacks %q:\n%s", want, stdout.String())
		}
	}
}
