// Command amphora-agent is the agent that runs inside an Octavia amphora.
//
//	amphora-agent [--config-file PATH]...   run the agent (the default)
//	amphora-agent --version                 print the version
//	amphora-agent <subcommand> [args]       run one of the tools below
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// defaultConfigFile is where the amphora image puts the controller's file.
const defaultConfigFile = "/etc/octavia/amphora-agent.conf"

// subcommand is a tool that shares the agent's binary (image scripts call
// them by name, as upstream's amphora-interface and haproxy-vrrp-check).
type subcommand struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// subcommands is the table later features add to.
var subcommands = map[string]subcommand{
	"interface":          {summary: "up|down <name|all>: apply or remove interface files in the namespace", run: runInterface},
	"haproxy-vrrp-check": {summary: "<stats socket>...: keepalived's HAProxy health check", run: runVRRPCheck},
	"config-drive":       {summary: "write the files of Nova's config drive (once per instance)", run: runConfigDrive},
	"health-checker":     {summary: "sctp [-t SECONDS] <address> <port>: keepalived's SCTP member check", run: runHealthCheck},
	"status":             {summary: "[--config-file PATH]... [--json]: what the agent and its daemons are doing (read-only)", run: runStatus},
}

// aliases are the names image scripts call: a symlink with one of these
// names runs the subcommand (busybox style).
var aliases = map[string]string{
	"amphora-interface":  "interface",
	"haproxy-vrrp-check": "haproxy-vrrp-check",
	// Octavia's LVS template names it in keepalived's MISC_CHECK.
	"amphora-health-checker": "health-checker",
}

func main() {
	os.Exit(run(argsFor(os.Args), os.Stdout, os.Stderr))
}

// argsFor turns an invocation through an alias into its subcommand.
func argsFor(argv []string) []string {
	if sub, ok := aliases[filepath.Base(argv[0])]; ok {
		return append([]string{sub}, argv[1:]...)
	}
	return argv[1:]
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if sc, ok := subcommands[args[0]]; ok {
			return sc.run(args[1:], stdout, stderr)
		}
		if args[0] == "help" {
			usage(stdout)
			return 0
		}
	}
	return runAgent(args, stdout, stderr)
}

func usage(w io.Writer) { io.WriteString(w, usageText()) }

// usageText is the agent's synopsis and the table of subcommands.
func usageText() string {
	var b strings.Builder
	b.WriteString("usage: amphora-agent [--config-file PATH]... | --version | <subcommand> [args]\n")
	names := make([]string, 0, len(subcommands))
	for n := range subcommands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "  %-20s %s\n", n, subcommands[n].summary)
	}
	b.WriteString("\nEach subcommand answers --help and --version.\n")
	return b.String()
}
