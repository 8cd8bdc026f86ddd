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
	"strings"
	"syscall"

	"github.com/amphora-agent/amphora-agent/agent/procgroup"
	"github.com/amphora-agent/amphora-agent/agent/procwatch"
)

// CheckSandbox runs `haproxy -c` as an unprivileged user, so an uploaded
// config and its lua-load scripts are parsed without root. The check runs
// in a mount namespace of its own that shows it copies of this load
// balancer's certificates (the originals stay 0600 root, other load
// balancers' are not visible) and, where a folder on the way is closed to
// its user, only the way through it (procgroup.ViewFor); no mode on disk
// changes.
type CheckSandbox struct {
	Cred    *syscall.Credential
	CertDir string // base_cert_dir
	// StateDir is base_path: what the config names beneath it is the
	// agent's own, and reachable to the check whatever the modes of the
	// folders above. Elsewhere, the operator's modes stand.
	StateDir string
}

// errSandbox marks a failure to prepare the sandbox, which says nothing
// about the config.
var errSandbox = errors.New("preparing the unprivileged haproxy -c")

// NewCheckSandbox returns the sandbox for an agent running as root, or
// nil when it does not (then `haproxy -c` runs as the agent's own user
// anyway) or when no unprivileged user exists (and says why).
func NewCheckSandbox(certDir, stateDir string) (*CheckSandbox, error) {
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
	return &CheckSandbox{Cred: cred, CertDir: certDir, StateDir: stateDir}, nil
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

// run runs haproxy with args for lb, whose staged config is at staged;
// userGroup is the user/group file args load besides it.
func (c *CheckSandbox) run(ctx context.Context, lb, staged, userGroup, name string, args ...string) ([]byte, error) {
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
	cfg, err := c.copyFor(staged, cfgCopy)
	if err != nil {
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
	asIs := []string{userGroup}
	for _, p := range absPaths(cfg) {
		if p = filepath.Clean(p); within(c.StateDir, p) && p != staged && !within(c.CertDir, p) {
			asIs = append(asIs, p)
		}
	}
	for _, p := range asIs {
		// Sockets are left out: the check opens none.
		if fi, err := os.Stat(p); err == nil && (fi.Mode().IsRegular() || fi.IsDir()) {
			binds = append(binds, procgroup.Bind{Source: p, Target: p})
		}
	}
	return procgroup.CombinedOutput(cmd, procgroup.StartInView(procgroup.ViewFor(c.Cred, binds)))
}

// within tells whether p is dir or lies beneath it.
func within(dir, p string) bool {
	dir = filepath.Clean(dir)
	return p == dir || strings.HasPrefix(p, dir+"/")
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
		if _, err := c.copyFor(filepath.Join(dir, e.Name()), filepath.Join(to, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// copyFor copies a file to a 0600 file owned by the check user and
// returns what it copied. No fsync: the copy lives only as long as the
// check.
func (c *CheckSandbox) copyFor(from, to string) ([]byte, error) {
	data, err := os.ReadFile(from)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Chown(int(c.Cred.Uid), int(c.Cred.Gid)); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, err
	}
	return data, f.Close()
}
