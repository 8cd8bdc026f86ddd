package config

import (
	"crypto/tls"
	"errors"
	"net"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// addConfSeeds seeds f with every configuration file of testdata and a
// few edge cases of the dialect.
func addConfSeeds(f *testing.F) {
	for _, file := range testkit.ReadFiles(f, "testdata/*.conf") {
		f.Add(file.Data)
	}
	for _, s := range []string{
		base,
		"\ufeff[DEFAULT]\r\ndebug = \"true\"\r\n",
		"[s]\na = one\n  two\n\t# three\n\nb: x=y\n",
		"[health_manager]\nheartbeat_key = a$$b\\$c\ncontroller_ip_port_list = [2001:db8::1]:5555, 2001:db8::2:5555\n",
		"[amphora_agent]\nnetwork_namespace = ..\nbase_path = $base\n",
		"  continuation first\n",
		"[x.y]\nk.l = 1\n",
	} {
		f.Add([]byte(s))
	}
}

// render writes entries back in the dialect's plainest form.
func render(entries []entry) string {
	var b strings.Builder
	for _, e := range entries {
		first, rest, _ := strings.Cut(e.value, "\n")
		b.WriteString("[" + e.section + "]\n" + e.key + " = \"" + first + "\"\n")
		for line := range strings.SplitSeq(rest, "\n") {
			if line != "" {
				b.WriteString("\t" + line + "\n")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

var parseMessages = map[string]bool{
	"continuation line without an option before it": true,
	"section header must end with ]":                true,
	"empty section name":                            true,
	`not a section, comment or "key = value" line`:  true,
	"empty option name":                             true,
	"option before any [section]":                   true,
}

// FuzzParseINI: the dialect parser never panics, what it returns is well
// formed, its errors never quote the line (it may hold the heartbeat key),
// and entries written back plainly parse to the same entries.
func FuzzParseINI(f *testing.F) {
	addConfSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := parseINI("f.conf", data)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			// The message is one of the parser's fixed texts, so the
			// line's content cannot leak into it.
			if !parseMessages[pe.Msg] || err.Error() != "f.conf:"+strconv.Itoa(pe.Line)+": "+pe.Msg {
				t.Fatalf("error %q", err)
			}
			return
		}
		last := 0
		for _, e := range entries {
			if e.section == "" || e.section != strings.TrimSpace(e.section) {
				t.Fatalf("section %q", e.section)
			}
			if e.key == "" || e.key != strings.TrimSpace(e.key) || strings.ContainsAny(e.key, "=:\n") {
				t.Fatalf("key %q", e.key)
			}
			if e.line <= last {
				t.Fatalf("line %d after %d", e.line, last)
			}
			last = e.line
		}
		// A key that begins with a comment or section character only
		// arises after trimming Unicode space and cannot be written
		// plainly; a section holding ']' neither.
		for _, e := range entries {
			if strings.ContainsAny(e.key[:1], "#;[") || strings.Contains(e.section, "]") || strings.ContainsFunc(e.key[:1], unicode.IsSpace) {
				return
			}
		}
		again, err := parseINI("g.conf", []byte(render(entries)))
		if err != nil {
			t.Fatalf("rendered entries do not parse: %v\n%q", err, render(entries))
		}
		if len(again) != len(entries) {
			t.Fatalf("%d entries, then %d after rendering %q", len(entries), len(again), render(entries))
		}
		for i := range entries {
			a, b := entries[i], again[i]
			if a.section != b.section || a.key != b.key || a.value != b.value {
				t.Fatalf("entry %d: %+v, then %+v after rendering", i, a, b)
			}
		}
	})
}

// fuzzSecret is appended as the heartbeat key; it must never show up in
// an error or a warning.
const fuzzSecret = "fuzz-S3CRET-k3y"

// FuzzLoad: any file loads or fails without panicking; a loaded config
// holds only values the agent can use safely (paths absolute, a namespace
// name that is one path element, ports in range, at least 1 s between
// heartbeats); LoadStrict never accepts what Load refuses and agrees with
// it; the heartbeat key is never repeated in a message.
func FuzzLoad(f *testing.F) {
	addConfSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		text := string(data) + "\n\n[health_manager]\nheartbeat_key = " + fuzzSecret + "\n"
		src := one(text)
		cfg, warnings, err := Load(src)
		strict, swarn, serr := LoadStrict(src)
		if !strings.Contains(string(data), fuzzSecret) {
			for _, m := range append(append(warnings, swarn...), errString(err), errString(serr)) {
				if strings.Contains(m, fuzzSecret) {
					t.Fatalf("message repeats the heartbeat key: %q", m)
				}
			}
		}
		if serr == nil {
			if err != nil {
				t.Fatalf("LoadStrict accepts what Load refuses: %v", err)
			}
			if !reflect.DeepEqual(cfg, strict) {
				t.Fatalf("Load and LoadStrict disagree:\n%+v\n%+v", cfg, strict)
			}
		}
		if err != nil {
			return
		}
		checkConfig(t, cfg)
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func checkConfig(t *testing.T, c *Config) {
	t.Helper()
	for name, p := range map[string]string{
		"ServerCA": c.ServerCA, "ServerCert": c.ServerCert, "NetworkDir": c.NetworkDir,
		"PluggedInterfacesFile": c.PluggedInterfacesFile, "NftablesRulesFile": c.NftablesRulesFile,
		"HAProxyUserGroupFile": c.HAProxyUserGroupFile, "PCIRescanFile": c.PCIRescanFile,
		"LVSMasqueradeScript": c.LVSMasqueradeScript, "KeepalivedCmd": c.KeepalivedCmd,
		"BasePath": c.BasePath, "BaseCertDir": c.BaseCertDir, "HAProxyCmd": c.HAProxyCmd,
	} {
		if !filepath.IsAbs(p) || strings.ContainsFunc(p, unicode.IsControl) {
			t.Fatalf("%s = %q", name, p)
		}
	}
	if c.Namespace == "" || c.Namespace == "." || c.Namespace == ".." || strings.ContainsAny(c.Namespace, "/\x00 ") {
		t.Fatalf("Namespace = %q", c.Namespace)
	}
	if c.BindPort < 1 || c.BindPort > 65535 {
		t.Fatalf("BindPort = %d", c.BindPort)
	}
	if net.ParseIP(c.BindHost) == nil {
		t.Fatalf("BindHost = %q", c.BindHost)
	}
	if c.HeartbeatInterval < time.Second || c.RequestReadTimeout < time.Second || c.RespawnInterval < 0 || c.RespawnCount < 0 {
		t.Fatalf("durations or counts: %+v", c)
	}
	if c.MaxUploadBytes <= 0 {
		t.Fatalf("MaxUploadBytes = %d", c.MaxUploadBytes)
	}
	if c.TLSMinVersion < tls.VersionTLS12 {
		t.Fatalf("TLSMinVersion = %x", c.TLSMinVersion)
	}
	if c.Topology != TopologySingle && c.Topology != TopologyActiveStandby {
		t.Fatalf("Topology = %q", c.Topology)
	}
	for _, hp := range c.ControllerIPPortList {
		host, port, err := net.SplitHostPort(hp)
		n, perr := strconv.Atoi(port)
		if err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			t.Fatalf("controller %q: %v", hp, err)
		}
	}
}
