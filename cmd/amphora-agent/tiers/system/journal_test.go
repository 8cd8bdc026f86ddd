//go:build system

package system_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
)

// fakeJournald listens where journald's native socket would be and keeps
// the entries it is sent (journald's native protocol: KEY=VALUE lines, or
// KEY, a little-endian 64-bit length and the value for values holding a
// newline).
type fakeJournald struct {
	dir string
	mu  sync.Mutex
	got []map[string]string
}

func newFakeJournald(t *testing.T) *fakeJournald {
	dir, err := os.MkdirTemp("", "aa-journal-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "socket"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	j := &fakeJournald{dir: dir}
	go func() {
		buf := make([]byte, 1<<20)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			e := parseJournalEntry(buf[:n])
			j.mu.Lock()
			j.got = append(j.got, e)
			j.mu.Unlock()
		}
	}()
	return j
}

func parseJournalEntry(data []byte) map[string]string {
	e := map[string]string{}
	for len(data) > 0 {
		nl := bytes.IndexByte(data, '\n')
		if nl < 0 {
			break
		}
		line := data[:nl]
		if k, v, ok := bytes.Cut(line, []byte("=")); ok {
			e[string(k)] = string(v)
			data = data[nl+1:]
			continue
		}
		rest := data[nl+1:]
		if len(rest) < 8 {
			break
		}
		size := binary.LittleEndian.Uint64(rest)
		if uint64(len(rest)-8) < size+1 {
			break
		}
		e[string(line)] = string(rest[8 : 8+size])
		data = rest[8+size+1:]
	}
	return e
}

// messages are the MESSAGE fields of the entries with this identifier.
func (j *fakeJournald) messages(identifier string) []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []string
	for _, e := range j.got {
		if e["SYSLOG_IDENTIFIER"] == identifier {
			out = append(out, e["PRIORITY"]+" "+e["MESSAGE"])
		}
	}
	return out
}

// wrap runs the agent in a mount namespace of its own where this fake is
// mounted over /run/systemd/journal: the agent finds a journal, and
// nothing else on the host does. Mounts made on the host later (network
// namespaces) still reach it (slave propagation).
func (j *fakeJournald) wrap(t *testing.T) []string {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare is not installed")
	}
	// A host without systemd has no such folder: make it, and remove it
	// again (a mount point, empty on the host).
	const mountPoint = "/run/systemd/journal"
	if _, err := os.Stat(mountPoint); os.IsNotExist(err) {
		if err := os.MkdirAll(mountPoint, 0o755); err != nil {
			t.Skipf("no mount point for a fake journal: %v", err)
		}
		t.Cleanup(func() { os.Remove(mountPoint) })
	}
	return []string{"unshare", "-m", "--propagation", "slave", "sh", "-c",
		`mount --bind "$0" ` + mountPoint + ` && exec "$@"`, j.dir}
}

func countContaining(lines []string, sub string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}

// Under systemd HAProxy's output reaches the journal under haproxy-<lb>
// with the priority of its level; an agent killed and started again
// adopts HAProxy and resumes at the end of its output file: the reload it
// runs is forwarded, nothing is sent twice.
func TestHAProxyOutputInTheJournal(t *testing.T) {
	f := newLBFixture(t)
	j := newFakeJournald(t)
	f.env.Wrap = j.wrap(t)
	f.startServing()
	id := "haproxy-" + testLB
	testenv.WaitFor(t, 10*time.Second, "HAProxy's first worker in the journal", func() bool {
		return countContaining(j.messages(id), "New worker") == 1
	})
	// [NOTICE] lines at priority 5 (notice).
	if n := countContaining(j.messages(id), "5 [NOTICE]"); n == 0 {
		t.Fatalf("no [NOTICE] line at priority notice: %q", j.messages(id))
	}

	f.env.Signal(syscall.SIGKILL)
	<-f.env.Exited()
	f.env.Start()
	testenv.WaitFor(t, 10*time.Second, "the new agent adopting HAProxy", func() bool {
		return f.env.Count("adopted running HAProxy") >= 1
	})
	if status, body := f.upload(f.config(2)); status != 202 {
		t.Fatalf("upload: %d %s", status, body)
	}
	if status, body := f.action("reload"); status != 202 {
		t.Fatalf("reload: %d %s", status, body)
	}
	testenv.WaitFor(t, 10*time.Second, "the reload's worker in the journal", func() bool {
		return countContaining(j.messages(id), "New worker") >= 2
	})
	if n := countContaining(j.messages(id), "New worker"); n != 2 {
		t.Fatalf("%d 'New worker' lines, want 2 (a start and a reload):\n%s", n, strings.Join(j.messages(id), "\n"))
	}
	t.Logf("the journal under %s:\n%s", id, strings.Join(j.messages(id), "\n"))
}
