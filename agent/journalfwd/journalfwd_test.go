package journalfwd

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/journal"

	"github.com/amphora-agent/amphora-agent/agent/journalfwd/journalfwdtest"
)

type fakeJournal struct{ journalfwdtest.Journal }

func (j *fakeJournal) got() []string { return j.Messages("") }

// want polls until the journal holds exactly lines.
func (j *fakeJournal) want(t *testing.T, lines ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if got := j.got(); reflect.DeepEqual(got, lines) || len(got) == 0 && len(lines) == 0 {
			// An empty want must stay empty a little: the sender is async.
			if len(lines) == 0 {
				time.Sleep(50 * time.Millisecond)
				if len(j.got()) != 0 {
					break
				}
			}
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("journal holds %q, want %q", j.got(), lines)
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func start(t *testing.T, path string, o Options) (*Follower, *fakeJournal) {
	j := &fakeJournal{}
	if o.Sink == nil {
		o.Sink = j
	}
	o.Identifier = "haproxy-lb1"
	fw := New(path, o)
	t.Cleanup(fw.Close)
	return fw, j
}

// What the file held before the follower started is not sent again (an
// agent restart resumes from the end); what comes after is, line by line,
// under the identifier, and an unfinished line waits for its end.
func TestFollowerResumesAtTheEndAndWaitsForWholeLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "haproxy.log")
	appendFile(t, path, "old 1\nold 2\n")
	fw, j := start(t, path, Options{})
	fw.Poll()
	j.want(t)
	appendFile(t, path, "new 1\nnew 2 part")
	fw.Poll()
	j.want(t, "new 1")
	appendFile(t, path, "ial\n\n")
	fw.Poll()
	j.want(t, "new 1", "new 2 partial")
	if id := j.Entries()[0].Fields["SYSLOG_IDENTIFIER"]; id != "haproxy-lb1" {
		t.Errorf("identifier %q", id)
	}
}

// A file that is not there yet is read from its start once it appears.
func TestFollowerReadsANewFileFromItsStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "haproxy.log")
	fw, j := start(t, path, Options{})
	fw.Poll()
	appendFile(t, path, "first\n")
	fw.Poll()
	j.want(t, "first")
}

// A new run of the daemon moves the file to .1 and starts a new one: the
// end of the old file (and its unfinished last line) is sent before the
// new file's lines.
func TestFollowerFollowsARenamedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "haproxy.log")
	appendFile(t, path, "a\n")
	fw, j := start(t, path, Options{})
	appendFile(t, path, "b\nc unfinished")
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	appendFile(t, path, "d\n")
	fw.Poll()
	j.want(t, "b", "c unfinished", "d")
	appendFile(t, path, "e\n")
	fw.Poll()
	j.want(t, "b", "c unfinished", "d", "e")
}

// The size cap empties the file under the daemon: after a Rewind the
// follower reads it from its start, and without one (someone else
// truncated it) it notices the file got shorter.
func TestFollowerAfterTruncation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "haproxy.log")
	fw, j := start(t, path, Options{})
	appendFile(t, path, "a long first line\n")
	fw.Poll()
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	fw.Rewind()
	appendFile(t, path, "this line is longer than the first one was\n")
	fw.Poll()
	j.want(t, "a long first line", "this line is longer than the first one was")

	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	appendFile(t, path, "short\n")
	fw.Poll()
	j.want(t, "a long first line", "this line is longer than the first one was", "short")
}

// A line longer than MaxLine goes in pieces, also before its end is
// written, so a daemon writing without newlines cannot grow memory.
func TestFollowerBoundsLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "haproxy.log")
	fw, j := start(t, path, Options{MaxLine: 10})
	appendFile(t, path, strings.Repeat("x", 25))
	fw.Poll()
	j.want(t, "xxxxxxxxxx", "xxxxxxxxxx")
	if len(fw.partial) != 5 {
		t.Errorf("%d bytes kept", len(fw.partial))
	}
	appendFile(t, path, "\n"+strings.Repeat("y", 12)+"\n")
	fw.Poll()
	j.want(t, "xxxxxxxxxx", "xxxxxxxxxx", "xxxxx", "yyyyyyyyyy", "yy")
}

// Priorities come from the classifier; skipped lines are not sent.
func TestFollowerPriorityAndSkip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "haproxy.log")
	fw, j := start(t, path, Options{
		Priority: func(l []byte) journal.Priority {
			if bytes.HasPrefix(l, []byte("[ALERT]")) {
				return journal.PriErr
			}
			return journal.PriInfo
		},
		Skip: func(l []byte) bool { return bytes.HasPrefix(l, []byte("skip")) },
	})
	appendFile(t, path, "[ALERT] bad\nskip me\nfine\n")
	fw.Poll()
	j.want(t, "[ALERT] bad", "fine")
	if e := j.Entries(); e[0].Priority != journal.PriErr || e[1].Priority != journal.PriInfo {
		t.Errorf("entries %v", e)
	}
}

// A journal that does not take lines never blocks Poll: the queue is
// bounded, the overflow is dropped and reported once the journal is back.
func TestFollowerNeverBlocksOnASlowJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "haproxy.log")
	j := &fakeJournal{}
	j.Gate = make(chan struct{})
	fw, _ := start(t, path, Options{Sink: j, Queue: 4})
	var b strings.Builder
	for i := range 20 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	appendFile(t, path, b.String())
	done := make(chan struct{})
	go func() { fw.Poll(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Poll blocked on the journal")
	}
	close(j.Gate)
	for deadline := time.Now().Add(5 * time.Second); len(fw.q) > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the queue does not drain")
		}
	}
	appendFile(t, path, "after\n")
	fw.Poll()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(strings.Join(j.got(), "\n"), "after") {
		if time.Now().After(deadline) {
			t.Fatalf("journal holds %q", j.got())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Whatever the sender had taken when the journal stalled, and what
	// fitted in the queue, was sent; the rest is reported as dropped.
	got := j.got()
	var dropped, sent int
	for _, l := range got {
		var n int
		if _, err := fmt.Sscanf(l, "%d lines of", &n); err == nil {
			dropped += n
			continue
		}
		if strings.HasPrefix(l, "line ") {
			sent++
		}
	}
	if dropped == 0 || sent+dropped != 20 || sent > 5 {
		t.Errorf("journal holds %q", got)
	}
}
