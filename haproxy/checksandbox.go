package haproxy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/amphora-agent/amphora-agent/agent/procgroup"
	"github.com/amphora-agent/amphora-agent/agent/procwatch"
)

// CheckSandbox runs `haproxy -c` as an unprivileged user: the uploaded
// config, and any lua-load script it names, is parsed without root. The
// certificates stay 0600 root: the check sees copies owned by its user, in
// a mount namespace of its own where a folder holding only this load
// balancer's copies (and a copy of the config) is mounted over
// base_cert_dir, and the config copy over the staged config. Other load
// balancers' certificates are not visible to it at all.
type CheckSandbox struct {
	Cred    *syscall.Credential
	CertDir string // base_cert_dir
}

// errSandbox marks a failure to prepare the sandbox, which says nothing
// about the config.
var errSandbox = errors.New("preparing the unprivileged haproxy -c")

// NewCheckSandbox returns the sandbox for an agent running as root, or
// nil when it does not (then `haproxy -c` runs as the agent's own user
// anyway) or when no unprivileged user exists (and says why).
func NewCheckSandbox(certDir string) (*CheckSandbox, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	cred, err := CheckUser()
	if err != nil {
		return nil, err
	}
	// Copies left by an agent killed during a check hold keys.
	stale, _ := filepath.Glob(filepath.Join(certDir, checkPrefix+"*"))
	for _, d := range stale {
		os.RemoveAll(d)
	}
	return &CheckSandbox{Cred: cred, CertDir: certDir}, nil
}

// checkPrefix names the check's folders under base_cert_dir; a name
// starting with '.' is never a load balancer id.
const checkPrefix = ".check-"

// CheckUser finds the user `haproxy -c` runs as: the haproxy user and its
// group (Debian's package creates them), else nobody and nogroup.
func CheckUser() (*syscall.Credential, error) {
	if u, err := user.Lookup("haproxy"); err == nil {
		return credential(u.Uid, u.Gid)
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		return nil, fmt.Errorf("neither the haproxy nor the nobody user exists: %w", err)
	}
	gid := u.Gid
	if g, err := user.LookupGroup("nogroup"); err == nil {
		gid = g.Gid
	}
	return credential(u.Uid, gid)
}

func credential(uid, gid string) (*syscall.Credential, error) {
	u, err := strconv.ParseUint(uid, 10, 32)
	if err != nil {
		return nil, err
	}
	g, err := strconv.ParseUint(gid, 10, 32)
	if err != nil {
		return nil, err
	}
	if u == 0 || g == 0 {
		return nil, fmt.Errorf("the check user %s:%s is root", uid, gid)
	}
	return &syscall.Credential{Uid: uint32(u), Gid: uint32(g)}, nil
}

// run runs haproxy with args for lb, whose staged config is at staged.
func (c *CheckSandbox) run(ctx context.Context, lb, staged, name string, args ...string) ([]byte, error) {
	if err := os.MkdirAll(c.CertDir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %w", errSandbox, err)
	}
	// Inside base_cert_dir: on an amphora that is a RAM file system, so
	// the copies of the keys never reach a disk.
	work, err := os.MkdirTemp(c.CertDir, checkPrefix)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errSandbox, err)
	}
	defer os.RemoveAll(work)
	cfgCopy := filepath.Join(work, "haproxy.cfg")
	if err := c.copyFor(staged, cfgCopy); err != nil {
		return nil, fmt.Errorf("%w: %w", errSandbox, err)
	}
	if err := c.copyCerts(filepath.Join(c.CertDir, lb), filepath.Join(work, lb)); err != nil {
		return nil, fmt.Errorf("%w: %w", errSandbox, err)
	}
	if err := os.Chown(work, int(c.Cred.Uid), int(c.Cred.Gid)); err != nil {
		return nil, fmt.Errorf("%w: %w", errSandbox, err)
	}
	cmd := procgroup.Command(ctx, name, args...)
	cmd.Env = procwatch.CleanEnv()
	procgroup.As(cmd, c.Cred)
	binds := []procgroup.Bind{{Source: cfgCopy, Target: staged}, {Source: work, Target: c.CertDir}}
	return procgroup.CombinedOutput(cmd, procgroup.StartInView(procgroup.View{Binds: binds}))
}

// copyCerts copies the regular files of dir (the load balancer's
// certificates and crt-lists) into to, owned by the check user, 0600. A
// load balancer without certificates has no folder.
func (c *CheckSandbox) copyCerts(dir, to string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := os.Mkdir(to, 0o700); err != nil {
		return err
	}
	if err := os.Chown(to, int(c.Cred.Uid), int(c.Cred.Gid)); err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if err := c.copyFor(filepath.Join(dir, e.Name()), filepath.Join(to, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// copyFor copies a file to a 0600 file owned by the check user. No fsync:
// the copy lives only as long as the check.
func (c *CheckSandbox) copyFor(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := f.Chown(int(c.Cred.Uid), int(c.Cred.Gid)); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
