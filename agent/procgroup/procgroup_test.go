package procgroup

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/procgroup/procgrouptest"
)

// The command forks a child that would outlive every deadline; each case
// must return in about its bound and leave the child dead.
func TestChildrenDoNotOutliveTheDeadline(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	cases := []struct {
		name    string
		script  string
		timeout time.Duration
		bound   time.Duration // how long Run may take
		wantErr bool
	}{
		// The shell waits for its child: the deadline kills both.
		{"waits for the child", "sleep 75 & echo $!; wait", time.Second, time.Second + 3*WaitDelay, true},
		// The shell exits at once, its child keeps the output open: Run
		// stops waiting for it and the shell's success stands.
		{"exits, child holds the output", "sleep 75 & echo $!", time.Minute, 3 * WaitDelay, false},
		// The child lets go of the output: nothing to wait for, yet it
		// must not survive the command.
		{"exits, child detached from the output", "sleep 75 >/dev/null 2>&1 & echo $!", time.Minute, 3 * WaitDelay, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
			defer cancel()
			cmd := Command(ctx, "sh", "-c", c.script)
			start := time.Now()
			out, err := CombinedOutput(cmd, nil)
			took := time.Since(start)
			if (err != nil) != c.wantErr {
				t.Errorf("err = %v, want an error: %v", err, c.wantErr)
			}
			if took > c.bound {
				t.Errorf("took %v, want at most %v", took, c.bound)
			}
			pid, perr := strconv.Atoi(strings.TrimSpace(string(out)))
			if perr != nil {
				t.Fatalf("output %q: %v", out, perr)
			}
			procgrouptest.WaitGone(t, pid)
		})
	}
}
