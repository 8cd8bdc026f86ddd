package haproxy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/caller"
	"github.com/amphora-agent/amphora-agent/agent/fault"
)

// slowCmd is a haproxy_cmd wrapper that runs script first, then the real
// HAProxy with the arguments it was given.
func slowCmd(t *testing.T, script string) string {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy is not installed (make test installs it)")
	}
	path := filepath.Join(t.TempDir(), "haproxy-slow")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script+"\nexec "+bin+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// askedStartSupervisor is realSupervisor with gen1 uploaded, whose starts
// nobody waits on are answered after 300 ms, and whose HAProxy command,
// from now on, is a wrapper running script first.
func askedStartSupervisor(t *testing.T, script string) (*Supervisor, *Store, int) {
	sup, st, port := realSupervisor(t)
	sup.opts.StartWait = 300 * time.Millisecond
	if err := st.Upload(context.Background(), "AMP1", "lb1", testConfig(st, port, "gen1")); err != nil {
		t.Fatal(err)
	}
	st.HAProxyCmd = slowCmd(t, script)
	return sup, st, port
}

// A start the controller asked for waits for HAProxy, however long it
// takes to start within upstream's 90 s, as upstream's systemctl start
// does (here a wrapper sleeping well past StartWait): it is answered once
// HAProxy serves, never before.
func TestSupervisorAskedStartWaitsForHAProxy(t *testing.T) {
	sup, _, port := askedStartSupervisor(t, "sleep 2")
	if err := sup.Start(caller.With(context.Background()), "lb1"); err != nil {
		t.Fatalf("asked start: %v", err)
	}
	if sup.instance("lb1").d.Starting() != nil {
		t.Fatal("the asked start was answered while HAProxy was still starting")
	}
	if got := answer(t, port); got != "gen1" {
		t.Fatalf("HAProxy answered %q right after its start was answered", got)
	}
}

// One whose HAProxy dies while the controller waits is answered 500 with
// its output, as upstream's failed systemctl start.
func TestSupervisorAskedStartThatDiesFails(t *testing.T) {
	sup, _, _ := askedStartSupervisor(t, "sleep 2; echo '[ALERT] the wrapper gave up'; exit 1")
	err := sup.Start(caller.With(context.Background()), "lb1")
	fe, ok := fault.As(err)
	if !ok || fe.Kind != fault.KindInternal || fe.Message != "Error starting haproxy" || !strings.Contains(fe.Details, "the wrapper gave up") {
		t.Fatalf("asked start that died: %v", err)
	}
	// Ends the retries.
	if err := sup.Stop(context.Background(), "lb1"); err != nil {
		t.Fatal(err)
	}
}

// A start asked for while an earlier one, whose client went away, is still
// loading waits for that start, as systemctl start joins the start job
// under way.
func TestSupervisorAskedStartJoinsTheStartUnderWay(t *testing.T) {
	sup, _, port := askedStartSupervisor(t, "sleep 3")
	gone, leave := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, leave)
	if err := sup.Start(caller.With(gone), "lb1"); err != nil {
		t.Fatalf("start whose client left: %v", err)
	}
	if sup.instance("lb1").d.Starting() == nil {
		t.Skip("HAProxy was ready before the first client left")
	}
	if err := sup.Start(caller.With(context.Background()), "lb1"); err != nil {
		t.Fatalf("second asked start: %v", err)
	}
	if sup.instance("lb1").d.Starting() != nil {
		t.Fatal("the second asked start was answered while HAProxy was still starting")
	}
	if got := answer(t, port); got != "gen1" {
		t.Fatalf("HAProxy answered %q right after its start was answered", got)
	}
}
