package sysinfo

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/procgroup"
)

// DefaultOSRelease is the os-release path LookupVersions normally reads.
const DefaultOSRelease = "/etc/os-release"

// fallbackOSRelease is where os-release(5) says to look when /etc has none.
const fallbackOSRelease = "/usr/lib/os-release"

// versionQueryTimeout bounds each external command; a wedged dpkg lock or
// binary must not stall agent startup.
const versionQueryTimeout = 5 * time.Second

// Versions holds the package versions the controller asks about. Empty
// means unknown.
type Versions struct {
	HAProxy, Keepalived, IPVSAdm string
}

type pkgFamily int

const (
	familyUnknown pkgFamily = iota
	familyDeb
	familyRPM
)

type osInfo struct {
	family    pkgFamily
	id        string
	versionID string
}

var (
	haproxyVersionRe    = regexp.MustCompile(`(?im)^HA-?Proxy version (\S+)`)
	keepalivedVersionRe = regexp.MustCompile(`(?m)^Keepalived v(\S+)`)
	ipvsadmVersionRe    = regexp.MustCompile(`(?m)^ipvsadm v(\S+)`)
	epochRe             = regexp.MustCompile(`^[0-9]+:`)
)

type versionQuery struct {
	pkg     string
	bin     string
	flag    string
	re      *regexp.Regexp
	noEpoch bool
	dst     *string
}

// LookupVersions finds the installed versions of haproxy, keepalived and
// ipvsadm. It asks the package manager chosen from the os-release file at
// osRelease (empty means DefaultOSRelease) and falls back to the binaries'
// version flags. It never fails: anything unknown is "".
//
// The haproxy version has any package epoch removed because the controller
// parses its first dot-separated component as an integer; the other two
// keep theirs, as upstream reports them.
func LookupVersions(ctx context.Context, r procgroup.Runner, osRelease string, haproxyCmd string) Versions {
	if r == nil {
		r = procgroup.Exec{}
	}
	if haproxyCmd == "" {
		haproxyCmd = "haproxy"
	}
	info := readOSRelease(osRelease)

	haproxyPkg := "haproxy"
	if info.id == "centos" && info.versionID == "7" {
		// CentOS 7 amphorae ship haproxy 1.8 under this name.
		haproxyPkg = "haproxy18"
	}

	var v Versions
	queries := []versionQuery{
		{pkg: haproxyPkg, bin: haproxyCmd, flag: "-v", re: haproxyVersionRe, noEpoch: true, dst: &v.HAProxy},
		{pkg: "keepalived", bin: "keepalived", flag: "-v", re: keepalivedVersionRe, dst: &v.Keepalived},
		{pkg: "ipvsadm", bin: "ipvsadm", flag: "--version", re: ipvsadmVersionRe, dst: &v.IPVSAdm},
	}
	var wg sync.WaitGroup
	for _, q := range queries {
		wg.Go(func() { *q.dst = lookupOne(ctx, r, info.family, q) })
	}
	wg.Wait()
	return v
}

func lookupOne(ctx context.Context, r procgroup.Runner, family pkgFamily, q versionQuery) string {
	v := packageVersion(ctx, r, family, q.pkg)
	if v == "" {
		v = binaryVersion(ctx, r, q)
	}
	if q.noEpoch {
		v = epochRe.ReplaceAllString(v, "")
	}
	return v
}

func packageVersion(ctx context.Context, r procgroup.Runner, family pkgFamily, pkg string) string {
	var name string
	var args []string
	switch family {
	case familyDeb:
		name, args = "dpkg-query", []string{"-W", "-f=${Version}", pkg}
	case familyRPM:
		name, args = "rpm", []string{"-q", "--queryformat", "%{VERSION}", pkg}
	default:
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, versionQueryTimeout)
	defer cancel()
	out, err := r.Output(ctx, name, args...)
	if err != nil {
		// rpm prints "package X is not installed" on stdout with a non-zero
		// exit, so the output of a failed query is never a version.
		return ""
	}
	// dpkg-query exits 0 with an empty version for known but removed
	// packages; the caller treats "" as "ask the binary".
	return strings.TrimSpace(string(out))
}

func binaryVersion(ctx context.Context, r procgroup.Runner, q versionQuery) string {
	ctx, cancel := context.WithTimeout(ctx, versionQueryTimeout)
	defer cancel()
	// keepalived prints its banner on stderr. The exit status is ignored:
	// the regexp only matches a real banner.
	out, _ := r.CombinedOutput(ctx, q.bin, q.flag)
	if m := q.re.FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return ""
}

// readOSRelease classifies the distribution by ID and ID_LIKE. Upstream
// only supports these families and refuses to start otherwise; here an
// unknown family just skips the package query.
func readOSRelease(path string) osInfo {
	if path == "" {
		path = DefaultOSRelease
	}
	data, err := os.ReadFile(path)
	if err != nil && path == DefaultOSRelease {
		data, err = os.ReadFile(fallbackOSRelease)
	}
	if err != nil {
		return osInfo{}
	}
	return parseOSRelease(data)
}

func parseOSRelease(data []byte) osInfo {
	var info osInfo
	var idLike string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, val, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok {
			continue
		}
		val = unquote(val)
		switch key {
		case "ID":
			info.id = strings.ToLower(val)
		case "ID_LIKE":
			idLike = strings.ToLower(val)
		case "VERSION_ID":
			info.versionID = val
		}
	}
	info.family = classifyOS(info.id, idLike)
	return info
}

// classifyOS lets ID win over ID_LIKE, then takes the first known ID_LIKE
// entry, which os-release(5) orders from closest to most distant relative.
func classifyOS(id, idLike string) pkgFamily {
	for _, name := range append([]string{id}, strings.Fields(idLike)...) {
		switch name {
		case "debian", "ubuntu":
			return familyDeb
		case "rhel", "fedora", "centos", "rocky":
			return familyRPM
		}
	}
	return familyUnknown
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}
