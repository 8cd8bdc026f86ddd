//go:build openstack

// The real-OpenStack tier: Keystone, Glance, Placement, Nova (libvirt,
// QEMU TCG), Neutron (ML2, Open vSwitch) and Octavia 16 from Debian
// trixie, brought up once per run in namespaces of their own by
// internal/openstack/cloud.sh, with the amphora image under test in
// Glance. Opt-in:
//
//	make test-openstack   (AMPHORA_OPENSTACK_ROOT and AMPHORA_IMAGE set by the Makefile)
package openstack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

var (
	cloudOnce sync.Once
	theCloud  *Cloud
	cloudErr  error
)

// Cloud is a running cloud.sh cloud.
type Cloud struct {
	Dir    string
	script string
	run    *exec.Cmd

	guardMu   sync.Mutex
	guardRead int // bytes of tap-guard.log already reported
}

// cloud returns the run's OpenStack, brought up by the first test that
// asks (TestMemberImage needs none) and stopped when the tests are done.
func cloud(t *testing.T) *Cloud {
	t.Helper()
	root, image := os.Getenv("AMPHORA_OPENSTACK_ROOT"), os.Getenv("AMPHORA_IMAGE")
	if root == "" || image == "" {
		t.Skip("AMPHORA_OPENSTACK_ROOT and AMPHORA_IMAGE are unset: make test-openstack sets them")
	}
	first := false
	cloudOnce.Do(func() {
		theCloud, cloudErr = startCloud(root, image)
		first = true
	})
	if cloudErr != nil {
		t.Fatal(cloudErr)
	}
	if first {
		logMemory(t, theCloud, "of the cloud just up")
	}
	t.Cleanup(func() { theCloud.reportTapGuard(t) })
	return theCloud
}

// reportTapGuard logs what boot.sh's tap guard did since the last report:
// each guest tap it found down and brought up (Open vSwitch's userspace
// datapath racing libvirt on the tap's flags). The guard keeps a test from
// failing on the tier's own fault; its entries keep that visible.
func (c *Cloud) reportTapGuard(t *testing.T) {
	c.guardMu.Lock()
	defer c.guardMu.Unlock()
	b, err := os.ReadFile(filepath.Join(c.Dir, "upper", "var", "log", "aa", "tap-guard.log"))
	if err != nil || len(b) <= c.guardRead {
		return
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b[c.guardRead:])), "\n") {
		t.Logf("tap guard: %s", line)
	}
	c.guardRead = len(b)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if theCloud != nil {
		if code != 0 || cloudErr != nil {
			theCloud.dumpErrors()
			theCloud.keepLogs()
		}
		theCloud.Stop()
	}
	os.Exit(code)
}

func scriptPath() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "internal", "openstack", "cloud.sh")
}

// startCloud runs cloud.sh in the foreground as a child that the kernel
// kills with this process (Pdeathsig), so a test binary killed by its
// timeout takes the cloud with it; then waits for boot.sh's verdict.
func startCloud(root, image string) (*Cloud, error) {
	dir, err := os.MkdirTemp("/var/tmp", "aa-openstack-")
	if err != nil {
		return nil, err
	}
	c := &Cloud{Dir: dir, script: scriptPath()}
	c.run = exec.Command(c.script, "run", dir, root)
	c.run.Env = os.Environ()
	c.run.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	// Pdeathsig follows the thread that forked, not the process: keep
	// this goroutine on its thread while starting.
	runtime.LockOSThread()
	err = c.run.Start()
	runtime.UnlockOSThread()
	if err != nil {
		return c, err
	}
	exited := make(chan error, 1)
	go func() { exited <- c.run.Wait() }()
	start := time.Now()
	limit := 25 * time.Minute
	for {
		if _, err := os.Stat(filepath.Join(dir, "upper", "aa", "ready")); err == nil {
			fmt.Printf("openstack tier: cloud up in %v (%s)\n", time.Since(start).Round(time.Second), dir)
			return c, nil
		}
		select {
		case err := <-exited:
			return c, fmt.Errorf("openstack tier: the cloud ended before it was ready (%v):\n%s", err, c.tail("inside.log", 60))
		case <-time.After(time.Second):
		}
		if time.Since(start) > limit {
			return c, fmt.Errorf("openstack tier: cloud not ready within %v:\n%s", limit, c.tail("inside.log", 60))
		}
	}
}

// Stop ends every process of the cloud and removes its folder, unless
// AMPHORA_OPENSTACK_KEEP=1 (then only the processes end).
func (c *Cloud) Stop() {
	if os.Getenv("AMPHORA_OPENSTACK_KEEP") == "1" {
		if c.run.Process != nil {
			c.run.Process.Kill()
		}
		fmt.Printf("openstack tier: kept %s\n", c.Dir)
		return
	}
	if out, err := exec.Command(c.script, "down", c.Dir).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "openstack tier: cloud.sh down: %v: %s\n", err, out)
	}
}

func (c *Cloud) tail(name string, lines int) string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, name))
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// keepLogs copies every service's log of a failed run out of the folder
// Stop removes, to /var/tmp/aa-openstack-logs-<time>: an error some
// service turned into another's answer (Octavia's API answers a database
// error during a create with 400 "not a valid option") is only there.
func (c *Cloud) keepLogs() {
	dst := filepath.Join("/var/tmp", "aa-openstack-logs-"+time.Now().Format("20060102-150405"))
	src := filepath.Join(c.Dir, "upper", "var", "log")
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "openstack tier: keeping the logs: %v: %s\n", err, out)
		return
	}
	fmt.Fprintf(os.Stderr, "openstack tier: the services' logs are in %s\n", dst)
}

// dumpErrors prints each service's ERROR lines (the first few) from the
// cloud's logs, while the folder still exists.
func (c *Cloud) dumpErrors() {
	logs, _ := filepath.Glob(filepath.Join(c.Dir, "upper", "var", "log", "aa", "*.log"))
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		var errs []string
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, " ERROR ") && len(errs) < 8 {
				errs = append(errs, line)
			}
		}
		if len(errs) > 0 {
			fmt.Fprintf(os.Stderr, "--- %s\n%s\n", filepath.Base(l), strings.Join(errs, "\n"))
		}
	}
}

// Exec runs a command inside the cloud (its root file system, network
// and processes) and returns its standard output.
func (c *Cloud) Exec(ctx context.Context, env []string, args ...string) (string, error) {
	full := append([]string{"exec", c.Dir, "env"}, env...)
	cmd := exec.CommandContext(ctx, c.script, append(full, args...)...)
	// Killing nsenter does not end what it started in the namespace; if
	// that holds the output open, give up on it after a while.
	cmd.WaitDelay = 30 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// OS runs the openstack CLI as the named clouds.yaml entry ("admin" or
// "demo") and decodes its JSON answer into v, if v is not nil.
func (c *Cloud) OS(t *testing.T, as string, v any, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if v != nil {
		args = append(args, "-f", "json")
	}
	out, err := c.Exec(ctx, []string{"OS_CLOUD=" + as}, append([]string{"openstack"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	if v != nil {
		if err := json.Unmarshal([]byte(out), v); err != nil {
			t.Fatalf("openstack %s: %v: %q", strings.Join(args, " "), err, out)
		}
	}
}

// Until polls cond every interval (testkit's deadline loop, paced for
// CLI calls that cost a second each) until it returns true, failing the
// test at the deadline with cond's last description; returns how long it
// took.
func Until(t *testing.T, what string, limit, interval time.Duration, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	last, asked := "", false
	held := testkit.Until(limit, func() bool {
		if asked {
			time.Sleep(interval)
		}
		asked = true
		ok, desc := cond()
		last = desc
		return ok
	})
	if !held {
		t.Fatalf("%s: not within %v (last: %s)", what, limit, last)
	}
	return time.Since(start)
}

// saveAmphorae keeps what every live amphora sees (its agent's journal,
// the namespace's addresses, routes, IPVS and nftables) among the logs a
// failed run keeps, while the amphorae still exist.
func (c *Cloud) saveAmphorae(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := c.Exec(ctx, nil, "bash", "/aa/amphora-logs.sh"); err != nil {
		t.Logf("saving the amphorae's view: %v", err)
		return
	}
	t.Logf("the amphorae's view is in /var/log/aa/amphorae of the cloud's logs")
}

// deleteOnFailure removes the named load balancer (cascade, not awaited)
// if the test fails, so that its amphorae do not load the tests after it;
// their view is saved first.
func deleteOnFailure(t *testing.T, c *Cloud, user, name string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		c.saveAmphorae(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := c.Exec(ctx, []string{"OS_CLOUD=" + user}, "openstack", "loadbalancer", "delete", "--cascade", name); err != nil {
			t.Logf("deleting %s after the failure: %v", name, err)
		}
	})
}
