//go:build system

package system_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
)

// TestPingWrapper runs the package's ping-wrapper.sh the way HAProxy's
// external check does for a PING health monitor: inside the amphora's
// namespace, as the unprivileged user HAProxy runs as, with only HAProxy's
// variables in the environment (an empty PATH) and its four arguments. A
// member that answers is UP (exit 0), one that does not is DOWN (non-zero),
// over IPv4 and IPv6, each within HAProxy's usual check timeout.
func TestPingWrapper(t *testing.T) {
	topo.RequireRoot(t)
	if _, err := os.Stat("/bin/ping"); err != nil {
		t.Skip("no /bin/ping (iputils-ping; make deps installs it)")
	}
	// A copy the unprivileged user can reach (the worktree may not be).
	dir, err := os.MkdirTemp("", "aa-pingwrap-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	src, err := os.ReadFile(filepath.Join(packagingDir(), "ping-wrapper.sh"))
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "ping-wrapper.sh")
	if err := os.WriteFile(script, src, 0o755); err != nil {
		t.Fatal(err)
	}

	amp, member := topo.NewNamespace(t, "aapwa"), topo.NewNamespace(t, "aapwm")
	topo.Link(t, amp, "eth1", []string{"198.51.100.40/24", "2001:db8:40::40/64"},
		member, "eth1", []string{"198.51.100.41/24", "2001:db8:40::41/64"})

	for _, c := range []struct {
		name, addr string
		up         bool
	}{
		{"ipv4 member answers", "198.51.100.41", true},
		{"ipv4 member silent", "198.51.100.49", false},
		{"ipv6 member answers", "2001:db8:40::41", true},
		{"ipv6 member silent", "2001:db8:40::49", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// HAProxy's external-check environment and arguments:
			// proxy address and port, server address and port.
			cmd := amp.Command(ctx, "setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
				"env", "-i", "PATH=", "HAPROXY_PROXY_NAME=pool", "HAPROXY_PROXY_ID=3",
				"HAPROXY_PROXY_ADDR=", "HAPROXY_PROXY_PORT=",
				"HAPROXY_SERVER_NAME=member", "HAPROXY_SERVER_ID=1",
				"HAPROXY_SERVER_ADDR="+c.addr, "HAPROXY_SERVER_PORT=80",
				"HAPROXY_SERVER_MAXCONN=0", "HAPROXY_SERVER_CURCONN=0",
				script, "", "", c.addr, "80")
			start := time.Now()
			out, err := cmd.CombinedOutput()
			took := time.Since(start)
			var exit *exec.ExitError
			code := 0
			switch {
			case errors.As(err, &exit):
				code = exit.ExitCode()
			case err != nil:
				t.Fatalf("running the wrapper: %v %s", err, out)
			}
			t.Logf("%s: exit %d after %v %s", c.addr, code, took.Round(time.Millisecond), out)
			if c.up && code != 0 {
				t.Fatalf("a member that answers pings: exit %d, want 0 (UP)", code)
			}
			if !c.up && code == 0 {
				t.Fatal("a member that does not answer: exit 0, want non-zero (DOWN)")
			}
			if took > 3*time.Second {
				t.Fatalf("took %v: longer than a check's timeout", took)
			}
		})
	}
}
