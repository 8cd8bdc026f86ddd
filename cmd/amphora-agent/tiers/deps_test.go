package tiers_test

import (
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// The layering of the module, checked on the import graph that `go list`
// reports (as Tailscale checks its own). A package's imports include those
// of its tests, without build tags and under each tier's tag (tagSets,
// read from the build lines), so that test code keeps to the layers too.
//
// Patterns are relative to the module: "x" is that package, "x/..." is x
// and the packages under it, "..." is every package of the module. In
// deny, a path outside the module (net/http) means that package, and
// "non-std" any package outside both the module and the standard library.
//
// The HTTP rule's exceptions: agent/api serves the REST API,
// agent/metrics the PROMETHEUS listeners' metrics endpoint (and its test
// stand-in for HAProxy's exporter), cmd/amphora-agent wires the server,
// and cmd/amphora-agent/tiers holds the tier tests and their harness
// (testenv calls the API, topo runs member HTTP servers and clients),
// which only the tier tests can import.
var layerRules = []layerRule{
	{
		why:  "domain packages sit below the agent core",
		from: []string{"haproxy/...", "keepalived/...", "netns/...", "certs/..."},
		deny: []string{"agent", "agent/api/...", "agent/config/...", "agent/health/...", "agent/metrics/...", "agent/sdnotify"},
	},
	{
		why:  "leaf helpers import nothing of this module",
		from: []string{"agent/acceptretry", "agent/caller", "agent/dirlock", "agent/etag", "agent/fault", "agent/fsutil", "agent/journalfwd", "agent/logging", "agent/pidfile", "agent/procgroup", "agent/tick"},
		deny: []string{"..."},
		// Their own test helpers and the shared test kit, themselves
		// free of the module.
		allow: []string{"agent/acceptretry/acceptretrytest", "agent/journalfwd/journalfwdtest", "agent/procgroup/procgrouptest", "agent/testkit"},
	},
	{
		why:  "test helpers of leaf helpers import nothing of this module",
		from: []string{"agent/acceptretry/acceptretrytest", "agent/journalfwd/journalfwdtest", "agent/procgroup/procgrouptest"},
		deny: []string{"..."},
	},
	{
		// Every package's tests may import it, so it may import none.
		why:  "the shared test kit imports nothing of this module",
		from: []string{"agent/testkit"},
		deny: []string{"..."},
	},
	{
		// Package health's own tests read what it sends with it.
		why:  "the tests' heartbeat reader imports nothing of this module",
		from: []string{"agent/health/healthtest"},
		deny: []string{"..."},
	},
	{
		// Package version lookups run commands like everyone else, and
		// interface counters come from netns's one link listing.
		why:   "host facts import only the command runner and netns",
		from:  []string{"agent/sysinfo"},
		deny:  []string{"..."},
		allow: []string{"agent/procgroup", "agent/testkit", "netns"},
	},
	{
		// Engines a reader can judge alone: the flag contract of the
		// binary's commands, the SCTP probe the health checker and the
		// tier tests' SCTP peer share, and the stats client's socket
		// engine (its tests run a real HAProxy).
		why:   "self-contained engines import only the standard library and x/sys",
		from:  []string{"cmd/amphora-agent/internal/cmdline", "keepalived/sctpcheck", "haproxy/stats/internal/rawsock"},
		deny:  []string{"...", "non-std"},
		allow: []string{"golang.org/x/sys/unix", "haproxy/stats/haproxytest"},
	},
	{
		// What a receiving SCTP stack checks, for the probe's tests and
		// the tier tests' SCTP peer.
		why:   "the SCTP probe's packet checker imports only the probe and the standard library",
		from:  []string{"keepalived/sctpcheck/sctpchecktest"},
		deny:  []string{"...", "non-std"},
		allow: []string{"keepalived/sctpcheck"},
	},
	{
		why:   "the stats client imports only its socket engine",
		from:  []string{"haproxy/stats"},
		deny:  []string{"..."},
		allow: []string{"haproxy/stats/internal/rawsock", "haproxy/stats/haproxytest", "agent/testkit"},
	},
	{
		// Everything reads the configuration and tests everywhere make
		// certificates, so neither may lean on anything above it; the
		// shared test kit imports nothing either, nor configtest beyond
		// the configuration (the configuration's tests check configtest's
		// guard against the option table, their own test code).
		why:   "the configuration and the dev PKI import nothing of this module",
		from:  []string{"agent/config", "certs/devpki"},
		deny:  []string{"..."},
		allow: []string{"agent/testkit", "agent/config/configtest"},
	},
	{
		why:   "the configuration's test helper imports only the configuration",
		from:  []string{"agent/config/configtest"},
		deny:  []string{"..."},
		allow: []string{"agent/config"},
	},
	{
		// The supervision core writes its state atomically, reads pid
		// files, forwards output to the journal and sees whether a
		// client waits for a start like everyone else; nothing of the
		// agent or the domains.
		why:   "the supervision core imports only leaf helpers",
		from:  []string{"agent/procwatch"},
		deny:  []string{"..."},
		allow: []string{"agent/caller", "agent/fsutil", "agent/journalfwd", "agent/journalfwd/journalfwdtest", "agent/pidfile", "agent/tick", "agent/testkit"},
	},
	{
		// The TLS gate retries accepts like the API once did; its tests
		// make certificates with the dev PKI.
		why:   "the TLS gate imports only the accept-retry helper",
		from:  []string{"agent/gate"},
		deny:  []string{"..."},
		allow: []string{"agent/acceptretry", "agent/acceptretry/acceptretrytest", "certs/devpki"},
	},
	{
		why:   "memory trim imports only the shared ticker",
		from:  []string{"agent/memtrim"},
		deny:  []string{"..."},
		allow: []string{"agent/tick", "agent/testkit"},
	},
	{
		// HAProxy's page is translated, and the tests' exporter stands in,
		// without anything of the agent.
		why:   "the metrics page's HAProxy translation and test exporter import nothing of the agent",
		from:  []string{"agent/metrics/promex", "agent/metrics/metricstest"},
		deny:  []string{"..."},
		allow: []string{"haproxy/stats/haproxytest"},
	},
	{
		why:    "only the binary wires the metrics endpoint",
		from:   []string{"..."},
		except: []string{"cmd/amphora-agent", "agent/metrics/...", "cmd/amphora-agent/tiers/..."},
		deny:   []string{"agent/metrics/..."},
	},
	{
		// The tier tests check the links the package ships against the
		// tools' aliases.
		why:    "only main runs the tools",
		from:   []string{"..."},
		except: []string{"cmd/amphora-agent", "cmd/amphora-agent/tiers/..."},
		deny:   []string{"cmd/amphora-agent/cli/..."},
	},
	{
		why:    "nothing imports the tier tests or their harness",
		from:   []string{"..."},
		except: []string{"cmd/amphora-agent/tiers/..."},
		deny:   []string{"cmd/amphora-agent/tiers/..."},
	},
	{
		// They drive the built binary; what they import of the product
		// is its file formats and test stand-ins, never the Agent.
		why:  "the tier tests reach the agent only through the binary",
		from: []string{"cmd/amphora-agent/tiers/..."},
		deny: []string{"agent", "agent/api/..."},
	},
	{
		why:    "only the API and the binary speak HTTP",
		from:   []string{"..."},
		except: []string{"agent/api", "agent/metrics/...", "cmd/amphora-agent", "cmd/amphora-agent/tiers/..."},
		deny:   []string{"net/http/..."},
	},
}

const modulePath = "github.com/amphora-agent/amphora-agent"

type layerRule struct {
	why    string
	from   []string // packages the rule applies to
	except []string // packages of from it does not apply to
	deny   []string // imports forbidden to them
	allow  []string // imports of deny that are nonetheless fine
}

// importGraph maps each package of the module (relative path, "." for the
// root) to what it and its tests import: module packages relative,
// others by their import path.
type importGraph map[string][]string

func TestLayering(t *testing.T) {
	g := loadGraph(t)
	if len(g) < 10 {
		t.Fatalf("go list found only %d packages: %v", len(g), g)
	}
	for _, v := range layerViolations(g, layerRules) {
		t.Error(v)
	}
}

// TestLayerRulesNameRealPackages: a rule whose packages were renamed away
// would pass forever, so every pattern must still match something.
func TestLayerRulesNameRealPackages(t *testing.T) {
	g := loadGraph(t)
	for _, r := range layerRules {
		for _, p := range append(append([]string(nil), r.from...), r.except...) {
			found := false
			for pkg := range g {
				found = found || matchPkg(p, pkg, g)
			}
			if !found {
				t.Errorf("rule %q: %q matches no package of the module", r.why, p)
			}
		}
	}
}

// TestLayerViolations runs the checker on made-up graphs, so that a
// checker that never reports anything fails here.
func TestLayerViolations(t *testing.T) {
	cases := []struct {
		name string
		g    importGraph
		want []string
	}{
		{
			name: "clean",
			g: importGraph{
				"agent":                                 {"haproxy", "netns", "agent/fault", "sync"},
				"agent/api":                             {"agent", "net/http", "net/http/httptest"},
				"agent/fault":                           {"errors"},
				"haproxy":                               {"netns", "agent/fault", "agent/procwatch"},
				"haproxy/stats":                         {"haproxy/stats", "net"}, // an external test imports its own package
				"netns":                                 {"agent/fault"},
				"cmd/amphora-agent":                     {"agent", "agent/api", "agent/metrics", "cmd/amphora-agent/cli", "net/http"},
				"cmd/amphora-agent/cli":                 {"agent", "netns"},
				"agent/metrics":                         {"agent/metrics/promex", "keepalived", "net/http"},
				"agent/metrics/promex":                  {"bufio"},
				"cmd/amphora-agent/tiers":               {"cmd/amphora-agent/cli", "agent/metrics", "cmd/amphora-agent/tiers/internal/topo", "net/http"},
				"cmd/amphora-agent/tiers/internal/topo": {"net/http"},
			},
		},
		{
			name: "the binary's packages imported from below",
			g: importGraph{
				"agent":                                 {"cmd/amphora-agent/cli"},
				"netns":                                 {"cmd/amphora-agent/tiers/internal/topo"},
				"keepalived":                            {"agent/metrics"},
				"agent/health":                          {"agent/metrics/promex"},
				"agent/metrics":                         {},
				"agent/metrics/promex":                  {"agent/metrics"},
				"cmd/amphora-agent/cli":                 {},
				"cmd/amphora-agent/tiers/internal/topo": {},
			},
			want: []string{
				"agent imports cmd/amphora-agent/cli: only main runs the tools",
				"agent/health imports agent/metrics/promex: only the binary wires the metrics endpoint",
				"agent/metrics/promex imports agent/metrics: the metrics page's HAProxy translation and test exporter import nothing of the agent",
				"keepalived imports agent/metrics: domain packages sit below the agent core",
				"keepalived imports agent/metrics: only the binary wires the metrics endpoint",
				"netns imports cmd/amphora-agent/tiers/internal/topo: nothing imports the tier tests or their harness",
			},
		},
		{
			name: "gate and memtrim import more than their helpers",
			g: importGraph{
				"agent/gate":        {"agent/acceptretry", "agent/fault"},
				"agent/acceptretry": {},
				"agent/fault":       {},
				"agent/memtrim":     {"agent/tick", "netns"},
				"agent/tick":        {},
				"netns":             {},
			},
			want: []string{
				"agent/gate imports agent/fault: the TLS gate imports only the accept-retry helper",
				"agent/memtrim imports netns: memory trim imports only the shared ticker",
			},
		},
		{
			name: "self-contained engines import the module or a library",
			g: importGraph{
				"cmd/amphora-agent/internal/cmdline": {"flag", "agent/config"},
				"keepalived/sctpcheck":               {"golang.org/x/sys/unix", "github.com/vishvananda/netlink"},
				"haproxy/stats/internal/rawsock":     {"golang.org/x/sys/unix", "haproxy/stats/haproxytest", "haproxy/stats"},
				"haproxy/stats":                      {"haproxy/stats/internal/rawsock", "agent/fsutil"},
				"haproxy/stats/haproxytest":          {"haproxy/stats"},
				"agent/config":                       {"github.com/spf13/viper", "agent/fault"},
				"certs/devpki":                       {"certs"},
				"certs":                              {},
				"agent/fault":                        {},
				"agent/fsutil":                       {},
			},
			want: []string{
				"agent/config imports agent/fault: the configuration and the dev PKI import nothing of this module",
				"certs/devpki imports certs: the configuration and the dev PKI import nothing of this module",
				"cmd/amphora-agent/internal/cmdline imports agent/config: self-contained engines import only the standard library and x/sys",
				"haproxy/stats imports agent/fsutil: the stats client imports only its socket engine",
				"haproxy/stats/internal/rawsock imports haproxy/stats: self-contained engines import only the standard library and x/sys",
				"keepalived/sctpcheck imports github.com/vishvananda/netlink: self-contained engines import only the standard library and x/sys",
			},
		},
		{
			name: "tier tests import the Agent",
			g: importGraph{
				"agent":                   {},
				"agent/api":               {"agent"},
				"agent/config":            {},
				"cmd/amphora-agent/tiers": {"agent/api", "agent/config"},
				"cmd/amphora-agent/tiers/internal/testenv": {"agent"},
			},
			want: []string{
				"cmd/amphora-agent/tiers imports agent/api: the tier tests reach the agent only through the binary",
				"cmd/amphora-agent/tiers/internal/testenv imports agent: the tier tests reach the agent only through the binary",
			},
		},
		{
			name: "domain imports the agent core",
			g: importGraph{
				"agent":          {"haproxy"},
				"agent/config":   {},
				"haproxy":        {"agent"},
				"netns/sub":      {"agent/config"},
				"keepalived":     {"agent/fault"},
				"certs":          {"agent/health/x"},
				"agent/health/x": {},
				"agent/fault":    {},
			},
			want: []string{
				"certs imports agent/health/x: domain packages sit below the agent core",
				"haproxy imports agent: domain packages sit below the agent core",
				"netns/sub imports agent/config: domain packages sit below the agent core",
			},
		},
		{
			name: "leaf helper imports the module",
			g: importGraph{
				"agent/fsutil":  {"os"},
				"agent/pidfile": {"agent/fsutil", "agent/pidfile"},
			},
			want: []string{"agent/pidfile imports agent/fsutil: leaf helpers import nothing of this module"},
		},
		{
			name: "test kit imports the module",
			g: importGraph{
				"agent/fault":     {},
				"agent/testkit":   {"agent/fault", "testing"},
				"agent/procgroup": {"agent/testkit"},
				"agent/sysinfo":   {"agent/procgroup", "agent/testkit"},
			},
			want: []string{"agent/testkit imports agent/fault: the shared test kit imports nothing of this module"},
		},
		{
			name: "supervision core imports more than leaf helpers",
			g: importGraph{
				"agent/fsutil":    {},
				"agent/pidfile":   {},
				"agent/fault":     {},
				"netns":           {},
				"agent/procwatch": {"agent/fsutil", "agent/pidfile", "agent/fault", "netns"},
			},
			want: []string{
				"agent/procwatch imports agent/fault: the supervision core imports only leaf helpers",
				"agent/procwatch imports netns: the supervision core imports only leaf helpers",
			},
		},
		{
			name: "HTTP outside the API",
			g: importGraph{
				"agent/api":    {"net/http"},
				"agent/health": {"net/http/httptest"},
				"netns":        {"net/http"},
				"cmd/amphora-agent/tiers/internal/testenv": {"net/http"},
				"cmd/amphora-devenv":                       {"net/http"},
			},
			want: []string{
				"agent/health imports net/http/httptest: only the API and the binary speak HTTP",
				"cmd/amphora-devenv imports net/http: only the API and the binary speak HTTP",
				"netns imports net/http: only the API and the binary speak HTTP",
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := layerViolations(c.g, layerRules)
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
		})
	}
}

// layerViolations lists, sorted, each import that breaks a rule.
func layerViolations(g importGraph, rules []layerRule) []string {
	var out []string
	for pkg, imports := range g {
		for _, r := range rules {
			if !matchAny(r.from, pkg, g) || matchAny(r.except, pkg, g) {
				continue
			}
			for _, imp := range imports {
				if imp != pkg && matchAny(r.deny, imp, g) && !matchAny(r.allow, imp, g) {
					out = append(out, fmt.Sprintf("%s imports %s: %s", pkg, imp, r.why))
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

func matchAny(patterns []string, pkg string, g importGraph) bool {
	for _, p := range patterns {
		if matchPkg(p, pkg, g) {
			return true
		}
	}
	return false
}

// matchPkg reports whether pkg is pattern; "..." is any package of the
// module, that is any package the graph has an entry for, and "non-std"
// any other package whose path does not start like the standard
// library's (a first element without a dot).
func matchPkg(pattern, pkg string, g importGraph) bool {
	switch pattern {
	case "...":
		_, ok := g[pkg]
		return ok
	case "non-std":
		_, inModule := g[pkg]
		first, _, _ := strings.Cut(pkg, "/")
		return !inModule && strings.Contains(first, ".")
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pkg == pattern
}

// loadGraph asks `go list` for the module's packages under every tag set
// (tagSets: no tag, and each tag of the build lines alone).
func loadGraph(t *testing.T) importGraph {
	t.Helper()
	g := importGraph{}
	for _, tags := range tagSets(t) {
		cmd := exec.Command("go", "list", "-tags", tags,
			"-f", `{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}`,
			modulePath+"/...")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -tags %q: %v\n%s", tags, err, stderrOf(err))
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(line)
			pkg := relPkg(f[0])
			seen := map[string]bool{}
			for _, imp := range g[pkg] {
				seen[imp] = true
			}
			if _, ok := g[pkg]; !ok {
				g[pkg] = nil
			}
			for _, imp := range f[1:] {
				if imp = relPkg(imp); !seen[imp] {
					seen[imp] = true
					g[pkg] = append(g[pkg], imp)
				}
			}
		}
	}
	return g
}

func relPkg(path string) string {
	if path == modulePath {
		return "."
	}
	if rel, ok := strings.CutPrefix(path, modulePath+"/"); ok {
		return rel
	}
	return path
}

func stderrOf(err error) []byte {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.Stderr
	}
	return nil
}
