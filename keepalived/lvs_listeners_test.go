package keepalived

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/pidfile"
	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

const lvsConf = "net_namespace amphora-haproxy\n\nvirtual_server_group ipv4-group {\n    203.0.113.10 53\n}\n\nvirtual_server group ipv4-group {\n}\n"

// lvs is the listeners' supervision as one agent process would have it;
// validation refuses configs containing "bogus".
func (e *fakeEnv) lvs(t *testing.T) *LVS {
	s := NewLVS(LVSOptions{Base: e.base, Options: e.opts.Options,
		Validate: func(_ context.Context, path string) (string, error) {
			data, _ := os.ReadFile(path)
			if strings.Contains(string(data), "bogus") {
				return "Unknown keyword 'bogus'", errors.New("exit status 5")
			}
			return "", nil
		}})
	// Cleanups run last first: supervision ends before keepalived is
	// killed, or it starts a new one that writes its pid file while the
	// test's folder is being removed.
	t.Cleanup(func() {
		if pid, err := pidfile.Read(s.Layout().PidPath("l1")); err == nil {
			syscall.Kill(-pid, syscall.SIGKILL)
		}
	})
	t.Cleanup(s.Close)
	return s
}

func mtime(t *testing.T, path string) (m int64) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.ModTime().UnixNano()
}

// The heartbeat calls a listener RESTARTING while its config is newer
// than the checker's pid file (health-and-config §2.6).
func restarting(t *testing.T, l LVSLayout, id string) bool {
	return mtime(t, l.ConfigPath(id)) > mtime(t, l.Files(id).CheckPid)
}

func TestLVSListenerLifecycle(t *testing.T) {
	e := newFakeEnv(t)
	s := e.lvs(t)
	l := s.Layout()
	ctx := context.Background()
	if err := s.Start(ctx, "l1"); err == nil {
		t.Fatal("start without a config succeeded")
	} else if f, ok := fault.As(err); !ok || f.Message != "UDP Listener Not Found" {
		t.Fatalf("start without a config: %v", err)
	}

	// Refused upload: keepalived's output, nothing stored.
	err := s.Upload(ctx, "l1", []byte("bogus\n"))
	if f, ok := fault.As(err); !ok || f.Message != "Invalid request" || !strings.Contains(f.Details, "Unknown keyword") {
		t.Fatalf("invalid upload: %#v", err)
	}
	if s.Exists("l1") {
		t.Fatal("a refused config was stored")
	}
	if err := s.Upload(ctx, "l1", []byte(lvsConf)); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(l.UDPCheckPath()); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("udp_check.sh: %v %v", fi, err)
	}
	if err := s.Upload(ctx, "l1", []byte("bogus\n")); err == nil {
		t.Fatal("invalid upload accepted")
	}
	if got, _ := s.Config("l1"); string(got) != lvsConf {
		t.Fatalf("a refused upload replaced the config: %q", got)
	}
	if l.Running("l1") || l.Status("l1") != StatusOffline {
		t.Fatal("upload started keepalived")
	}
	if running, recorded, _ := s.instance("l1").d.ReadDesired(); !running || !recorded {
		t.Fatal("upload did not record the listener as wanted")
	}

	if err := s.Start(ctx, "l1"); err != nil {
		t.Fatal(err)
	}
	pid, _ := pidfile.Read(l.PidPath("l1"))
	if !l.Running("l1") || l.Status("l1") != StatusActive || restarting(t, l, "l1") {
		t.Fatalf("after start: running %v, status %s", l.Running("l1"), l.Status("l1"))
	}
	// start of a running listener changes nothing, as systemctl start.
	if err := s.Start(ctx, "l1"); err != nil || s.instance("l1").d.Pid() != pid {
		t.Fatalf("second start: %v, pid %d→%d", err, pid, s.instance("l1").d.Pid())
	}
	// A new config is "restarting" until the restart the controller sends.
	if err := s.Upload(ctx, "l1", []byte(lvsConf+"# v2\n")); err != nil {
		t.Fatal(err)
	}
	if !restarting(t, l, "l1") {
		t.Fatal("a new config is not seen as restarting")
	}
	if err := s.Restart(ctx, "l1"); err != nil {
		t.Fatal(err)
	}
	newPid := s.instance("l1").d.Pid()
	if newPid == pid || restarting(t, l, "l1") {
		t.Fatalf("restart: pid %d→%d, restarting %v", pid, newPid, restarting(t, l, "l1"))
	}

	// kill -9: restarted by the supervisor.
	syscall.Kill(newPid, syscall.SIGKILL)
	testkit.WaitFor(t, 10*time.Second, "a respawned keepalived", func() bool { p := s.instance("l1").d.Pid(); return p != 0 && p != newPid })
	pid = s.instance("l1").d.Pid()

	// A new agent adopts it.
	s.Close()
	s2 := e.lvs(t)
	if err := s2.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	if s2.instance("l1").d.Pid() != pid {
		t.Fatalf("restore started %d instead of adopting %d", s2.instance("l1").d.Pid(), pid)
	}

	// Stop is remembered across agents.
	if err := s2.Stop(ctx, "l1"); err != nil {
		t.Fatal(err)
	}
	if l.Running("l1") || l.Status("l1") != StatusOffline {
		t.Fatal("running after stop")
	}
	s2.Close()
	s3 := e.lvs(t)
	if err := s3.Restore(ctx); err != nil || l.Running("l1") {
		t.Fatalf("restore after stop: running %v, %v", l.Running("l1"), err)
	}
	// A reboot (nothing runs) brings a wanted listener back.
	if err := s3.Start(ctx, "l1"); err != nil {
		t.Fatal(err)
	}
	pid = s3.instance("l1").d.Pid()
	s3.Close()
	syscall.Kill(-pid, syscall.SIGKILL)
	testkit.WaitFor(t, 10*time.Second, "keepalived gone", func() bool { return !l.Running("l1") })
	s4 := e.lvs(t)
	if err := s4.Restore(ctx); err != nil || !l.Running("l1") {
		t.Fatalf("restore after a reboot: running %v, %v", l.Running("l1"), err)
	}

	// Delete: stopped, and every file made for it gone; the shared check
	// script and a file the agent did not make stay.
	stray := filepath.Join(l.Dir(), "octavia-keepalivedlvs-l1.operator-notes")
	os.WriteFile(stray, nil, 0o644)
	pid = s4.instance("l1").d.Pid()
	if err := s4.Delete(ctx, "l1"); err != nil {
		t.Fatal(err)
	}
	if syscall.Kill(pid, 0) == nil {
		t.Fatal("keepalived runs after delete")
	}
	entries, _ := os.ReadDir(l.Dir())
	var left []string
	for _, en := range entries {
		left = append(left, en.Name())
	}
	if strings.Join(left, " ") != "check octavia-keepalivedlvs-l1.operator-notes" {
		t.Fatalf("left after delete: %q", left)
	}
	if err := s4.Delete(ctx, "l1"); err != nil {
		t.Fatalf("second delete: %v", err)
	}
}

func TestLVSVIPs(t *testing.T) {
	cfg := "virtual_server_group ipv4-group {\n    203.0.113.10 53\n}\n\nvirtual_server_group ipv6-group {\n    2001:db8::10 53\n}\n\nvirtual_server group ipv4-group {\n    real_server 198.51.100.1 53 {\n    }\n}\n"
	got := VIPs([]byte(cfg))
	if len(got) != 2 || got[0].String() != "203.0.113.10" || got[1].String() != "2001:db8::10" {
		t.Fatalf("VIPs = %v", got)
	}
}

// Busy is true while a start, restart or restore of the listener's
// keepalived is under way (the heartbeat then reports its last reading),
// false the moment it ends, however it ended, and false while the
// supervisor respawns a keepalived that died on its own.
func TestLVSBusyDuringOperations(t *testing.T) {
	e := newFakeEnv(t)
	s := e.lvs(t)
	l := s.Layout()
	ctx := context.Background()
	hold := filepath.Join(e.dir, "hold")
	t.Cleanup(func() { os.Remove(hold) })
	if err := s.Upload(ctx, "l1", []byte(lvsConf)); err != nil {
		t.Fatal(err)
	}
	if s.Busy("l1") {
		t.Fatal("busy after an upload")
	}
	// A slow restart: busy from before keepalived stops until it runs.
	if err := s.Start(ctx, "l1"); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(hold, nil, 0o644)
	done := make(chan error, 1)
	go func() { done <- s.Restart(ctx, "l1") }()
	testkit.WaitFor(t, 10*time.Second, "keepalived stopped by the restart", func() bool { return !l.Running("l1") })
	if !s.Busy("l1") {
		t.Fatal("not busy while restarting")
	}
	os.Remove(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s.Busy("l1") || !l.Running("l1") {
		t.Fatalf("after the restart: busy %v, running %v", s.Busy("l1"), l.Running("l1"))
	}
	// A restart that fails is over once it returned.
	os.WriteFile(filepath.Join(e.dir, "refuse"), nil, 0o644)
	if err := s.Restart(ctx, "l1"); err == nil {
		t.Fatal("restart of a refusing keepalived succeeded")
	}
	if s.Busy("l1") {
		t.Fatal("busy after a failed restart")
	}
	os.Remove(filepath.Join(e.dir, "refuse"))
	testkit.WaitFor(t, 10*time.Second, "keepalived back after the failed restart", func() bool { return l.Running("l1") })
	// Killed: the respawn is supervision, not an operation.
	pid, _ := pidfile.Read(l.PidPath("l1"))
	os.WriteFile(hold, nil, 0o644)
	syscall.Kill(pid, syscall.SIGKILL)
	testkit.WaitFor(t, 10*time.Second, "keepalived dead", func() bool { return !l.Running("l1") })
	if s.Busy("l1") {
		t.Fatal("busy while keepalived is respawned")
	}
	os.Remove(hold)
	testkit.WaitFor(t, 10*time.Second, "keepalived respawned", func() bool { return l.Running("l1") })
	// A restore at start-up that starts it again is an operation too.
	s.Close()
	pid, _ = pidfile.Read(l.PidPath("l1"))
	syscall.Kill(-pid, syscall.SIGKILL)
	testkit.WaitFor(t, 10*time.Second, "keepalived gone", func() bool { return !l.Running("l1") })
	os.WriteFile(hold, nil, 0o644)
	s2 := e.lvs(t)
	go func() { done <- s2.Restore(ctx) }()
	testkit.WaitFor(t, 10*time.Second, "busy while restoring", func() bool { return s2.Busy("l1") })
	os.Remove(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s2.Busy("l1") || !l.Running("l1") {
		t.Fatalf("after the restore: busy %v, running %v", s2.Busy("l1"), l.Running("l1"))
	}
}

// A config uploaded within the same clock tick as the checker's start
// (file times advance by ticks of a few milliseconds) still reads as not
// loaded yet: here the checker's file carries a later time than the upload.
func TestUploadInTheCheckersTickIsRestarting(t *testing.T) {
	e := newFakeEnv(t)
	s := e.lvs(t)
	l := s.Layout()
	ctx := context.Background()
	if err := s.Upload(ctx, "l1", []byte(lvsConf)); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx, "l1"); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(l.Files("l1").CheckPid, later, later); err != nil {
		t.Fatal(err)
	}
	if err := s.Upload(ctx, "l1", []byte(lvsConf+"# v2\n")); err != nil {
		t.Fatal(err)
	}
	if !l.restarting("l1") {
		t.Fatal("a config uploaded after the start is not seen as restarting")
	}
}
