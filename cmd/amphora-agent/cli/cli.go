package cli

import (
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
)

// Version is the binary's version, set at build time with -ldflags
// "-X github.com/amphora-agent/amphora-agent/cmd/amphora-agent/cli.Version=...".
var Version = "dev"

// tool is a subcommand (image scripts call them by name, as upstream's
// amphora-interface and haproxy-vrrp-check).
type tool struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// tools is the table later features add to.
var tools = map[string]tool{
	"interface":          {summary: "up|down <name|all>: apply or remove interface files in the namespace", run: runInterface},
	"haproxy-vrrp-check": {summary: "<stats socket>...: keepalived's HAProxy health check", run: runVRRPCheck},
	"config-drive":       {summary: "write the files of Nova's config drive (once per instance)", run: runConfigDrive},
	"health-checker":     {summary: "sctp [-t SECONDS] <address> <port>: keepalived's SCTP member check", run: runHealthCheck},
	"status":             {summary: "[--config-file PATH]... [--json]: what the agent and its daemons are doing (read-only)", run: runStatus},
}

// Aliases maps the names image scripts call to the subcommand each runs:
// a symlink to the binary with one of these names runs the subcommand
// (busybox style). The packages ship one link for each.
var Aliases = map[string]string{
	"amphora-interface":  "interface",
	"haproxy-vrrp-check": "haproxy-vrrp-check",
	// Octavia's LVS template names it in keepalived's MISC_CHECK.
	"amphora-health-checker": "health-checker",
}

// ArgsFor turns an invocation through an alias into its subcommand.
func ArgsFor(argv []string) []string {
	if sub, ok := Aliases[filepath.Base(argv[0])]; ok {
		return append([]string{sub}, argv[1:]...)
	}
	return argv[1:]
}

// Run runs the tool args[0] names and returns its exit code; ok is false
// when args name no tool.
func Run(args []string, stdout, stderr io.Writer) (code int, ok bool) {
	if len(args) == 0 {
		return 0, false
	}
	t, ok := tools[args[0]]
	if !ok {
		return 0, false
	}
	return t.run(args[1:], stdout, stderr), true
}

// Usage lists the command line and the tools.
func Usage(w io.Writer) { io.WriteString(w, UsageText()) }

// UsageText is the agent's synopsis and the table of tools.
func UsageText() string {
	var b strings.Builder
	b.WriteString("usage: amphora-agent [--config-file PATH]... | --version | <subcommand> [args]\n")
	for _, n := range Names() {
		fmt.Fprintf(&b, "  %-20s %s\n", n, tools[n].summary)
	}
	b.WriteString("\nEach subcommand answers --help and --version.\n")
	return b.String()
}

// Names lists the tools, sorted.
func Names() []string { return sortedKeys(tools) }

func sortedKeys[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
