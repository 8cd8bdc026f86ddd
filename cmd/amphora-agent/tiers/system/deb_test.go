//go:build system

// The Debian package `make deb` builds: its control fields and contents,
// and that installing and removing it in a throwaway bookworm chroot runs
// its maintainer scripts cleanly and leaves that system as it was. The
// host's own package database is never touched.
package system_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/config"
	"github.com/amphora-agent/amphora-agent/agent/testkit"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/cli"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
)

const (
	debMirror  = "http://deb.debian.org/debian"
	debSuite   = "bookworm"
	debUnit    = "amphora-agent.service"
	debUnitDir = "/lib/systemd/system"
)

// The LVS masquerade script, under upstream's image name and Debian's
// octavia-agent name.
const (
	debMasquerade       = "/usr/local/bin/lvs-masquerade.sh"
	debDebianMasquerade = "/usr/bin/octavia-agent-lvs-masquerade"
	debUDPMasquerade    = "/usr/local/bin/udp-masquerade.sh" // its name before Octavia 8
)

// debConffiles are the package's files under /etc, each a conffile: rsyslog's
// socket for Octavia's HAProxy configs and NetworkManager's settings, as
// upstream's amphora-agent image element ships them.
var debConffiles = []string{"/etc/rsyslog.d/55-octavia-socket.conf", "/etc/NetworkManager/conf.d/amphora-agent.conf"}

// debDepends is what the package must depend on: the daemons and tools
// the agent runs (kmod: modprobe ip_vs; udev: the config drive's label
// and hot-plugged NICs; iputils-ping: PING health monitors).
var debDepends = []string{"haproxy", "keepalived", "ipvsadm", "iproute2", "nftables", "netcat-openbsd", "kmod", "udev", "iputils-ping", "procps"}

// debRecommends: HAProxy's and keepalived's logs reach the controller's
// log targets through rsyslog; the agent works without it.
var debRecommends = []string{"rsyslog"}

// The manual page and the names it documents (links to it).
const debManual = "/usr/share/man/man8/amphora-agent.8.gz"

var debManualLinks = []string{"amphora-interface", "haproxy-vrrp-check", "amphora-health-checker", "octavia-agent-lvs-masquerade"}

func TestDebPackage(t *testing.T) {
	testkit.RequireRoot(t, "deb: the package is built with root-owned files and installed in a chroot")
	for _, tool := range []string{"dpkg-deb", "dpkg", "git", "chroot", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("deb: needs %s", tool)
		}
	}
	deb, fields := buildDeb(t)
	t.Run("contents", func(t *testing.T) { checkDebContents(t, deb) })
	t.Run("chroot", func(t *testing.T) { checkDebInChroot(t, deb, fields) })
}

// packagingDir is the folder of the units, the scripts, deb/ and image/.
func packagingDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "packaging")
}

// runFor runs a command with a time limit and returns its stdout; a
// failure or timeout ends the test with the command's output.
func runFor(t *testing.T, limit time.Duration, name string, args ...string) string {
	t.Helper()
	out, errOut, err := tryFor(limit, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// tryFor is runFor for commands expected to fail.
func tryFor(limit time.Duration, name string, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C")
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %v", limit)
	}
	return o.String(), e.String(), err
}

// buildDeb runs the build script as `make deb` does, on the binary the
// other system tests use, and returns the package and its control fields.
func buildDeb(t *testing.T) (string, map[string]string) {
	raw := strings.TrimSpace(runFor(t, 30*time.Second, "git", "-C", packagingDir(), "describe", "--tags", "--always", "--dirty"))
	out := strings.TrimSpace(runFor(t, 2*time.Minute, filepath.Join(packagingDir(), "deb", "build.sh"), testenv.Binary(t), raw, t.TempDir()))
	deb := out[strings.LastIndexByte(out, '\n')+1:]
	fields := parseControl(runFor(t, 30*time.Second, "dpkg-deb", "-f", deb))

	want := map[string]string{"Package": "amphora-agent", "Architecture": "amd64", "Section": "net", "Priority": "optional"}
	for k, v := range want {
		if fields[k] != v {
			t.Errorf("control %s = %q, want %q", k, fields[k], v)
		}
	}
	for _, k := range []string{"Maintainer", "Description", "Installed-Size"} {
		if fields[k] == "" {
			t.Errorf("control has no %s", k)
		}
	}
	if got := dependsNames(fields["Depends"]); !slices.Equal(got, sorted(debDepends)) {
		t.Errorf("control Depends = %q, want exactly %v", fields["Depends"], debDepends)
	}
	if got := dependsNames(fields["Recommends"]); !slices.Equal(got, sorted(debRecommends)) {
		t.Errorf("control Recommends = %q, want exactly %v", fields["Recommends"], debRecommends)
	}
	v := fields["Version"]
	runFor(t, 10*time.Second, "dpkg", "--validate-version", v)
	if name := "amphora-agent_" + v + "_amd64.deb"; filepath.Base(deb) != name {
		t.Errorf("package file %s, want %s", filepath.Base(deb), name)
	}
	// git describe without a tag is a bare commit: 0.0~git<date>.<sha>.
	if regexp.MustCompile(`^[0-9a-f]+(-dirty)?$`).MatchString(raw) &&
		!regexp.MustCompile(`^0\.0~git[0-9]{8}\.[0-9a-f]+(\+dirty)?$`).MatchString(v) {
		t.Errorf("version %q from %q, want 0.0~git<date>.<sha>", v, raw)
	}
	t.Logf("built %s (git describe %s)", filepath.Base(deb), raw)
	return deb, fields
}

// parseControl reads the first line of each field of a control file.
func parseControl(s string) map[string]string {
	f := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && line[0] != ' ' {
			f[k] = strings.TrimSpace(v)
		}
	}
	return f
}

// dependsNames is the sorted package names of a Depends field, without
// version constraints.
func dependsNames(depends string) []string {
	var names []string
	for _, d := range strings.Split(depends, ",") {
		if name := strings.Fields(d); len(name) > 0 {
			names = append(names, name[0])
		}
	}
	return sorted(names)
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

// debEntry is one line of `dpkg-deb -c`.
type debEntry struct{ mode, owner, link string }

func checkDebContents(t *testing.T, deb string) {
	entries := map[string]debEntry{}
	for _, line := range strings.Split(strings.TrimSpace(runFor(t, 30*time.Second, "dpkg-deb", "-c", deb)), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			t.Fatalf("dpkg-deb -c line %q", line)
		}
		e := debEntry{mode: f[0], owner: f[1]}
		if len(f) == 8 && f[6] == "->" {
			e.link = f[7]
		}
		entries[strings.TrimPrefix(f[5], ".")] = e
	}

	// Every file, exactly; directories are whatever leads to them.
	want := map[string]debEntry{
		"/usr/local/bin/amphora-agent":                             {mode: "-rwxr-xr-x"},
		debUnitDir + "/" + debUnit:                                 {mode: "-rw-r--r--"},
		debUnitDir + "/amphora-config-drive.service":               {mode: "-rw-r--r--"},
		debUnitDir + "/var-lib-octavia-certs.mount":                {mode: "-rw-r--r--"},
		"/usr/share/doc/amphora-agent/copyright":                   {mode: "-rw-r--r--"},
		"/usr/share/doc/amphora-agent/changelog.gz":                {mode: "-rw-r--r--"},
		"/usr/share/doc/amphora-agent/examples/amphora-agent.conf": {mode: "-rw-r--r--"},
		"/usr/share/lintian/overrides/amphora-agent":               {mode: "-rw-r--r--"},
		debManual:                          {mode: "-rw-r--r--"},
		"/var/lib/octavia/ping-wrapper.sh": {mode: "-rwxr-xr-x"},
		debMasquerade:                      {mode: "-rwxr-xr-x"},
		debDebianMasquerade:                {mode: "lrwxrwxrwx", link: "../local/bin/lvs-masquerade.sh"},
		debUDPMasquerade:                   {mode: "lrwxrwxrwx", link: "lvs-masquerade.sh"},
	}
	for _, c := range debConffiles {
		want[c] = debEntry{mode: "-rw-r--r--"}
	}
	// The names the binary answers to (package cli) are the links it ships.
	for alias := range cli.Aliases {
		want["/usr/local/bin/"+alias] = debEntry{mode: "lrwxrwxrwx", link: "amphora-agent"}
	}
	for _, name := range debManualLinks {
		want[filepath.Join(filepath.Dir(debManual), name+".8.gz")] = debEntry{mode: "lrwxrwxrwx", link: filepath.Base(debManual)}
	}
	for p, e := range entries {
		if e.owner != "root/root" {
			t.Errorf("%s owned by %s, want root/root", p, e.owner)
		}
		if strings.HasSuffix(p, "/") {
			if e.mode != "drwxr-xr-x" {
				t.Errorf("directory %s mode %s, want drwxr-xr-x", p, e.mode)
			}
			continue
		}
		w, ok := want[p]
		if !ok {
			t.Errorf("unexpected file %s in the package", p)
			continue
		}
		if e.mode != w.mode || e.link != w.link {
			t.Errorf("%s: %s -> %q, want %s -> %q", p, e.mode, e.link, w.mode, w.link)
		}
		delete(want, p)
	}
	for p := range want {
		t.Errorf("package lacks %s", p)
	}

	ctl := t.TempDir()
	runFor(t, 30*time.Second, "dpkg-deb", "-e", deb, ctl)
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		p := filepath.Join(ctl, s)
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o755 {
			t.Errorf("maintainer script %s: %v, want mode 0755", s, err)
			continue
		}
		runFor(t, 10*time.Second, "sh", "-n", p)
	}
	// dpkg keeps an administrator's changes to these on upgrade only when
	// the package lists them.
	conffiles, err := os.ReadFile(filepath.Join(ctl, "conffiles"))
	if got := strings.Fields(string(conffiles)); err != nil || !slices.Equal(got, slices.Sorted(slices.Values(debConffiles))) {
		t.Errorf("conffiles %q (%v), want %q", got, err, debConffiles)
	}

	root := t.TempDir()
	runFor(t, 30*time.Second, "dpkg-deb", "-x", deb, root)
	sameFile(t, filepath.Join(root, debUnitDir, debUnit), filepath.Join(packagingDir(), "systemd", debUnit))
	checkDebDocs(t, root, deb)
	// The example must be a config the agent accepts as it stands.
	example := filepath.Join(root, "usr/share/doc/amphora-agent/examples/amphora-agent.conf")
	src, err := config.ReadFiles([]string{example})
	if err != nil {
		t.Fatal(err)
	}
	if _, warnings, err := config.LoadStrict(src); err != nil || len(warnings) > 0 {
		t.Errorf("example config: %v, warnings %q", err, warnings)
	}
}

func sameFile(t *testing.T, got, want string) {
	t.Helper()
	g, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g, w) {
		t.Errorf("%s differs from %s", got, want)
	}
}

// checkDebInChroot installs, removes and purges the package in a bookworm
// chroot that holds the package's dependencies, and compares the chroot's
// files before and after.
func checkDebInChroot(t *testing.T, deb string, fields map[string]string) {
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		t.Skip("deb: needs mmdebstrap to create a bookworm chroot (apt-get install mmdebstrap)")
	}
	start := time.Now()
	tarball := chrootTarball(t, dependsNames(fields["Depends"]))
	root, err := os.MkdirTemp("/var/tmp", "amphora-agent-chroot-")
	if err != nil {
		t.Fatal(err)
	}
	// Nothing is ever mounted inside root, so removing it touches only it.
	t.Cleanup(func() { os.RemoveAll(root) })
	runFor(t, 3*time.Minute, "tar", "-C", root, "-xpf", tarball)
	t.Logf("chroot ready in %v", time.Since(start).Round(100*time.Millisecond))

	in := func(limit time.Duration, args ...string) string {
		t.Helper()
		return runFor(t, limit, "chroot", append([]string{root}, args...)...)
	}
	if err := copyFile(deb, filepath.Join(root, "tmp/amphora-agent.deb")); err != nil {
		t.Fatal(err)
	}
	// The image has the controller's config: postinst must still not try
	// to start anything without a running systemd.
	if err := os.MkdirAll(filepath.Join(root, "etc/octavia"), 0o755); err != nil {
		t.Fatal(err)
	}
	confFile := filepath.Join(root, "etc/octavia/amphora-agent.conf")
	if err := copyFile(filepath.Join(packagingDir(), "deb/amphora-agent.conf"), confFile); err != nil {
		t.Fatal(err)
	}
	clean := snapshot(t, root)

	install := func() {
		t.Helper()
		in(2*time.Minute, "dpkg", "-i", "/tmp/amphora-agent.deb")
		if st := in(30*time.Second, "dpkg-query", "-W", "-f=${Status}", "amphora-agent"); st != "install ok installed" {
			t.Fatalf("dpkg status %q after dpkg -i", st)
		}
	}
	removed := func(step string) {
		t.Helper()
		if diff := snapshotDiff(clean, snapshot(t, root)); diff != "" {
			t.Errorf("after %s the chroot differs from before the install:\n%s", step, diff)
		}
	}

	install()
	checkInstalled(t, root, in)
	in(2*time.Minute, "dpkg", "-r", "amphora-agent")
	keptOnRemove(t, root, clean)
	// Installing again after a remove finds the unit as it was: enabled,
	// not masked.
	install()
	checkInstalled(t, root, in)
	in(2*time.Minute, "dpkg", "-r", "amphora-agent")
	in(2*time.Minute, "dpkg", "-P", "amphora-agent")
	removed("dpkg -r, dpkg -P")
	install()
	in(2*time.Minute, "dpkg", "-P", "amphora-agent")
	removed("dpkg -i, dpkg -P")
	t.Logf("chroot test took %v", time.Since(start).Round(100*time.Millisecond))
}

// keptOnRemove checks what dpkg -r leaves, as Debian policy has it: the
// unit's enablement and deb-systemd-helper's record of it, the conffiles
// and their folders (purge removes all of them), the unit masked while its
// file is gone, and nothing else.
func keptOnRemove(t *testing.T, root string, clean map[string]string) {
	t.Helper()
	kept := regexp.MustCompile(`^[+] (/etc/systemd/system(/[^ ]*)?|/var/lib/systemd(/deb-systemd-helper-(enabled|masked)(/[^ ]*)?)?) `)
	conffiles := map[string]bool{}
	for _, c := range debConffiles {
		for p := c; p != "/etc"; p = filepath.Dir(p) {
			conffiles[p] = true
		}
	}
	for _, line := range strings.Split(snapshotDiff(clean, snapshot(t, root)), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "+" && conffiles[f[1]] {
			delete(conffiles, f[1])
			continue
		}
		if line != "" && !kept.MatchString(line) {
			t.Errorf("after dpkg -r: %s (only the unit's enablement and the conffiles may stay)", line)
		}
	}
	for _, c := range debConffiles {
		if conffiles[c] {
			t.Errorf("dpkg -r removed the conffile %s", c)
		}
	}
	for _, target := range wantedBy(t, filepath.Join(packagingDir(), "systemd", debUnit)) {
		link := filepath.Join(root, "etc/systemd/system", target+".wants", debUnit)
		if _, err := os.Lstat(link); err != nil {
			t.Errorf("dpkg -r removed the enablement for %s: %v", target, err)
		}
	}
	if dest, err := os.Readlink(filepath.Join(root, "etc/systemd/system", debUnit)); dest != "/dev/null" {
		t.Errorf("after dpkg -r the unit is not masked: %q %v", dest, err)
	}
}

// checkInstalled checks the installed files, the unit's enablement and
// that the binary runs, under every name it answers to.
func checkInstalled(t *testing.T, root string, in func(time.Duration, ...string) string) {
	t.Helper()
	bin := filepath.Join(root, "usr/local/bin/amphora-agent")
	if st, err := os.Lstat(bin); err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o755 {
		t.Errorf("installed binary: %v, want a regular file with mode 0755", err)
	}
	for alias := range cli.Aliases {
		if l, err := os.Readlink(filepath.Join(root, "usr/local/bin", alias)); l != "amphora-agent" {
			t.Errorf("/usr/local/bin/%s -> %q (%v), want amphora-agent", alias, l, err)
		}
	}
	unit := filepath.Join(root, debUnitDir, debUnit)
	sameFile(t, unit, filepath.Join(packagingDir(), "systemd", debUnit))
	sameFile(t, filepath.Join(root, debMasquerade), filepath.Join(packagingDir(), "lvs-masquerade.sh"))
	// Both names run the script under the image's /bin/sh; without
	// arguments it only prints its usage (running it for real would
	// change the host's firewall: the chroot shares its namespace).
	for _, name := range []string{debMasquerade, debDebianMasquerade, debUDPMasquerade} {
		_, stderr, err := tryFor(10*time.Second, "chroot", root, name)
		if exitCode(err) != 1 || !strings.Contains(stderr, "usage: ") {
			t.Errorf("%s without arguments: %q %v, want its usage and status 1", name, stderr, err)
		}
	}

	if _, err := os.Lstat(filepath.Join(root, "etc/systemd/system", debUnit)); err == nil {
		t.Errorf("/etc/systemd/system/%s exists after install: the unit is masked or overridden", debUnit)
	}
	// Enabled means a link in each target's .wants the unit's [Install] names.
	targets := wantedBy(t, unit)
	if len(targets) == 0 {
		t.Errorf("%s has no [Install] WantedBy=: enabling it does nothing", debUnit)
	}
	for _, target := range targets {
		link := filepath.Join("/etc/systemd/system", target+".wants", debUnit)
		dest, err := os.Readlink(filepath.Join(root, link))
		if err != nil {
			t.Errorf("unit not enabled for %s: %v", target, err)
			continue
		}
		if _, err := os.Stat(filepath.Join(root, dest)); err != nil || filepath.Base(dest) != debUnit {
			t.Errorf("%s -> %s, want the installed unit (%v)", link, dest, err)
		}
	}

	want := strings.TrimSpace(runFor(t, 10*time.Second, testenv.Binary(t), "--version"))
	if got := strings.TrimSpace(in(10*time.Second, "/usr/local/bin/amphora-agent", "--version")); got != want {
		t.Errorf("amphora-agent --version in the chroot = %q, want %q", got, want)
	}
	// A link must run its subcommand: same answer as the subcommand itself
	// (the agent's own usage if the name were not recognised).
	for alias := range cli.Aliases {
		sub := cli.ArgsFor([]string{alias})[0]
		args := []string{"--help"}
		lo, le, lerr := tryFor(10*time.Second, "chroot", append([]string{root, "/usr/local/bin/" + alias}, args...)...)
		so, se, serr := tryFor(10*time.Second, "chroot", append([]string{root, "/usr/local/bin/amphora-agent", sub}, args...)...)
		if lo != so || le != se || exitCode(lerr) != exitCode(serr) {
			t.Errorf("%s %v: %q %q %v; amphora-agent %s: %q %q %v", alias, args, lo, le, lerr, sub, so, se, serr)
		}
	}
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// wantedBy lists the unit's WantedBy= targets.
func wantedBy(t *testing.T, unit string) []string {
	t.Helper()
	f, err := os.Open(unit)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var targets []string
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") {
			section = line
		} else if k, v, ok := strings.Cut(line, "="); ok && section == "[Install]" && strings.TrimSpace(k) == "WantedBy" {
			targets = append(targets, strings.Fields(v)...)
		}
	}
	return targets
}

// chrootTarball is a bookworm tarball (mmdebstrap's essential variant
// plus the packages given), cached under a name derived from everything
// that shapes it, so only the first run downloads.
func chrootTarball(t *testing.T, packages []string) string {
	t.Helper()
	mm := strings.TrimSpace(runFor(t, 10*time.Second, "mmdebstrap", "--version"))
	args := []string{"--quiet", "--variant=essential", "--include=" + strings.Join(packages, ","), "--format=tar", debSuite}
	sum := sha256.Sum256([]byte(strings.Join(append([]string{mm, debMirror}, args...), "\n")))
	dir := filepath.Join(os.Getenv("XDG_CACHE_HOME"), "amphora-agent")
	if os.Getenv("XDG_CACHE_HOME") == "" {
		dir = "/var/tmp/amphora-agent-cache"
	}
	tarball := filepath.Join(dir, "chroot-"+debSuite+"-"+hex.EncodeToString(sum[:8])+".tar")
	if _, err := os.Stat(tarball); err == nil {
		t.Logf("chroot from cache %s", tarball)
		return tarball
	}

	client := http.Client{Timeout: 15 * time.Second}
	resp, err := client.Get(debMirror + "/dists/" + debSuite + "/InRelease")
	if err != nil {
		t.Skipf("deb: Debian mirror %s unreachable, cannot create the chroot: %v", debMirror, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Skipf("deb: Debian mirror %s answers %s, cannot create the chroot", debMirror, resp.Status)
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := fmt.Sprintf("%s.%d.tmp", tarball, os.Getpid())
	defer os.Remove(tmp)
	start := time.Now()
	runFor(t, 10*time.Minute, "mmdebstrap", append(args, tmp, debMirror)...)
	if err := os.Rename(tmp, tarball); err != nil {
		t.Fatal(err)
	}
	t.Logf("chroot created in %v, cached as %s", time.Since(start).Round(100*time.Millisecond), tarball)
	return tarball
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o644)
}

// snapshotSkip are the chroot's folders dpkg and the tests change by
// design: its database, logs, caches and the copied package.
var snapshotSkip = []string{"var/lib/dpkg", "var/log", "var/cache", "tmp"}

// snapshot describes every file of the chroot: type, mode, owner, link
// target and content hash (directory sizes and times left out).
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if slices.Contains(snapshotSkip, rel) {
			return filepath.SkipDir
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		desc := fmt.Sprintf("%v %d:%d", info.Mode(), st.Uid, st.Gid)
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + l
		case info.Mode().IsRegular():
			h, err := hashFile(p)
			if err != nil {
				return err
			}
			desc += " " + h
		}
		files["/"+rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func hashFile(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)[:12]), nil
}

// snapshotDiff lists what differs between two snapshots, "" when none.
func snapshotDiff(before, after map[string]string) string {
	var lines []string
	for p, b := range before {
		if a, ok := after[p]; !ok {
			lines = append(lines, "- "+p+" "+b)
		} else if a != b {
			lines = append(lines, "~ "+p+" "+b+" => "+a)
		}
	}
	for p, a := range after {
		if _, ok := before[p]; !ok {
			lines = append(lines, "+ "+p+" "+a)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// checkDebDocs checks the package's documents in its unpacked tree root:
// the changelog's newest entry is this package's version, the manual page
// carries the usage of the binary it was built with and renders cleanly,
// both compressed as Debian policy wants (gzip -9n), and the copyright
// file and the repository's LICENSE say Apache-2.0.
func checkDebDocs(t *testing.T, root, deb string) {
	t.Helper()
	changelog := gunzipReproducible(t, filepath.Join(root, "usr/share/doc/amphora-agent/changelog.gz"))
	plain := filepath.Join(t.TempDir(), "changelog")
	if err := os.WriteFile(plain, changelog, 0o644); err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(runFor(t, 10*time.Second, "dpkg-deb", "-f", deb, "Version"))
	if got := strings.TrimSpace(runFor(t, 10*time.Second, "dpkg-parsechangelog", "-l", plain, "-S", "Version")); got != version {
		t.Errorf("changelog's newest entry is %s, the package %s", got, version)
	}

	page := gunzipReproducible(t, filepath.Join(root, strings.TrimPrefix(debManual, "/")))
	// Wherever --help writes and whatever it exits with, as build.sh reads it.
	usage, _, _ := tryFor(10*time.Second, "sh", "-c", `"$0" --help 2>&1`, testenv.Binary(t))
	first, _, _ := strings.Cut(strings.TrimSpace(usage), "\n")
	if !bytes.HasPrefix(page, []byte(".\\\"")) || !bytes.Contains(page, []byte("\n.TH AMPHORA-AGENT 8 ")) ||
		!bytes.Contains(page, []byte("\\&"+strings.ReplaceAll(first, `\`, `\e`))) {
		t.Errorf("manual page lacks its title or the binary's usage %q:\n%s", first, page)
	}
	if _, err := exec.LookPath("man"); err == nil {
		_, warnings, err := tryFor(30*time.Second, "man", "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", filepath.Join(root, debManual))
		if err != nil || strings.TrimSpace(warnings) != "" {
			t.Errorf("man --warnings on the manual page: %v\n%s", err, warnings)
		}
	}

	copyright, err := os.ReadFile(filepath.Join(root, "usr/share/doc/amphora-agent/copyright"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/", "\nFiles: *\n", "\nLicense: Apache-2.0\n", "/usr/share/common-licenses/Apache-2.0"} {
		if !bytes.Contains(copyright, []byte(want)) {
			t.Errorf("copyright lacks %q", want)
		}
	}
	license, err := os.ReadFile(filepath.Join(packagingDir(), "..", "..", "..", "LICENSE"))
	if err != nil || !bytes.Contains(license, []byte("Apache License\n                           Version 2.0, January 2004")) ||
		!bytes.Contains(license, []byte("END OF TERMS AND CONDITIONS")) {
		t.Errorf("the repository's LICENSE is not the Apache License 2.0 (%v)", err)
	}
}

// gunzipReproducible reads a gzip file that must carry no name and no time
// stamp and be compressed with -9 (header flag XFL 2), as gzip -9n writes.
func gunzipReproducible(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 10 || data[0] != 0x1f || data[1] != 0x8b {
		t.Fatalf("%s is not gzip", path)
	}
	if flags, mtime, xfl := data[3], data[4:8], data[8]; flags&0x08 != 0 || !bytes.Equal(mtime, []byte{0, 0, 0, 0}) || xfl != 2 {
		t.Errorf("%s: gzip header flags %#x, mtime % x, XFL %d; want gzip -9n (no name, no time, XFL 2)", path, flags, mtime, xfl)
	}
	out, _, err := tryFor(10*time.Second, "gzip", "-dc", path)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(out)
}
