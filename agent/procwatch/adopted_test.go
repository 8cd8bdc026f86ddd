package procwatch

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// threads is this process's OS thread count.
func threads(t *testing.T) int {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatal("no Threads line")
	return 0
}

// blockedWatches counts the goroutines of WatchAdopted that wait (in the
// poller, a system call, a channel or a sleep) rather than run.
func blockedWatches() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		header, _, _ := bytes.Cut(g, []byte("\n"))
		running := bytes.Contains(header, []byte("[running]")) || bytes.Contains(header, []byte("[runnable]"))
		if !running && bytes.Contains(g, []byte("procwatch.WatchAdopted.func1(")) {
			n++
		}
	}
	return n
}

// TestWatchAdoptedParksNoThread: watching 40 adopted processes holds no
// OS thread each (a poll(2) per process did, and woke twice a second);
// an exit is still seen at once, and closing done ends every watch.
func TestWatchAdoptedParksNoThread(t *testing.T) {
	const n = 40
	var cmds []*exec.Cmd
	t.Cleanup(func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
	})
	for range n {
		c := exec.Command("sleep", "60")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	before := threads(t)
	done := make(chan struct{})
	var watched []*Process
	for _, c := range cmds {
		watched = append(watched, WatchAdopted(c.Process.Pid, done))
	}
	// Threads are counted only once every watch waits: a watch that held a
	// thread would hold it by then.
	testkit.WaitFor(t, 10*time.Second, "every watch to wait", func() bool { return blockedWatches() >= n })
	if grew := threads(t) - before; grew > n/4 {
		t.Errorf("watching %d adopted processes added %d OS threads", n, grew)
	}
	cmds[0].Process.Signal(syscall.SIGKILL)
	select {
	case <-watched[0].Exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the exit of an adopted process was not seen")
	}
	for _, p := range watched[1:] {
		select {
		case <-p.Exited:
			t.Fatalf("pid %d reported exited while it runs: %s", p.Pid, p.Status)
		default:
		}
	}
	close(done)
	for _, p := range watched[1:] {
		select {
		case <-p.Exited:
			if p.Status != "no longer watched" {
				t.Errorf("pid %d: status %q after done", p.Pid, p.Status)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the watch of pid %d did not end with done", p.Pid)
		}
	}
}
