package haproxy

import (
	"context"
	"fmt"
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
func TestUploadWithLongLuaChildEndsAtTheDeadline(t *testing.T) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy is not installed (make test installs it)")
	}
	const timeout = time.Second
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
			dir := t.TempDir()
			st := realStore(t, bin, dir)
			pidFile, script := filepath.Join(dir, "child.pid"), filepath.Join(dir, "spawn.lua")
			lua := fmt.Sprintf("os.execute(%q)\n", fmt.Sprintf(c.shell, pidFile))
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
			if bound := timeout + 4*time.Second; took > bound {
				t.Errorf("upload answered after %v, want at most %v", took, bound)
			}
			if c.valid && err != nil {
				t.Errorf("upload: %v", err)
			}
			if fe, ok := fault.As(err); !c.valid && (!ok || fe.Kind != fault.KindInternal || !strings.Contains(fe.Details, "did not finish")) {
				t.Errorf("upload: %v; want an internal error, saying the check did not finish", err)
			}
			data, err := os.ReadFile(pidFile)
			if err != nil {
				t.Fatalf("the lua script did not run: %v", err)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
			if err != nil {
				t.Fatal(err)
			}
			procgrouptest.WaitGone(t, pid)
		})
	}
}
