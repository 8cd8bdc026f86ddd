package testkit

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// ReadCapture reads a command's captured answer: a first line "exit N"
// (its exit status), then what it printed. A file without that line is
// all output, with status 0.
func ReadCapture(t testing.TB, path string) (out []byte, exit int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	first, rest, ok := bytes.Cut(data, []byte("\n"))
	if !ok || !bytes.HasPrefix(first, []byte("exit ")) {
		return data, 0
	}
	if exit, err = strconv.Atoi(string(first[len("exit "):])); err != nil {
		t.Fatalf("%s: %q", path, first)
	}
	return rest, exit
}

// Replaying writes a stand-in for a command that, whatever it is asked,
// prints out (on stderr when toStderr, as keepalived does) and exits with
// exit, and returns its path: a captured answer of a release that is not
// installed, played to the code that reads it.
func Replaying(t testing.TB, out []byte, exit int, toStderr bool) string {
	t.Helper()
	dir := t.TempDir()
	outPath := filepath.Join(dir, "out")
	if err := os.WriteFile(outPath, out, 0o644); err != nil {
		t.Fatal(err)
	}
	redirect := ""
	if toStderr {
		redirect = " >&2"
	}
	bin := filepath.Join(dir, "command")
	if err := os.WriteFile(bin, fmt.Appendf(nil, "#!/bin/sh\ncat %s%s\nexit %d\n", outPath, redirect, exit), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}
