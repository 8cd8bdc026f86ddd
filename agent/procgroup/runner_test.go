package procgroup

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Output keeps stderr out, CombinedOutput keeps it in, and Env replaces
// the environment.
func TestExecOutputs(t *testing.T) {
	script := `echo out; echo err >&2; echo "env=$AA_RUNNER_TEST"`
	t.Setenv("AA_RUNNER_TEST", "inherited")
	out, err := Exec{}.Output(context.Background(), "sh", "-c", script)
	if err != nil || string(out) != "out\nenv=inherited\n" {
		t.Fatalf("Output: %q, %v", out, err)
	}
	out, err = Exec{Env: []string{"AA_RUNNER_TEST=replaced"}}.CombinedOutput(context.Background(), "sh", "-c", script)
	if err != nil || !strings.Contains(string(out), "err\n") || !strings.Contains(string(out), "env=replaced\n") {
		t.Fatalf("CombinedOutput: %q, %v", out, err)
	}
}

func TestExecEndsAtDeadline(t *testing.T) {
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("sleep not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := (Exec{}).Output(ctx, "sleep", "10"); err == nil {
		t.Fatal("sleep 10 succeeded despite the timeout")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("timeout took %v", d)
	}
}
