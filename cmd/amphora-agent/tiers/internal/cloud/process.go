package cloud

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Service is one process of the control plane (with the children it
// forks, all in its process group) running in the controller's namespace.
type Service struct {
	Name string
	// Log is the file the service writes its log to (its own log file
	// where it has one, else its standard output and error).
	Log string
	// Output is its standard output and error.
	Output string
	// Started is when it was started; Up how long it took to be ready.
	Started time.Time
	Up      time.Duration
	// LogFrom is the size Log had when this process started: what it
	// wrote is after it.
	LogFrom int64

	// argv is the command line the service was first started with;
	// override the arguments a Restart added to it.
	argv, override, env []string
	ready               func(*Service) error
	readyLimit          time.Duration
	cmd                 *exec.Cmd
	done                chan struct{}
}

// startService runs argv in the controller's namespace with env added,
// its output in logs/<name>.out, in a process group of its own so that
// Stop reaches the children it forks, and adds it to c.Services, which
// teardown stops.
func (c *ControlPlane) startService(name, log string, env []string, argv ...string) *Service {
	c.t.Helper()
	s := &Service{Name: name, Log: log, Output: filepath.Join(c.Dir, "logs", name+".out"), argv: argv, env: env}
	if s.Log == "" {
		s.Log = s.Output
	}
	c.spawn(s)
	c.Services = append(c.Services, s)
	return s
}

// spawn starts the service's process. Its output is appended to Output,
// so a restart keeps what the process before it wrote.
func (c *ControlPlane) spawn(s *Service) {
	t := c.t
	t.Helper()
	out, err := os.OpenFile(s.Output, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if st, err := os.Stat(s.Log); err == nil {
		s.LogFrom = st.Size()
	}
	argv := append(slices.Clip(s.argv), s.override...)
	s.cmd = c.NS.Command(context.Background(), argv[0], argv[1:]...)
	s.cmd.Stdout, s.cmd.Stderr = out, out
	s.cmd.Env = append(os.Environ(), s.env...)
	s.cmd.Dir = c.Dir
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	s.Started = time.Now()
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", s.Name, err)
	}
	s.done = make(chan struct{})
	go func() { s.cmd.Wait(); close(s.done) }()
}

// Restart stops the Octavia service called name and starts it again as
// it was first started, reading override (oslo.config text) after
// octavia.conf when it is not empty, so that its values win for this
// process only: a later Restart with "" puts the plain config back. It
// returns once the service passes the readiness check it was started
// with; the service keeps its place in Services and appends to its log.
func (c *ControlPlane) Restart(name, override string) *Service {
	c.t.Helper()
	i := slices.IndexFunc(c.Services, func(s *Service) bool { return s.Name == name })
	if i < 0 {
		c.t.Fatalf("no service %s to restart", name)
	}
	old := c.Services[i]
	old.Stop(20 * time.Second)
	s := &Service{Name: old.Name, Log: old.Log, Output: old.Output, argv: old.argv, env: old.env}
	if override != "" {
		file := c.path(name + "-override.conf")
		if err := os.WriteFile(file, []byte(override), 0o600); err != nil {
			c.t.Fatal(err)
		}
		s.override = []string{"--config-file", file}
	}
	c.spawn(s)
	c.Services[i] = s
	if old.ready != nil {
		c.waitReady(s, old.readyLimit, old.ready)
	}
	return s
}

// Upgrade replaces Octavia's services with the release in root (an
// Octavia root, "" for the host's), as an operator upgrades a control
// plane in place: the API, worker, health manager and housekeeping
// stopped, extra (oslo.config text, may be empty) appended to
// octavia.conf, the new release's `octavia-db-manage upgrade head` run on
// the same database, then each service started again from the new release
// with its log continued, waiting for the readiness check it was first
// started with. MariaDB, RabbitMQ and dnsmasq keep running, and so do the
// amphorae.
func (c *ControlPlane) Upgrade(root, extra string) {
	c.t.Helper()
	var olds []int
	for i := len(c.Services) - 1; i >= 0; i-- {
		if s := c.Services[i]; strings.HasPrefix(s.Name, "octavia-") {
			s.Stop(20 * time.Second)
			olds = append([]int{i}, olds...)
		}
	}
	c.octaviaRoot = root
	if extra != "" {
		f, err := os.OpenFile(c.Config, os.O_WRONLY|os.O_APPEND, 0o600)
		if err == nil {
			_, err = f.WriteString("\n" + extra + "\n")
			err = errors.Join(err, f.Close())
		}
		if err != nil {
			c.t.Fatal(err)
		}
	}
	dbManage := c.octavia("octavia-db-manage", "--config-file", c.Config, "upgrade", "head")
	c.run(5*time.Minute, dbManage[0], dbManage[1:]...)
	stopped := make([]*Service, len(olds))
	for k, i := range olds {
		old := c.Services[i]
		stopped[k] = old
		s := &Service{Name: old.Name, Log: old.Log, Output: old.Output, env: old.env,
			argv: c.octavia(old.Name, "--config-file", c.Config, "--log-file", old.Log)}
		c.spawn(s)
		c.Services[i] = s
	}
	for k, i := range olds {
		if old := stopped[k]; old.ready != nil {
			c.waitReady(c.Services[i], old.readyLimit, old.ready)
		}
	}
}

// Running reports whether the service's main process still runs.
func (s *Service) Running() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM to the service's process group, waits up to grace
// for the main process, then SIGKILLs the group. Processes that left the
// group (daemons) die with the namespace (topo kills what is left there).
func (s *Service) Stop(grace time.Duration) {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	pgid := s.cmd.Process.Pid
	syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(grace):
	}
	// Children that outlive their parent's clean exit still hold ports.
	syscall.Kill(-pgid, syscall.SIGKILL)
	<-s.done
}

// PSS is the proportional set size of the service's process group in
// KiB (the sum over its processes of /proc/PID/smaps_rollup's Pss), and
// how many processes it has.
func (s *Service) PSS() (kib int, procs int) {
	if !s.Running() {
		return 0, 0
	}
	pgid := s.cmd.Process.Pid
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || processGroup(pid) != pgid {
			continue
		}
		procs++
		kib += ProcessPSS(pid)
	}
	return kib, procs
}

// processGroup reads field 5 of /proc/PID/stat (-1 if the process is gone).
func processGroup(pid int) int {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return -1
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 3 {
		return -1
	}
	pgrp, err := strconv.Atoi(fields[2])
	if err != nil {
		return -1
	}
	return pgrp
}

// ProcessPSS is one process's proportional set size in KiB, from
// /proc/PID/smaps_rollup (0 if it is gone or has none).
func ProcessPSS(pid int) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Pss:"); ok {
			v, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			return v
		}
	}
	return 0
}

// logDigest is what a failed test prints of a log: its ERROR and
// Traceback lines (at most 40), then its last n lines.
func logDigest(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var b strings.Builder
	errs := 0
	for _, l := range lines {
		// oslo.config's dump of its options names ERROR in one value.
		important := (strings.Contains(l, " ERROR ") || strings.HasPrefix(l, "Traceback")) && !strings.Contains(l, "logging_exception_prefix")
		if important && errs < 40 {
			b.WriteString("  ! " + l + "\n")
			errs++
		}
	}
	if len(lines) > n {
		fmt.Fprintf(&b, "  ... (%d lines before)\n", len(lines)-n)
		lines = lines[len(lines)-n:]
	}
	for _, l := range lines {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}
