package sysinfo

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/procgroup"
)

type fakeResult struct {
	out string
	err error
}

// fakeRunner answers commands from a table keyed by the full command line;
// unknown commands fail like a missing binary.
type fakeRunner struct {
	results map[string]fakeResult
	stderr  map[string]string
	mu      sync.Mutex
	calls   []string
}

func (f *fakeRunner) Output(_ context.Context, name string, args ...string) ([]byte, error) {
	key := strings.Join(append([]string{name}, args...), " ")
	f.mu.Lock()
	f.calls = append(f.calls, key)
	f.mu.Unlock()
	res, ok := f.results[key]
	if !ok {
		return nil, exec.ErrNotFound
	}
	return []byte(res.out), res.err
}

// CombinedOutput adds what the command's table entry in stderr says it
// prints there.
func (f *fakeRunner) CombinedOutput(ctx context.Context, name string, args ...string) ([]byte, error) {
	out, err := f.Output(ctx, name, args...)
	return append(out, f.stderr[strings.Join(append([]string{name}, args...), " ")]...), err
}

var errExit1 = errors.New("exit status 1")

const (
	debianRelease = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nID=debian\n"
	ubuntuRelease = "NAME=\"Ubuntu\"\nVERSION_ID=\"22.04\"\nID=ubuntu\nID_LIKE=debian\n"
	rockyRelease  = "NAME=\"Rocky Linux\"\nVERSION_ID=\"9.3\"\nID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\n"
	almaRelease   = "NAME=\"AlmaLinux\"\nVERSION_ID=\"9.3\"\nID=\"almalinux\"\nID_LIKE=\"rhel centos fedora\"\n"
	centos7       = "NAME=\"CentOS Linux\"\nVERSION_ID=\"7\"\nID=\"centos\"\nID_LIKE=\"rhel fedora\"\n"
	unknownOS     = "NAME=\"Alpine Linux\"\nID=alpine\nVERSION_ID=3.19.0\n"
)

const (
	haproxyBanner    = "HAProxy version 2.6.12-1+deb12u1 2023/12/16 - https://haproxy.org/\nStatus: long-term supported branch\n"
	keepalivedBanner = "Keepalived v2.2.7 (01/16,2022)\n\nCopyright(C) 2001-2022 Alexandre Cassen\n"
	ipvsadmBanner    = "ipvsadm v1.31 2019/12/24 (compiled with popt and IPVS v1.2.1)\n"
)

func dpkg(pkg string) string { return "dpkg-query -W -f=${Version} " + pkg }
func rpm(pkg string) string  { return "rpm -q --queryformat %{VERSION} " + pkg }

func writeOSRelease(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "os-release")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLookupVersions(t *testing.T) {
	tests := []struct {
		name      string
		osRelease string // content; "-" means the file does not exist
		results   map[string]fakeResult
		stderr    map[string]string // non-nil selects the CombinedRunner fake
		want      Versions
		wantCalls []string // must all have been made
		noCalls   []string // must not have been made
	}{
		{
			name:      "dpkg success",
			osRelease: debianRelease,
			results: map[string]fakeResult{
				dpkg("haproxy"):    {out: "2.6.12-1+deb12u1"},
				dpkg("keepalived"): {out: "1:2.2.7-1+b2"},
				dpkg("ipvsadm"):    {out: "1:1.31-1+b1"},
			},
			want:    Versions{HAProxy: "2.6.12-1+deb12u1", Keepalived: "1:2.2.7-1+b2", IPVSAdm: "1:1.31-1+b1"},
			noCalls: []string{"/usr/sbin/haproxy -v", "keepalived -v", "ipvsadm --version"},
		},
		{
			name:      "epoch stripped for haproxy only",
			osRelease: ubuntuRelease,
			results: map[string]fakeResult{
				dpkg("haproxy"):    {out: "1:2.8.5-1ubuntu3"},
				dpkg("keepalived"): {out: "1:2.2.8-1build2"},
				dpkg("ipvsadm"):    {out: "1:1.31-1build2"},
			},
			want: Versions{HAProxy: "2.8.5-1ubuntu3", Keepalived: "1:2.2.8-1build2", IPVSAdm: "1:1.31-1build2"},
		},
		{
			name:      "dpkg failure falls back to the binaries",
			osRelease: debianRelease,
			results: map[string]fakeResult{
				dpkg("haproxy"):        {err: errExit1},
				dpkg("keepalived"):     {err: errExit1},
				dpkg("ipvsadm"):        {out: ""}, // known to dpkg but not installed
				"/usr/sbin/haproxy -v": {out: haproxyBanner},
				"keepalived -v":        {out: keepalivedBanner},
				"ipvsadm --version":    {out: ipvsadmBanner},
			},
			want:      Versions{HAProxy: "2.6.12-1+deb12u1", Keepalived: "2.2.7", IPVSAdm: "1.31"},
			wantCalls: []string{dpkg("haproxy"), "/usr/sbin/haproxy -v", "keepalived -v", "ipvsadm --version"},
		},
		{
			name:      "keepalived banner on stderr is read through CombinedRunner",
			osRelease: debianRelease,
			results: map[string]fakeResult{
				"/usr/sbin/haproxy -v": {out: "HA-Proxy version 1.8.8-1ubuntu0.13 2020/12/09\n"},
				"keepalived -v":        {},
				"ipvsadm --version":    {err: errExit1},
			},
			stderr: map[string]string{
				"keepalived -v":     keepalivedBanner,
				"ipvsadm --version": "Can't initialize ipvs: Protocol not available\n",
			},
			want: Versions{HAProxy: "1.8.8-1ubuntu0.13", Keepalived: "2.2.7", IPVSAdm: ""},
		},
		{
			name:      "rpm family",
			osRelease: rockyRelease,
			results: map[string]fakeResult{
				rpm("haproxy"):    {out: "2.4.22"},
				rpm("keepalived"): {out: "2.2.8"},
				rpm("ipvsadm"):    {out: "1.31"},
			},
			want:    Versions{HAProxy: "2.4.22", Keepalived: "2.2.8", IPVSAdm: "1.31"},
			noCalls: []string{dpkg("haproxy")},
		},
		{
			name:      "rpm family by ID_LIKE, not installed falls back",
			osRelease: almaRelease,
			results: map[string]fakeResult{
				rpm("haproxy"):         {out: "package haproxy is not installed", err: errExit1},
				rpm("keepalived"):      {out: "2.2.8"},
				rpm("ipvsadm"):         {out: "1.31"},
				"/usr/sbin/haproxy -v": {out: "HAProxy version 2.4.22-f8e3218 2023/02/14 - https://haproxy.org/\n"},
			},
			want: Versions{HAProxy: "2.4.22-f8e3218", Keepalived: "2.2.8", IPVSAdm: "1.31"},
		},
		{
			name:      "centos 7 asks for haproxy18",
			osRelease: centos7,
			results: map[string]fakeResult{
				rpm("haproxy18"):  {out: "1.8.27"},
				rpm("keepalived"): {out: "1.3.5"},
				rpm("ipvsadm"):    {out: "1.27"},
			},
			want:    Versions{HAProxy: "1.8.27", Keepalived: "1.3.5", IPVSAdm: "1.27"},
			noCalls: []string{rpm("haproxy")},
		},
		{
			name:      "unknown distribution skips the package manager",
			osRelease: unknownOS,
			results: map[string]fakeResult{
				"/usr/sbin/haproxy -v": {out: haproxyBanner},
			},
			want:    Versions{HAProxy: "2.6.12-1+deb12u1"},
			noCalls: []string{dpkg("haproxy"), rpm("haproxy")},
		},
		{
			name:      "everything fails",
			osRelease: debianRelease,
			results: map[string]fakeResult{
				dpkg("haproxy"):        {err: errExit1},
				"/usr/sbin/haproxy -v": {out: "garbage\n", err: errExit1},
			},
			want: Versions{},
		},
		{
			name:      "missing os-release and no binaries",
			osRelease: "-",
			want:      Versions{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			osRelease := filepath.Join(t.TempDir(), "absent")
			if tt.osRelease != "-" {
				osRelease = writeOSRelease(t, tt.osRelease)
			}
			fake := &fakeRunner{results: tt.results, stderr: tt.stderr}
			got := LookupVersions(context.Background(), fake, osRelease, "/usr/sbin/haproxy")
			if got != tt.want {
				t.Errorf("LookupVersions() = %+v, want %+v", got, tt.want)
			}
			for _, c := range tt.wantCalls {
				if !slices.Contains(fake.calls, c) {
					t.Errorf("command %q not run; ran %q", c, fake.calls)
				}
			}
			for _, c := range tt.noCalls {
				if slices.Contains(fake.calls, c) {
					t.Errorf("command %q run unexpectedly", c)
				}
			}
		})
	}
}

func TestParseOSRelease(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    osInfo
	}{
		{"debian", debianRelease, osInfo{family: familyDeb, id: "debian", versionID: "12"}},
		{"ubuntu", ubuntuRelease, osInfo{family: familyDeb, id: "ubuntu", versionID: "22.04"}},
		{"rocky quoted", rockyRelease, osInfo{family: familyRPM, id: "rocky", versionID: "9.3"}},
		{"alma via ID_LIKE", almaRelease, osInfo{family: familyRPM, id: "almalinux", versionID: "9.3"}},
		{"single quotes and spaces", "  ID='fedora'\n", osInfo{family: familyRPM, id: "fedora"}},
		{"unknown", unknownOS, osInfo{id: "alpine", versionID: "3.19.0"}},
		{"empty", "", osInfo{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseOSRelease([]byte(tt.content)); got != tt.want {
				t.Errorf("parseOSRelease() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestLookupVersionsReal runs the real lookup on this machine.
func TestLookupVersionsReal(t *testing.T) {
	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		haproxy = "/usr/sbin/haproxy"
		if _, err := os.Stat(haproxy); err != nil {
			t.Skip("haproxy is not installed on this machine")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v := LookupVersions(ctx, procgroup.Exec{}, DefaultOSRelease, haproxy)
	t.Logf("package versions: %+v", v)
	if v.HAProxy == "" {
		t.Fatal("haproxy is installed but its version was not found")
	}
	// The controller does int() on the major and compares major.minor.
	parts := strings.Split(v.HAProxy, ".")
	if len(parts) < 2 {
		t.Fatalf("haproxy version %q has no minor part", v.HAProxy)
	}
	if _, err := strconv.Atoi(parts[0]); err != nil {
		t.Errorf("haproxy major %q is not an integer: %v", parts[0], err)
	}

	// Same machine with the package manager out of the picture: exercises
	// the real version-flag fallback, including keepalived's stderr banner.
	noPkg := writeOSRelease(t, unknownOS)
	fb := LookupVersions(ctx, procgroup.Exec{}, noPkg, haproxy)
	t.Logf("fallback versions: %+v", fb)
	if fb.HAProxy == "" || strings.Contains(fb.HAProxy, ":") {
		t.Errorf("haproxy -v fallback gave %q", fb.HAProxy)
	}
	if _, err := exec.LookPath("keepalived"); err == nil && fb.Keepalived == "" {
		t.Error("keepalived is installed but keepalived -v gave no version")
	}
}
