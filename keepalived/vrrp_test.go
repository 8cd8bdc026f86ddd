package keepalived

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

func TestCheckScriptSumsExitCodes(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed")
	}
	base := t.TempDir()
	v := NewVRRP(VRRPOptions{Base: base, Options: Options{Log: zaptest.NewLogger(t)},
		Validate: func(context.Context, string) (string, error) { return "", nil }})
	if err := v.Upload(context.Background(), []byte("vrrp_instance x {}\n")); err != nil {
		t.Fatal(err)
	}
	script := v.Layout().CheckScriptPath()
	st, err := os.Stat(script)
	if err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("check_script.sh: %v %v", st, err)
	}
	data, _ := os.ReadFile(script)
	dir := filepath.Join(base, "vrrp", "check_scripts")
	if !strings.HasPrefix(string(data), "#!/bin/bash\n") || !strings.Contains(string(data), "for file in "+dir+"/*\n") ||
		!strings.Contains(string(data), "shopt -s nullglob") {
		t.Fatalf("check_script.sh:\n%s", data)
	}
	run := func() int {
		t.Helper()
		err := exec.Command(script).Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	}
	// An empty folder is healthy.
	if got := run(); got != 0 {
		t.Fatalf("empty check_scripts: exit %d", got)
	}
	// Scripts need not be executable: each runs with bash.
	for name, body := range map[string]string{"a.sh": "exit 0", "b.sh": "exit 2", "c": "exit 3"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := run(); got != 5 {
		t.Fatalf("exit codes 0+2+3: got %d, want 5", got)
	}
}

func TestUploadWritesFilesAndRecordsEnabled(t *testing.T) {
	base := t.TempDir()
	var validated string
	v := NewVRRP(VRRPOptions{Base: base, Options: Options{Log: zaptest.NewLogger(t)},
		Validate: func(_ context.Context, path string) (string, error) {
			data, _ := os.ReadFile(path)
			validated = string(data)
			return "", nil
		}})
	body := []byte("vrrp_instance a {}\n")
	if err := v.Upload(context.Background(), body); err != nil {
		t.Fatal(err)
	}
	l := v.Layout()
	st, err := os.Stat(l.ConfigPath())
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("config: %v %v", st, err)
	}
	if got, _ := os.ReadFile(l.ConfigPath()); string(got) != string(body) || validated != string(body) {
		t.Fatalf("stored %q, validated %q", got, validated)
	}
	if fi, err := os.Stat(CheckScripts{Layout: VRRPLayout{Base: base}}.Dir()); err != nil || !fi.IsDir() {
		t.Fatalf("check_scripts folder: %v", err)
	}
	if _, err := os.Stat(l.stagedPath()); !os.IsNotExist(err) {
		t.Fatalf("staged file left behind: %v", err)
	}
	running, recorded, err := v.k.d.ReadDesired()
	if err != nil || !running || !recorded {
		t.Fatalf("desired state after the first upload: running %v, recorded %v, %v", running, recorded, err)
	}
}

func TestInvalidUploadKeepsTheOldConfig(t *testing.T) {
	base := t.TempDir()
	v := NewVRRP(VRRPOptions{Base: base, Options: Options{Log: zaptest.NewLogger(t)},
		Validate: func(_ context.Context, path string) (string, error) {
			data, _ := os.ReadFile(path)
			if strings.Contains(string(data), "bogus") {
				return "(Line 1) Unknown keyword 'bogus'", errors.New("exit status 5")
			}
			return "", nil
		}})
	ctx := context.Background()
	if err := v.Upload(ctx, []byte("good\n")); err != nil {
		t.Fatal(err)
	}
	err := v.Upload(ctx, []byte("bogus\n"))
	fe, ok := fault.As(err)
	if !ok || fe.Kind != fault.KindInvalid || fe.Message != "Invalid request" || fe.Details != "(Line 1) Unknown keyword 'bogus'" {
		t.Fatalf("invalid upload: %#v", err)
	}
	if got, _ := os.ReadFile(v.Layout().ConfigPath()); string(got) != "good\n" {
		t.Fatalf("stored config after a rejected upload: %q", got)
	}
	if got, _ := os.ReadFile(v.Layout().failedPath()); string(got) != "bogus\n" {
		t.Fatalf("rejected config kept as %q", got)
	}
}

// keepalived -t itself: a config whose braces do not pair up is refused
// with keepalived's words and kept aside, also when a check script makes
// keepalived exit with 6; one keepalived only finds fault with (an
// unknown keyword, a virtual server without real servers) is stored and
// the complaints logged, as upstream stores every config; a clean one is
// stored without a word.
func TestKeepalivedTest(t *testing.T) {
	bin, err := exec.LookPath("keepalived")
	if err != nil {
		t.Skip("keepalived is not installed (make test installs it)")
	}
	core, logs := observer.New(zap.WarnLevel)
	v := NewVRRP(VRRPOptions{Base: t.TempDir(), Options: Options{Cmd: bin, Log: zap.New(core)}})
	ctx := context.Background()
	tracked := "vrrp_script chk {\n    script /bin/true\n}\nvrrp_instance x {\n    interface lo\n    virtual_router_id 7\n    track_script {\n        chk\n    }\n"
	for _, cut := range []string{"vrrp_instance x {\n    interface lo\n", tracked, "global_defs {\n}\n}\n"} {
		err = v.Upload(ctx, []byte(cut))
		fe, ok := fault.As(err)
		if !ok || fe.Kind != fault.KindInvalid || !strings.Contains(fe.Details, "'}'") {
			t.Fatalf("braces that do not pair up %q: %v", cut, err)
		}
		if _, err := os.Stat(v.Layout().ConfigPath()); !os.IsNotExist(err) {
			t.Fatalf("a refused first upload was stored: %v", err)
		}
		if got, _ := os.ReadFile(v.Layout().failedPath()); string(got) != cut {
			t.Fatalf("refused config kept as %q", got)
		}
	}
	for _, c := range []struct{ body, complaint string }{
		{"vrrp_instance x {\n    bogus_keyword 1\n}\n", "Unknown keyword 'bogus_keyword'"},
		{"virtual_server 192.0.2.1 53 {\n    protocol UDP\n}\n", "has no real servers"},
		{tracked + "}\n", ""}, // exit status 6, as every controller VRRP config
		{"global_defs {\n    router_id amp\n}\n", ""},
	} {
		body, complaint := c.body, c.complaint
		before := logs.Len()
		if err := v.Upload(ctx, []byte(body)); err != nil {
			t.Fatalf("%q refused: %v", body, err)
		}
		if got, _ := os.ReadFile(v.Layout().ConfigPath()); string(got) != body {
			t.Fatalf("stored %q, want %q", got, body)
		}
		warned := logs.All()[before:]
		switch {
		case complaint == "" && len(warned) != 0:
			t.Fatalf("%q: warned %v", body, warned)
		case complaint != "" && (len(warned) != 1 || !strings.Contains(fmt.Sprint(warned[0].ContextMap()["output"]), complaint)):
			t.Fatalf("%q: warned %v, want keepalived's %q", body, warned, complaint)
		}
	}
}

func TestArgs(t *testing.T) {
	v := NewVRRP(VRRPOptions{Base: "/var/lib/octavia", Options: Options{LogFacility: 1}})
	got := strings.Join(v.k.argv, " ")
	want := "--dont-fork --log-console --log-facility=1 -f /var/lib/octavia/vrrp/octavia-keepalived.conf -p /var/lib/octavia/vrrp/octavia-keepalived.pid" +
		" -r /var/lib/octavia/vrrp/octavia-keepalived.vrrp.pid -c /var/lib/octavia/vrrp/octavia-keepalived.check.pid"
	if got != want {
		t.Fatalf("args:\n%s\nwant\n%s", got, want)
	}
}

// Every way keepalived reads an include line is refused before keepalived
// runs, naming the line; the configs the controller renders (its LVS
// templater's, in testdata), and words that only look like an include,
// pass.
func TestRefuseIncludes(t *testing.T) {
	rendered := testkit.ReadFiles(t, filepath.Join("testdata", "lvs_*.conf"))
	base := rendered[0].Data
	refused := []string{
		"include /etc/shadow",
		"  \tinclude /etc/shadow",
		"include /var/lib/octavia/certs/*/*.pem # the listeners' keys",
		`include "/etc/shadow"`,
		`"include" /etc/shadow`,
		"includer /etc/shadow",
		"includea /etc/*",
		"@amphora include /etc/shadow",
		"@^other @amphora include /etc/shadow",
		"~SEQ(i, 1, 3) include /etc/shadow$i",
		"$SECRET=include /etc/shadow",
		"$SECRET = includew /etc/shadow",
		"vrrp_instance x {\n    include /etc/shadow\n}",
	}
	for _, line := range refused {
		err := refuseIncludes(append(append([]byte{}, base...), line+"\n"...))
		fe, ok := fault.As(err)
		if !ok || fe.Kind != fault.KindInvalid || !strings.Contains(fe.Details, "may not include other files") || !strings.Contains(fe.Details, "/") {
			t.Errorf("%q: %v", line, err)
		}
	}
	passed := []string{
		"# include /etc/shadow",
		"! include /etc/shadow",
		"virtual_ipaddress_excluded {\n}",
		"notify_master \"/bin/echo include /etc/shadow\"",
		"included /etc/shadow",
		"$INC=inc",
		"@amphora",
	}
	for _, line := range passed {
		if err := refuseIncludes(append(append([]byte{}, base...), line+"\n"...)); err != nil {
			t.Errorf("%q: %v", line, err)
		}
	}
	for _, file := range rendered {
		if err := refuseIncludes(file.Data); err != nil {
			t.Errorf("%s: %v", file.Path, err)
		}
	}
}

// Only keepalived's lines about the config itself are told; those naming
// another file are counted and left out.
func TestOutputAbout(t *testing.T) {
	const path = "/var/lib/octavia/vrrp/octavia-keepalived.conf.new"
	out := strings.Join([]string{
		"(Line 4) Unknown keyword 'bogus'",
		"(/etc/shadow: Line 1) Unknown keyword 'root:secret'",
		"(" + path + ": Line 6) Unknown keyword 'other'",
		"(/etc/shadow: Line 2) Extra '}' found",
		"There are 1 missing '}'s or extra '{'s",
	}, "\n")
	kept, others := outputAbout(out, path)
	want := "(Line 4) Unknown keyword 'bogus'\n(" + path + ": Line 6) Unknown keyword 'other'\nThere are 1 missing '}'s or extra '{'s"
	if kept != want || others != 2 {
		t.Fatalf("kept %q, %d others; want %q, 2", kept, others, want)
	}
}

// The real keepalived -t on a config that includes a secret (0600, root's)
// through parameter definitions, which no look at the text sees: refused,
// and neither the answer nor the log holds a word of the secret, whether
// its braces pair up (keepalived merely complains) or not (keepalived
// refuses).
func TestKeepalivedTestLeavesOutIncludedFiles(t *testing.T) {
	bin, err := exec.LookPath("keepalived")
	if err != nil {
		t.Skip("keepalived is not installed (make test installs it)")
	}
	const marker = "MARKER-5e6f7a8b-do-not-echo"
	secret := filepath.Join(t.TempDir(), "secret")
	core, logs := observer.New(zap.DebugLevel)
	v := NewVRRP(VRRPOptions{Base: t.TempDir(), Options: Options{Cmd: bin, Log: zap.New(core)}})
	for _, content := range []string{marker + " hunter2\n", marker + " hunter2\n}\n"} {
		if err := os.WriteFile(secret, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		body := "$A=inc\n$B=lude\nglobal_defs {\n    router_id amp\n}\n${A}${B} " + secret + "\n"
		err := v.Upload(context.Background(), []byte(body))
		fe, ok := fault.As(err)
		if !ok || fe.Kind != fault.KindInvalid || !strings.Contains(fe.Details, "other than the uploaded config") || strings.Contains(fe.Details, marker) {
			t.Errorf("secret %q: %v", content, err)
		}
		if _, err := os.Stat(v.Layout().ConfigPath()); !os.IsNotExist(err) {
			t.Fatalf("the config was stored: %v", err)
		}
		out, err := Test(bin, "")(context.Background(), v.Layout().failedPath())
		if !errors.Is(err, ErrIncludesFiles) || strings.Contains(out, marker) {
			t.Errorf("keepalived -t, secret %q: %v\n%s", content, err, out)
		}
	}
	for _, entry := range logs.All() {
		if strings.Contains(entry.Message, marker) || strings.Contains(strings.Join(mapValues(entry.ContextMap()), " "), marker) {
			t.Errorf("logged the secret: %s %v", entry.Message, entry.ContextMap())
		}
	}
	if err := v.Upload(context.Background(), []byte("global_defs {\n    router_id amp\n}\n")); err != nil {
		t.Fatalf("a config without an include: %v", err)
	}
}

func mapValues(m map[string]any) []string {
	var out []string
	for _, v := range m {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
