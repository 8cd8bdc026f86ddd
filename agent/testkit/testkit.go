// Package testkit holds the test helpers every tier shares: waiting for a
// condition under a deadline, skipping what needs root, and a clock whose
// waits a test sees instead of spending. It imports nothing of this
// module, so any package's tests may use it.
package testkit

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// maxPoll bounds the pause between two looks at a condition: polling
// starts at a millisecond, so quick conditions end quickly, and backs off
// so that slow ones (an HTTP round trip, a daemon starting) do not load a
// busy machine.
const maxPoll = 20 * time.Millisecond

// Until polls cond until it holds or timeout passes and reports whether it
// held. It is for goroutines other than the test's, which must not call
// t.Fatal.
func Until(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
		pause = min(2*pause, maxPoll)
	}
	return true
}

// WaitFor polls cond until it holds; when timeout passes first, the test
// fails naming what it waited for.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Until(timeout, cond) {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// RequireRoot skips the test unless it runs as root; why says what needs it.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: " + why)
	}
}

// File is one file a test read from its testdata.
type File struct {
	Path string
	Data []byte
}

// ReadFiles reads every file matching pattern, in name order, and fails
// the test when none matches: a seed corpus or a golden set that went
// missing must not let a test pass on nothing.
func ReadFiles(t testing.TB, pattern string) []File {
	t.Helper()
	paths, err := filepath.Glob(pattern)
	if err != nil || len(paths) == 0 {
		t.Fatalf("no files match %s: %v", pattern, err)
	}
	files := make([]File, len(paths))
	for i, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[i] = File{Path: p, Data: data}
	}
	return files
}

// Delays stands in for time.After where code takes its clock as a
// function: it records every delay asked for and lets it pass at once, so
// a test checks the waits (a backoff series, a settle time) without
// spending them in real time.
type Delays struct {
	mu    sync.Mutex
	asked []time.Duration
}

// After records d and returns a channel that is ready at once.
func (c *Delays) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.asked = append(c.asked, d)
	c.mu.Unlock()
	ch := make(chan time.Time, 1)
	ch <- time.Now().Add(d)
	return ch
}

// Asked returns the delays asked for so far, in order.
func (c *Delays) Asked() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.asked)
}

// WriteFile writes content to path, owner-only, making its folder first:
// for a test laying out the files a component finds on disk.
func WriteFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// SyncBuffer is a bytes.Buffer safe for concurrent use: a child
// process's output can be read while the process writes it.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
