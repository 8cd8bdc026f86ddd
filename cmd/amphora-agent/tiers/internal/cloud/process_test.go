package cloud

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
)

// TestRestartWithOverride: Restart replaces the service's process in its
// place in Services, passes the override as a last --config-file, waits
// for the readiness check the service started with (on the new process's
// part of the log only), appends to the log, and a Restart with "" puts
// the first command line back.
func TestRestartWithOverride(t *testing.T) {
	c := &ControlPlane{Dir: t.TempDir(), NS: topo.NewNamespace(t, "rst"), t: t}
	if err := os.MkdirAll(c.path("logs"), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, s := range c.Services {
			s.Stop(5 * time.Second)
		}
	})
	// The script prints its arguments, so each process's line tells
	// which command line it ran with.
	s := c.startService("sleeper", "", nil, "sh", "-c", `echo "up:$*"; exec sleep 600`, "sleeper", "--config-file", "main.conf")
	c.waitReady(s, time.Minute, func(s *Service) error { return s.logHas("up:") })

	r := c.Restart("sleeper", "[house_keeping]\ncert_interval = 1\n")
	if len(c.Services) != 1 || c.Services[0] != r || r == s {
		t.Fatalf("Services after the restart: %v, want only the new service", c.Services)
	}
	if s.Running() || !r.Running() || r.cmd.Process.Pid == s.cmd.Process.Pid {
		t.Fatalf("old running %v, new running %v", s.Running(), r.Running())
	}
	override := c.path("sleeper-override.conf")
	if got, want := r.cmd.Args, append(slices.Clip(s.cmd.Args), "--config-file", override); !slices.Equal(got, want) {
		t.Errorf("restarted with %q, want %q", got, want)
	}
	if data, err := os.ReadFile(override); err != nil || !strings.Contains(string(data), "cert_interval = 1") {
		t.Errorf("the override file: %q, %v", data, err)
	}
	if log, _ := os.ReadFile(s.Log); !strings.Contains(string(log), override) {
		t.Errorf("Restart returned before the new process was ready (its log from byte %d):\n%s", r.LogFrom, log)
	}

	back := c.Restart("sleeper", "")
	if !slices.Equal(back.cmd.Args, s.cmd.Args) {
		t.Errorf("put back with %q, want %q", back.cmd.Args, s.cmd.Args)
	}
	log, _ := os.ReadFile(s.Log)
	want := "up:--config-file main.conf\nup:--config-file main.conf --config-file " + override + "\nup:--config-file main.conf\n"
	if string(log) != want {
		t.Errorf("the log after two restarts:\n%s\nwant:\n%s", log, want)
	}
}
