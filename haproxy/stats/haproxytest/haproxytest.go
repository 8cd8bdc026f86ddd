// Package haproxytest runs a real HAProxy in master-worker mode for tests:
// started in the foreground in its own process group, reloaded with SIGUSR2
// like the agent's supervisor does, watched through its master CLI, and
// killed in t.Cleanup. It needs no root unless the caller runs it inside a
// network namespace (Options.Prefix). FakeSocket stands in for a stats
// socket where a test needs no real HAProxy.
package haproxytest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
	"github.com/amphora-agent/amphora-agent/haproxy/stats"
)

// Binary returns the haproxy executable, skipping the test when there is
// none.
func Binary(t testing.TB) string {
	t.Helper()
	for _, p := range []string{"/usr/sbin/haproxy", "/usr/local/sbin/haproxy"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy is not installed (make deps installs it)")
	}
	return p
}

// ShortDir is a temporary folder with a short path: UNIX socket paths are
// limited to 107 bytes and t.TempDir() paths carry the test name.
func ShortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "hpx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Options describe one HAProxy.
type Options struct {
	Config     string // haproxy.cfg content
	ConfigPath string // where to write it; default <Dir>/haproxy.cfg
	PidFile    string // -p; default <Dir>/haproxy.pid
	Dir        string // default ShortDir(t)
	// StatsSocket, when set, must answer `show info` before Start returns.
	StatsSocket string
	// Prefix runs HAProxy under another command that execs it, such as
	// `ip netns exec <ns>`.
	Prefix []string
}

// Process is a running HAProxy master.
type Process struct {
	t          testing.TB
	cmd        *exec.Cmd
	done       chan struct{}
	out        *testkit.SyncBuffer
	reloading  atomic.Int32 // reloads under way (State)
	Master     string       // master CLI socket (-S)
	PidFile    string
	ConfigPath string
}

// Start runs HAProxy with `-W -db` (master-worker, foreground) and waits
// until its first worker runs (and StatsSocket answers, when set).
func Start(t testing.TB, o Options) *Process {
	t.Helper()
	bin := Binary(t)
	if o.Dir == "" {
		o.Dir = ShortDir(t)
	}
	if o.ConfigPath == "" {
		o.ConfigPath = filepath.Join(o.Dir, "haproxy.cfg")
	}
	if o.PidFile == "" {
		o.PidFile = filepath.Join(o.Dir, "haproxy.pid")
	}
	if err := os.WriteFile(o.ConfigPath, []byte(o.Config), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &Process{t: t, done: make(chan struct{}), out: &testkit.SyncBuffer{},
		Master: filepath.Join(o.Dir, "master.sock"), PidFile: o.PidFile, ConfigPath: o.ConfigPath}
	args := append(append([]string{}, o.Prefix...), bin, "-W", "-db",
		"-S", p.Master+",mode,600", "-f", o.ConfigPath, "-p", o.PidFile)
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(p.Stop)
	p.waitFor(15*time.Second, "the first worker", func() bool {
		proc, err := p.ShowProc()
		return err == nil && len(proc.Workers) > 0
	})
	if o.StatsSocket != "" {
		p.waitFor(15*time.Second, "the stats socket", func() bool {
			_, err := ShowInfo(context.Background(), o.StatsSocket)
			return err == nil
		})
	}
	return p
}

func (p *Process) waitFor(timeout time.Duration, what string, cond func() bool) {
	p.t.Helper()
	if err := p.wait(timeout, what, cond); err != nil {
		p.t.Fatal(err)
	}
}

func (p *Process) wait(timeout time.Duration, what string, cond func() bool) error {
	exited := false
	met := testkit.Until(timeout, func() bool {
		if cond() {
			return true
		}
		select {
		case <-p.done:
			exited = true
		default:
		}
		return exited
	})
	switch {
	case exited:
		return fmt.Errorf("haproxy exited while waiting for %s: %v\n%s", what, p.cmd.ProcessState, p.out.String())
	case !met:
		return fmt.Errorf("haproxy: timed out after %v waiting for %s\n%s", timeout, what, p.out.String())
	}
	return nil
}

// Pid is the master's pid.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Output is what HAProxy printed so far.
func (p *Process) Output() string { return p.out.String() }

// ShowProc asks the master CLI for its process list.
func (p *Process) ShowProc() (stats.Proc, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return stats.ShowProc(ctx, p.Master)
}

// Reload sends SIGUSR2 to the master and waits until the master has
// re-executed (its reload count went up) and runs a new worker. It returns
// the new reload count.
func (p *Process) Reload() int {
	p.t.Helper()
	n, err := p.TryReload()
	if err != nil {
		p.t.Fatal(err)
	}
	return n
}

// TryReload is Reload for goroutines other than the test's: it returns
// the error instead of failing the test.
func (p *Process) TryReload() (int, error) {
	p.reloading.Add(1)
	defer p.reloading.Add(-1)
	// Asked as the supervisor asks (stats.ShowProcAgain): a master starved
	// of CPU (the unit tier beside busy loops) can take seconds to
	// answer, and one re-executing may never answer a connection its old
	// image accepted.
	deadline := time.Now().Add(reloadLimit)
	ask := func() (stats.Proc, error) {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		return stats.ShowProcAgain(ctx, p.Master)
	}
	before, err := ask()
	if err != nil {
		return 0, fmt.Errorf("show proc before reload: %w", err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		return 0, err
	}
	sent := time.Now()
	var now stats.Proc
	var asked error
	err = p.wait(time.Until(deadline), "the reload", func() bool {
		var err error
		now, err = ask()
		asked = err
		if err == nil && now.Reloads == before.Reloads && time.Since(sent) > 2*time.Second {
			// The master answers between reloads only: it did not take
			// the signal (the agent's supervisor signals it again too).
			p.t.Logf("haproxy master %d did not take SIGUSR2 in %v; sending it again", p.Pid(), time.Since(sent).Round(time.Millisecond))
			p.cmd.Process.Signal(syscall.SIGUSR2)
			sent = time.Now()
		}
		return err == nil && now.Reloads > before.Reloads && len(now.Workers) > 0
	})
	if err != nil {
		// What the master and its workers were doing: a master that never
		// answered is another story than one that lost the signal.
		// A master CLI that no longer answers: whether it listens, how
		// many connections wait in its queue, and whether it comes back.
		later, laterErr := p.ShowProc() // a fresh 2 s
		err = fmt.Errorf("%w\nreloads before %d; last show proc: %+v, %v; master %d state %q; workers before %v\nmaster socket: %s\nshow proc once more: %+v, %v",
			err, before.Reloads, now, asked, p.Pid(), procState(p.Pid()), states(before.Workers),
			socketState(p.Master), later, laterErr)
	}
	return now.Reloads, err
}

// socketState is what ss says of the unix sockets bound to path: a
// listener's Recv-Q is the connections waiting to be accepted.
func socketState(path string) string {
	out, err := exec.Command("ss", "-xapn").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("ss: %v", err)
	}
	var b strings.Builder
	for line := range strings.Lines(string(out)) {
		if strings.Contains(line, path) {
			b.WriteString(strings.Join(strings.Fields(line), " "))
			b.WriteString("; ")
		}
	}
	if b.Len() == 0 {
		return "no socket bound to " + path
	}
	return b.String()
}

// reloadLimit bounds one TryReload: as long as systemd gives a reload of
// upstream's unit, far beyond what an idle machine needs (milliseconds).
const reloadLimit = 90 * time.Second

// states is each pid with its state letter from /proc (0 once gone).
func states(pids []int) string {
	var b strings.Builder
	for _, pid := range pids {
		fmt.Fprintf(&b, "%d:%q ", pid, procState(pid))
	}
	return b.String()
}

// StallWorker stops the current worker (SIGSTOP) until the test ends, as
// a worker starved of CPU or still starting looks to its master: it
// neither accepts nor answers, not even the master's request for its
// listening sockets at a reload. It returns the worker's pid.
func (p *Process) StallWorker() int {
	p.t.Helper()
	proc, err := p.ShowProc()
	if err != nil || len(proc.Workers) != 1 {
		p.t.Fatalf("show proc: %+v, %v", proc, err)
	}
	pid := proc.Workers[0]
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		p.t.Fatal(err)
	}
	// Registered after Start's, so it runs before Stop.
	p.t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	// The signal takes effect when the worker is next scheduled: until
	// then it may still accept a connection the test means to queue.
	p.waitFor(10*time.Second, "the worker stopped", func() bool { return procState(pid) == 'T' })
	return pid
}

// Stop ends HAProxy and its workers: SIGTERM to the process group, SIGKILL
// after 5 s.
func (p *Process) Stop() {
	if p.cmd.Process == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	pgid := p.cmd.Process.Pid
	syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	// Workers left behind by a killed master.
	syscall.Kill(-pgid, syscall.SIGKILL)
}

// Exited is closed when the master has exited.
func (p *Process) Exited() <-chan struct{} { return p.done }

// State answers as the agent's supervisor does (haproxy.Supervisor.State):
// the master is alive, and a reload is under way.
func (p *Process) State() (running, busy bool) {
	select {
	case <-p.done:
		return false, false
	default:
		return true, p.reloading.Load() > 0
	}
}

// Preamble is how a test config starts: maxconn and a user-level stats
// socket at sock, then HTTP defaults with timeouts short enough for a test.
func Preamble(maxconn int, sock string) string {
	return fmt.Sprintf("global\n    maxconn %d\n    stats socket %s mode 0666 level user\n"+
		"defaults\n    mode http\n    timeout connect 1s\n    timeout client 5s\n    timeout server 5s\n", maxconn, sock)
}

// FreePort returns a loopback TCP port that was free a moment ago, for
// a frontend, a member or the agent itself.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Masters counts the HAProxy masters running with master CLI socket sock,
// whoever started them. Workers are forks with the same command line: a
// master is one whose parent is not one of them.
func Masters(sock string) int {
	entries, _ := os.ReadDir("/proc")
	parents := map[int]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !slices.ContainsFunc(strings.Split(string(cmdline), "\x00"), func(a string) bool {
			return a == sock || strings.HasPrefix(a, sock+",")
		}) {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) > 1 {
			parents[pid], _ = strconv.Atoi(fields[1])
		}
	}
	n := 0
	for _, ppid := range parents {
		if _, forked := parents[ppid]; !forked {
			n++
		}
	}
	return n
}

// procState is the state letter of /proc/<pid>/stat (0 when unreadable).
func procState(pid int) byte {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name in parentheses may hold spaces; the state follows
	// its closing one.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 || i+2 >= len(data) {
		return 0
	}
	return data[i+2]
}
