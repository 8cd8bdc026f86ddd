package procgroup

import (
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
)

// mayEnter follows the kernel's order: the owner's bits for the owner
// (even when the group's or others' would let it in), else the group's
// for a member, else the others'.
func TestMayEnter(t *testing.T) {
	dir := t.TempDir()
	fi := func(mode os.FileMode) os.FileInfo {
		t.Helper()
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		info, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	owner := &syscall.Credential{Uid: uid, Gid: gid + 1}
	member := &syscall.Credential{Uid: uid + 1, Gid: gid}
	supplementary := &syscall.Credential{Uid: uid + 1, Gid: gid + 1, Groups: []uint32{gid}}
	other := &syscall.Credential{Uid: uid + 1, Gid: gid + 1}
	cases := []struct {
		mode os.FileMode
		cred *syscall.Credential
		want bool
	}{
		{0o700, owner, true},
		{0o700, member, false},
		{0o700, other, false},
		{0o070, owner, false},
		{0o710, member, true},
		{0o710, supplementary, true},
		{0o710, other, false},
		{0o701, member, false},
		{0o701, other, true},
		{0o755, other, true},
		{0o644, other, false},
	}
	for _, c := range cases {
		if got := mayEnter(c.cred, fi(c.mode)); got != c.want {
			t.Errorf("mode %v, cred %+v: %v, want %v", c.mode, *c.cred, got, c.want)
		}
	}
	os.Chmod(dir, 0o700)
}

// ViewFor covers the topmost folder a target's way is closed at, keeps a
// path bound onto itself only beneath a cover (and not a folder the user
// may not enter, nor a missing path), and mounts shallower targets first.
func TestViewFor(t *testing.T) {
	root := openTempDir(t)
	p := func(parts ...string) string { return filepath.Join(append([]string{root}, parts...)...) }
	tree := []struct {
		path string
		mode os.FileMode // a folder unless 0o644
	}{
		{"open", 0o755},
		{"open/file", 0o644},
		{"closed", 0o700},
		{"closed/base", 0o755},
		{"closed/base/lb", 0o755},
		{"closed/base/lb/haproxy.cfg.new", 0o644},
		{"closed/base/user-group.conf", 0o644},
		{"closed/base/certs", 0o700},
		{"closed/base/deeper", 0o700},
		{"closed/base/deeper/file", 0o644},
	}
	for _, e := range tree {
		var err error
		if e.mode == 0o644 {
			err = os.WriteFile(p(e.path), nil, 0o644)
		} else {
			err = os.Mkdir(p(e.path), e.mode)
		}
		if err != nil {
			t.Fatal(err)
		}
		os.Chmod(p(e.path), e.mode) // whatever the umask
	}
	cred := &syscall.Credential{Uid: uint32(os.Getuid()) + 1, Gid: uint32(os.Getgid()) + 1}

	got := ViewFor(cred, []Bind{
		{Source: p("open", "file"), Target: p("open", "file")},                                         // reachable: dropped
		{Source: p("copy"), Target: p("open", "file")},                                                 // not onto itself: kept
		{Source: p("closed", "base", "deeper", "file"), Target: p("closed", "base", "deeper", "file")}, // beneath the cover: kept
		{Source: p("copy.cfg"), Target: p("closed", "base", "lb", "haproxy.cfg.new")},
		{Source: p("work"), Target: p("closed", "base", "certs")},
		{Source: p("closed", "base", "user-group.conf"), Target: p("closed", "base", "user-group.conf")},
		{Source: p("closed", "base", "deeper"), Target: p("closed", "base", "deeper")}, // a closed folder: dropped
		{Source: p("closed", "base", "missing"), Target: p("closed", "base", "missing")},
		{Source: "/", Target: "/"},
	})
	want := View{
		Covers: []string{p("closed")},
		Binds: []Bind{
			{Source: p("copy"), Target: p("open", "file")},
			{Source: p("work"), Target: p("closed", "base", "certs")},
			{Source: p("closed", "base", "user-group.conf"), Target: p("closed", "base", "user-group.conf")},
			{Source: p("closed", "base", "deeper", "file"), Target: p("closed", "base", "deeper", "file")},
			{Source: p("copy.cfg"), Target: p("closed", "base", "lb", "haproxy.cfg.new")},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("view:\n%+v\nwant\n%+v", got, want)
	}
}

// openTempDir is t.TempDir with both of the levels it makes (0700) open
// to all, so that the modes below it alone decide.
func openTempDir(t *testing.T) string {
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
