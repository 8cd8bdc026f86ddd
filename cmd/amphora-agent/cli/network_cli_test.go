package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInterfaceSubcommand checks the command line of `interface`, the
// amphora-interface replacement; what it does to interfaces is covered by
// the netns tests and the system test.
func TestInterfaceSubcommand(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "amphora-agent.conf")
	text := "[amphora_agent]\nagent_server_network_dir = " + filepath.Join(dir, "interfaces") +
		"\nnetwork_namespace = aa-cli-test-absent\n"
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	evil := `{"name": "evil", "addresses": [], "routes": [], "rules": [], "scripts": {"up": [{"command": "/bin/true"}], "down": []}}`
	if err := os.MkdirAll(filepath.Join(dir, "outside"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "outside", "evil.json"), []byte(evil), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args   []string
		status int
		stderr string
	}{
		{[]string{"interface"}, 1, "usage: amphora-agent interface"},
		{[]string{"interface", "up"}, 1, "usage:"},
		{[]string{"interface", "sideways", "eth1"}, 1, "usage:"},
		{[]string{"interface", "--config-file", filepath.Join(dir, "missing.conf"), "up", "all"}, 2, "Error:"},
		// No interface files: nothing to do.
		{[]string{"interface", "--config-file", conf, "up", "all"}, 0, ""},
		{[]string{"interface", "--config-file", conf, "down", "all"}, 0, ""},
		// A name without a file is an error, as upstream.
		{[]string{"interface", "--config-file", conf, "up", "eth7"}, 2, `could not find interface "eth7"`},
		// A name is looked up among the folder's files, never made a path:
		// the file outside the folder is not applied.
		{[]string{"interface", "--config-file", conf, "up", "../outside/evil"}, 2, `could not find interface "../outside/evil"`},
		{[]string{"interface", "--config-file", conf, "down", filepath.Join(dir, "outside", "evil")}, 2, "could not find interface"},
	}
	for _, tc := range cases {
		var stdout, stderr bytes.Buffer
		if got, _ := Run(tc.args, &stdout, &stderr); got != tc.status {
			t.Errorf("%v: exit %d, want %d\n%s", tc.args, got, tc.status, stderr.String())
		}
		if !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("%v: stderr %q lacks %q", tc.args, stderr.String(), tc.stderr)
		}
	}
	var out bytes.Buffer
	Usage(&out)
	if !strings.Contains(out.String(), "interface") {
		t.Errorf("usage does not list the interface subcommand:\n%s", out.String())
	}
}
