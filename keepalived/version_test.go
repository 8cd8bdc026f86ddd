package keepalived

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/pidfile"
	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// keepalived --version as releases print it: 2.2.2 is the first whose
// reload stands in for a restart (member states since 2.0.14, weights
// since 2.2.2).
func TestVersionDecidesHowListenersReload(t *testing.T) {
	for _, tc := range []struct {
		file    string
		want    version
		inPlace bool
	}{
		{"version_2.0.6.txt", version{2, 0, 6}, false},
		{"version_2.0.20.txt", version{2, 0, 20}, false},
		{"version_2.2.7_bookworm.txt", version{2, 2, 7}, true},
		{"version_2.3.1.txt", version{2, 3, 1}, true},
		{"version_2.3.3_trixie.txt", version{2, 3, 3}, true},
	} {
		out, err := os.ReadFile(filepath.Join("testdata", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		v, ok := parseVersion(out)
		if !ok || v != tc.want || v.atLeast(reloadKeepsMembers) != tc.inPlace {
			t.Errorf("%s: version %v (%v), reload in place %v; want %v, %v", tc.file, v, ok, v.atLeast(reloadKeepsMembers), tc.want, tc.inPlace)
		}
	}
	for banner, inPlace := range map[string]bool{
		"Keepalived v2.0.14 (03/24,2019)\n": false,
		"Keepalived v2.2.1 (01/25,2021)\n":  false,
		"Keepalived v2.2.2 (03/08,2021)\n":  true,
		"Keepalived v1.3.9 (10/21,2017)\n":  false,
		"Keepalived v10.0.0 (01/01,2040)\n": true,
	} {
		v, ok := parseVersion([]byte(banner))
		if !ok || v.atLeast(reloadKeepsMembers) != inPlace {
			t.Errorf("%q: %v (%v), in place %v", banner, v, ok, !inPlace)
		}
	}
	for _, out := range []string{"", "keepalived: unrecognized option '--version'\n", "Keepalived version 2.2.7\n", "  Keepalived v2.2.7\n"} {
		if v, ok := parseVersion([]byte(out)); ok {
			t.Errorf("%q read as %v", out, v)
		}
	}
}

// fakeVersion has the fake keepalived print testdata/file for --version.
func (e *fakeEnv) fakeVersion(t *testing.T, file string) {
	t.Helper()
	out, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "version"), out, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (e *fakeEnv) versionCalls() int {
	data, _ := os.ReadFile(filepath.Join(e.dir, "version.calls"))
	return strings.Count(string(data), "\n")
}

// reloadOf reloads listener l1 and reports whether that was in place and
// the keepalived before and after.
func reloadOf(t *testing.T, s *LVS) (inPlace bool, before, after int) {
	t.Helper()
	before, _ = pidfile.Read(s.Layout().PidPath("l1"))
	inPlace, err := s.Reload(context.Background(), "l1")
	if err != nil {
		t.Fatal(err)
	}
	after, _ = pidfile.Read(s.Layout().PidPath("l1"))
	return inPlace, before, after
}

// A keepalived whose reload keeps the members' states (2.2.7, Debian
// bookworm's) is reloaded in place: the same process gets SIGHUP, the
// heartbeat no longer calls the listener's members RESTARTING, and its
// version was asked once. One that is not running is started.
func TestLVSReloadIsSIGHUPWhereKeepalivedKeepsMembers(t *testing.T) {
	e := newFakeEnv(t)
	e.fakeVersion(t, "version_2.2.7_bookworm.txt")
	s := e.lvs(t)
	l := s.Layout()
	ctx := context.Background()
	if _, err := s.Reload(ctx, "l1"); err == nil {
		t.Fatal("reload without a config succeeded")
	}
	if err := s.Upload(ctx, "l1", []byte(lvsConf)); err != nil {
		t.Fatal(err)
	}
	if inPlace, before, after := reloadOf(t, s); inPlace || before != 0 || after == 0 {
		t.Fatalf("first reload: in place %v, keepalived %d → %d; want a start", inPlace, before, after)
	}
	for i := range 3 {
		// The controller uploads before each reload.
		if err := s.Upload(ctx, "l1", []byte(lvsConf+"# change "+string(rune('a'+i))+"\n")); err != nil {
			t.Fatal(err)
		}
		// File times are coarse: the upload is dated later than the last
		// reload, as the controller's next change would be.
		later := time.Now().Add(time.Duration(i+1) * time.Second)
		if err := os.Chtimes(l.ConfigPath("l1"), later, later); err != nil {
			t.Fatal(err)
		}
		if !restarting(t, l, "l1") {
			t.Fatal("an uploaded config not yet loaded is not RESTARTING")
		}
		inPlace, before, after := reloadOf(t, s)
		if !inPlace || before == 0 || after != before {
			t.Fatalf("reload %d: in place %v, keepalived %d → %d; want the same, reloaded", i, inPlace, before, after)
		}
		if restarting(t, l, "l1") {
			t.Fatalf("reload %d: the listener is still RESTARTING", i)
		}
		if s.Busy("l1") {
			t.Fatalf("reload %d: still busy", i)
		}
		testkit.WaitFor(t, 10*time.Second, "the SIGHUP reaching keepalived", func() bool {
			out, _ := os.ReadFile(l.Files("l1").Log)
			return strings.Count(string(out), "reloaded") == i+1
		})
	}
	if n := e.versionCalls(); n != 1 {
		t.Fatalf("keepalived --version ran %d times, want once", n)
	}
	// Killed and not yet back: the reload starts one.
	s.Close()
	pid, _ := pidfile.Read(l.PidPath("l1"))
	syscall.Kill(-pid, syscall.SIGKILL)
	testkit.WaitFor(t, 10*time.Second, "keepalived gone", func() bool { return !l.Running("l1") })
	s2 := e.lvs(t)
	if inPlace, _, after := reloadOf(t, s2); inPlace || after == 0 || after == pid {
		t.Fatalf("reload of a dead keepalived: in place %v, keepalived %d → %d", inPlace, pid, after)
	}
}

// An older keepalived (2.0.6), or one whose version cannot be read, is
// restarted on reload, as upstream does; an unreadable version is asked
// again at the next reload.
func TestLVSReloadIsRestartForOlderKeepalived(t *testing.T) {
	for _, file := range []string{"version_2.0.6.txt", ""} {
		t.Run("version="+file, func(t *testing.T) {
			e := newFakeEnv(t)
			if file != "" {
				e.fakeVersion(t, file)
			}
			s := e.lvs(t)
			ctx := context.Background()
			if err := s.Upload(ctx, "l1", []byte(lvsConf)); err != nil {
				t.Fatal(err)
			}
			if err := s.Start(ctx, "l1"); err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				inPlace, before, after := reloadOf(t, s)
				if inPlace || before == 0 || after == 0 || after == before {
					t.Fatalf("reload %d: in place %v, keepalived %d → %d; want a new one", i, inPlace, before, after)
				}
			}
			want := 1
			if file == "" {
				want = 2
			}
			if n := e.versionCalls(); n != want {
				t.Fatalf("keepalived --version ran %d times, want %d", n, want)
			}
		})
	}
}
