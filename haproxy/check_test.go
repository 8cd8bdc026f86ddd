package haproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/procgroup/procgrouptest"
)

// A lua-load script runs inside `haproxy -c`. One that starts a long child
// must not hold the upload (and the agent's mutation lock) past the
// client's wait, whether HAProxy waits for the child or the child outlives
// HAProxy holding its output; either way the child is killed, and a check
// cut short is a 500 (it says nothing about the config), never a 400.
//
// No bound here is on how fast HAProxy starts: the child lives longer than
// any deadline used, so an upload that ended at all before the child would
// have ended did not wait for it.
func TestUploadWithLongLuaChildEndsAtTheDeadline(t *testing.T) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy is not installed (make test installs it)")
	}
	const childLife = 75 * time.Second
	cases := []struct {
		name  string
		shell string // run by the script with os.execute; writes the child's pid to %s
		valid bool
	}{
		{"HAProxy waits for the child", "echo $$ > %s; exec sleep 75", false},
		{"the child outlives HAProxy", "sleep 75 & echo $! > %s", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// A check that must end at its deadline gets a short one, doubled
			// while HAProxy was killed before it reached the script (a loaded
			// machine); one that must succeed gets a client that waits 30 s,
			// which still ends before the child would.
			timeout := time.Second
			if c.valid {
				timeout = 30 * time.Second
			}
			for {
				if upload(t, bin, c.shell, c.valid, timeout, childLife) {
					return
				}
				if timeout *= 2; timeout >= childLife {
					t.Fatalf("the lua script did not run within %v", timeout/2)
				}
				t.Logf("the lua script did not run within the deadline; again with %v", timeout)
			}
		})
	}
}

// upload checks a config whose lua-load script runs shell with a pid file,
// for a client that waits timeout, and reports whether the script ran; when it did, the upload must have
// ended as valid says and before childLife, and the child must be gone.
func upload(t *testing.T, bin, shell string, valid bool, timeout, childLife time.Duration) bool {
	t.Helper()
	dir := t.TempDir()
	st := realStore(t, bin, dir)
	pidFile, script := filepath.Join(dir, "child.pid"), filepath.Join(dir, "spawn.lua")
	lua := fmt.Sprintf("os.execute(%q)\n", fmt.Sprintf(shell, pidFile))
	if err := os.WriteFile(script, []byte(lua), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := "global\n    lua-load " + script + "\ndefaults\n    mode http\n    timeout connect 1s\n    timeout client 1s\n    timeout server 1s\n" +
		"frontend L1\n    bind 127.0.0.1:8080\n    http-request return status 200\n"

	req, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	err := st.Upload(asUploaded(req), "AMP1", "lb1", []byte(cfg))
	took := time.Since(start)
	data, readErr := os.ReadFile(pidFile)
	// The shell may also have been killed between making the file and
	// writing to it.
	if !valid && (errors.Is(readErr, fs.ErrNotExist) || readErr == nil && len(bytes.TrimSpace(data)) == 0) {
		return false
	}
	if readErr != nil {
		t.Fatalf("the lua script did not run: %v (upload: %v)", readErr, err)
	}
	if took >= childLife {
		t.Errorf("upload answered after %v, when the child would have ended: it waited for the child", took)
	}
	if valid && err != nil {
		t.Errorf("upload: %v", err)
	}
	if fe, ok := fault.As(err); !valid && (!ok || fe.Kind != fault.KindInternal || !strings.Contains(fe.Details, "did not finish")) {
		t.Errorf("upload: %v; want an internal error, saying the check did not finish", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	procgrouptest.WaitGone(t, pid)
	return true
}
