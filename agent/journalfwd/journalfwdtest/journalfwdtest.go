// Package journalfwdtest is a journal for tests: it keeps what it is sent.
package journalfwdtest

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/journal"
)

// Entry is one line sent to the journal.
type Entry struct {
	Message  string
	Priority journal.Priority
	Fields   map[string]string
}

// Journal records every entry. While Gate is set, Send waits for it to be
// closed (a journal that does not keep up).
type Journal struct {
	Gate chan struct{}

	mu      sync.Mutex
	entries []Entry
}

func (j *Journal) Send(m string, p journal.Priority, f map[string]string) error {
	if j.Gate != nil {
		<-j.Gate
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.entries = append(j.entries, Entry{Message: m, Priority: p, Fields: f})
	return nil
}

// Entries is what the journal holds so far.
func (j *Journal) Entries() []Entry {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.entries)
}

// Messages are the messages of the entries with this SYSLOG_IDENTIFIER
// ("" for all of them), in order.
func (j *Journal) Messages(identifier string) []string {
	var out []string
	for _, e := range j.Entries() {
		if identifier == "" || e.Fields["SYSLOG_IDENTIFIER"] == identifier {
			out = append(out, e.Message)
		}
	}
	return out
}

// WaitFor polls until ok holds for the messages of identifier, or fails
// the test after timeout.
func (j *Journal) WaitFor(t testing.TB, timeout time.Duration, identifier, what string, ok func([]string) bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok(j.Messages(identifier)) {
		if time.Now().After(deadline) {
			t.Fatalf("the journal does not show %s under %q within %v; it holds %q", what, identifier, timeout, j.Messages(""))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
