// Package ctrlutil runs the Octavia controller's own code (Debian's
// python3-octavia) against the agent for the interop and VM tiers: the
// controller scripts under tiers/testdata and the driver client of the
// HAProxy phases (HAPController).
package ctrlutil

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
)

const (
	// DebianPython is the interpreter python3-octavia is installed for; the
	// python3 on PATH may be another one.
	DebianPython = "/usr/bin/python3"
	// ScriptTimeout bounds one run of the controller script (imports alone
	// take several seconds).
	ScriptTimeout = 120 * time.Second
)

// RequireOctavia fails (never skips) when the controller code is missing:
// this tier exists to run against it.
func RequireOctavia(t *testing.T) {
	t.Helper()
	const hint = "the interop tier needs Debian's python3-octavia; run `make test` (which installs python3-octavia)"
	if _, err := os.Stat(DebianPython); err != nil {
		t.Fatalf("%s: %v; %s", DebianPython, err, hint)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, DebianPython, "-c",
		"import octavia.amphorae.drivers.haproxy.rest_api_driver")
	cmd.Env = PythonEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import octavia's amphora REST driver: %v\n%s\n%s", DebianPython, err, out, hint)
	}
}

// PythonEnv is the environment for the controller script: no variables of
// another Python installation, and no HTTP proxy between the controller
// and the amphora.
func PythonEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "PYTHON"), strings.HasPrefix(name, "VIRTUAL_ENV"),
			strings.EqualFold(name, "http_proxy"), strings.EqualFold(name, "https_proxy"),
			strings.EqualFold(name, "all_proxy"), strings.EqualFold(name, "no_proxy"),
			strings.EqualFold(name, "REQUESTS_CA_BUNDLE"), strings.EqualFold(name, "CURL_CA_BUNDLE"):
			continue
		}
		env = append(env, kv)
	}
	return append(env, "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
}

// TestdataScript is the absolute path of a controller script under
// tiers/testdata, found from this file, whatever the test's working
// folder.
func TestdataScript(t *testing.T, elem ...string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	script, err := filepath.Abs(filepath.Join(append([]string{filepath.Dir(file), "..", "..", "testdata"}, elem...)...))
	if err != nil {
		t.Fatal(err)
	}
	return script
}

// RunControllerScript runs a controller script under a deadline and
// returns its stdout, its stderr (octavia's log) and how long it ran; a
// failed run fails the test with the script's traceback and the agent's
// log.
func RunControllerScript(t *testing.T, env *testenv.Env, script string, args ...string) ([]byte, string, time.Duration) {
	t.Helper()
	name := filepath.Base(script)
	ctx, cancel := context.WithTimeout(context.Background(), ScriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, DebianPython, append([]string{script}, args...)...)
	cmd.Env = PythonEnv()
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("controller script %s did not finish within %v\nstderr:\n%s\nagent output:\n%s", name, ScriptTimeout, stderr.String(), env.Output())
	}
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("running %s: %v", script, err)
		}
		t.Fatalf("controller script %s failed after %v: %v\nstderr:\n%s\nstdout:\n%s\nagent output:\n%s",
			name, took.Round(time.Millisecond), err, stderr.String(), stdout.String(), env.Output())
	}
	return stdout.Bytes(), stderr.String(), took
}

func Deref(s *string) string {
	if s == nil {
		return "nothing"
	}
	return *s
}
