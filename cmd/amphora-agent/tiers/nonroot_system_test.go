//go:build system

package tiers_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
)

// An agent run without root (make run as a user) says in one line that
// the data-plane namespace cannot be made and what that breaks, and logs
// no ERROR (no netlink error code); the API still serves.
func TestRunWithoutRootSaysWhatWillNotWork(t *testing.T) {
	topo.RequireRoot(t) // to become nobody
	const nobody = 65534
	env := testenv.New(t)
	if err := os.WriteFile(env.ConfigPath, []byte(env.Config()), 0o600); err != nil {
		t.Fatal(err)
	}
	err := filepath.WalkDir(env.Dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, nobody, nobody)
	})
	if err != nil {
		t.Fatal(err)
	}
	env.Credential = &syscall.Credential{Uid: nobody, Gid: nobody}
	env.Start()
	testenv.WaitFor(t, 10*time.Second, "start-up complete", func() bool { return env.Count("start-up complete") > 0 })
	out := env.Output()
	t.Logf("agent output:\n%s", out)
	if n := strings.Count(out, "not running as root: the data-plane namespace "+env.Namespace()+" cannot be made"); n != 1 {
		t.Errorf("%d lines saying the namespace cannot be made, want 1", n)
	}
	for _, bad := range []string{"\tERROR\t", "operation not permitted", "netlink"} {
		if strings.Contains(out, bad) {
			t.Errorf("output holds %q", bad)
		}
	}
	if code, _, body := env.Do("GET", "/1.0/info", nil); code != 200 {
		t.Errorf("GET /1.0/info: %d %s", code, body)
	}
}
