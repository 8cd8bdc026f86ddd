package main

import (
	"flag"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite depaware.txt from the packages the binary links")

// depawareFile lists the packages outside the standard library the binary
// links, the module's own included: a new one, third-party or ours (a
// test helper reaching the product, say), shows in review as a line of
// this file.
const depawareFile = "depaware.txt"

const depawareHeader = `# The packages outside Go's standard library that the amphora-agent
# binary links, the module's own included: go list -deps of
# ./cmd/amphora-agent as make build builds it (CGO_ENABLED=0, linux/amd64).
# TestDepaware (depaware_test.go) fails when the binary's differ; after a
# change that means it:
#   go test ./cmd/amphora-agent/ -run TestDepaware -update
`

// TestDepaware fails when the packages the binary links outside the
// standard library differ from depaware.txt, naming each one gained or
// lost; -update rewrites the file.
func TestDepaware(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list -deps: %v", err)
	}
	got := strings.Fields(string(out))
	slices.Sort(got)
	if *update {
		if err := os.WriteFile(depawareFile, []byte(depawareHeader+strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s: %d packages", depawareFile, len(got))
		return
	}
	data, err := os.ReadFile(depawareFile)
	if err != nil {
		t.Fatalf("%v (go test ./cmd/amphora-agent/ -run TestDepaware -update writes it)", err)
	}
	var want []string
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			want = append(want, line)
		}
	}
	var diff []string
	for _, p := range got {
		if !slices.Contains(want, p) {
			diff = append(diff, "+ "+p)
		}
	}
	for _, p := range want {
		if !slices.Contains(got, p) {
			diff = append(diff, "- "+p)
		}
	}
	if len(diff) > 0 || !slices.IsSorted(want) {
		t.Errorf("the binary's packages outside the standard library differ from %s (+ linked now, - no longer; or the file is not sorted):\n%s\n"+
			"if that is meant: go test ./cmd/amphora-agent/ -run TestDepaware -update, and commit %s",
			depawareFile, strings.Join(diff, "\n"), depawareFile)
	}
}
