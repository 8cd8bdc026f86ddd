//go:build system

package system_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
)

// sdMessage is one datagram on the notify socket, with its sender's pid
// as the kernel vouches for it (what systemd's NotifyAccess=main checks).
type sdMessage struct {
	pid  int
	text string
	// atReady is what the test's probe said when a READY=1 arrived.
	atReady error
}

// notifySocket plays systemd's side: a unixgram socket whose datagrams a
// goroutine reads at once (the kernel queues only a few, and a full
// queue would block the agent).
type notifySocket struct {
	t    *testing.T
	path string
	msgs chan sdMessage
}

// listenNotify opens the socket; probe runs the moment READY=1 arrives.
func listenNotify(t *testing.T, dir string, probe func() error) *notifySocket {
	t.Helper()
	s := &notifySocket{t: t, path: filepath.Join(dir, "notify"), msgs: make(chan sdMessage, 1024)}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: s.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	raw, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	raw.Control(func(fd uintptr) {
		err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		buf, oob := make([]byte, 4096), make([]byte, 256)
		for {
			n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
			if err != nil {
				return
			}
			m := sdMessage{pid: -1, text: string(buf[:n])}
			if cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(cmsgs) > 0 {
				if cred, err := unix.ParseUnixCredentials(&cmsgs[0]); err == nil {
					m.pid = int(cred.Pid)
				}
			}
			if strings.Contains(m.text, "READY=1") && probe != nil {
				m.atReady = probe()
			}
			s.msgs <- m
		}
	}()
	return s
}

// next waits up to timeout for a message; ok is false when none came.
func (s *notifySocket) next(timeout time.Duration) (sdMessage, bool) {
	select {
	case m := <-s.msgs:
		return m, true
	case <-time.After(timeout):
		return sdMessage{}, false
	}
}

// until collects messages until one contains want, or fails at timeout.
func (s *notifySocket) until(want string, timeout time.Duration) []sdMessage {
	s.t.Helper()
	var got []sdMessage
	deadline := time.Now().Add(timeout)
	for {
		m, ok := s.next(time.Until(deadline))
		if !ok {
			s.t.Fatalf("no %q within %v; got %q", want, timeout, texts(got))
		}
		got = append(got, m)
		if strings.Contains(m.text, want) {
			return got
		}
	}
}

func texts(ms []sdMessage) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.text)
	}
	return out
}

// allStopped reports whether every thread of pid is in group stop.
func allStopped(pid int) bool {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(task)
		if err != nil {
			return false
		}
		// The state follows the parenthesised command name.
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
		if f := strings.Fields(rest); len(f) == 0 || f[0] != "T" {
			return false
		}
	}
	return true
}

// terminate sends SIGTERM, runs meanwhile, and waits for the agent to exit.
func terminate(t *testing.T, e *testenv.Env, meanwhile func()) {
	t.Helper()
	if err := e.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	meanwhile()
	select {
	case <-e.Exited():
	case <-time.After(20 * time.Second):
		t.Fatal("agent did not exit after SIGTERM")
	}
}

// Under systemd (Type=notify): the restore's progress in STATUS, READY=1
// only once a stored load balancer serves again and the API answers,
// watchdog pings that stop while the agent is frozen and resume after,
// STOPPING=1 on SIGTERM; every message from the agent's own pid.
func TestSystemdNotify(t *testing.T) {
	f := newLBFixture(t)
	f.startServing()
	// The next agent must start the load balancer itself.
	f.reboot()

	sock := listenNotify(t, f.env.Dir, func() error {
		_, err := f.get(f.lb.HTTPClient(false))
		return err
	})
	const watchdog = time.Second // pings every 500 ms
	f.env.Env = []string{"NOTIFY_SOCKET=" + sock.path, fmt.Sprintf("WATCHDOG_USEC=%d", watchdog.Microseconds())}
	f.env.Start()
	pid := f.env.Pid()
	// Registered after Start's cleanup, so it runs first: a frozen agent
	// could not stop.
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })

	start := sock.until("READY=1", time.Minute)
	var statuses []string
	for _, m := range start {
		if m.pid != pid {
			t.Errorf("message %q from pid %d, not the agent's %d", m.text, m.pid, pid)
		}
		if strings.HasPrefix(m.text, "STATUS=") {
			statuses = append(statuses, m.text)
		}
	}
	want := []string{"STATUS=restoring network namespace", "STATUS=restoring load balancers", "STATUS=restoring UDP and SCTP listeners", "STATUS=restoring keepalived"}
	if strings.Join(statuses, "|") != strings.Join(want, "|") {
		t.Errorf("statuses before READY=1: %q, want %q", statuses, want)
	}
	ready := start[len(start)-1]
	if ready.text != "READY=1\nSTATUS=ready: 1 of 1 load balancers running" {
		t.Errorf("ready message %q", ready.text)
	}
	if ready.atReady != nil {
		t.Errorf("READY=1 came before the load balancer served again: %v", ready.atReady)
	}
	testenv.WaitFor(t, 5*time.Second, "the start-up line in the log", func() bool {
		return f.env.Count("start-up complete", "ready: 1 of 1 load balancers running") == 1
	})

	// Pings while live.
	for range 2 {
		sock.until("WATCHDOG=1", 5*watchdog)
	}

	// Frozen: no pings. What the agent sent before it stopped is queued
	// already; let the reader pass it on, then expect silence for four
	// ping periods.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "every agent thread stopped", func() bool { return allStopped(pid) })
	for {
		if _, ok := sock.next(200 * time.Millisecond); !ok {
			break
		}
	}
	if m, ok := sock.next(2 * watchdog); ok {
		t.Fatalf("%q sent while the agent was stopped", m.text)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	sock.until("WATCHDOG=1", 5*watchdog)

	// SIGTERM: STOPPING=1, then nothing more.
	terminate(t, f.env, func() { sock.until("STOPPING=1", 10*time.Second) })
	if m, ok := sock.next(200 * time.Millisecond); ok {
		t.Errorf("%q sent after STOPPING=1", m.text)
	}
	// HAProxy keeps serving without the agent.
	if _, err := f.get(f.lb.HTTPClient(false)); err != nil {
		t.Errorf("load balancer after the agent stopped: %v", err)
	}
}

// Without NOTIFY_SOCKET the agent starts, serves and stops as before, and
// the notify calls stay silent (no warnings), watchdog setting or not.
func TestNoNotifySocket(t *testing.T) {
	e := testenv.New(t)
	e.Env = []string{"WATCHDOG_USEC=200000"}
	e.Start()
	testenv.WaitFor(t, 30*time.Second, "start-up to complete", func() bool {
		return e.Count("start-up complete", "ready: 0 of 0 load balancers running") == 1
	})
	if status, _, body := e.Do("GET", "/1.0/info", nil); status != 200 {
		t.Fatalf("GET /1.0/info: %d %s", status, body)
	}
	terminate(t, e, func() {})
	if n := e.Count("cannot notify systemd") + e.Count("watchdog"); n != 0 {
		t.Fatalf("%d notify or watchdog complaints without NOTIFY_SOCKET:\n%s", n, e.Output())
	}
	if e.Count("agent stopped; HAProxy and keepalived keep running") != 1 {
		t.Fatalf("no clean stop:\n%s", e.Output())
	}
}
