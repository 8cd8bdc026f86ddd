package haproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"regexp"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/amphora-agent/amphora-agent/agent/caller"
	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/fsutil"
	"github.com/amphora-agent/amphora-agent/agent/procgroup"
	"github.com/amphora-agent/amphora-agent/agent/procwatch"
)

// Store keeps each load balancer's files under base_path: the config the
// controller uploaded (validated before it replaces the live one), the
// last config that ran, and the agent's own record of the LB.
type Store struct {
	Layout        Layout
	HAProxyCmd    string
	UserGroupFile string
	// Runner runs `haproxy -c`; nil runs the real one with the clean
	// environment daemons get.
	Runner procgroup.Runner
	Log    *zap.Logger
	// FDLimit returns the open-files limit HAProxy will run under; nil
	// means this process's hard RLIMIT_NOFILE.
	FDLimit func() uint64
	// Sandbox, when set, runs `haproxy -c` through it without root
	// instead of through Runner.
	Sandbox *CheckSandbox

	memo checkMemo
}

// State is what the agent remembers about a load balancer between
// restarts and reboots.
type State struct {
	// AmphoraID is the amphora id of the last upload, whose peer name every
	// config-loading HAProxy invocation carries.
	AmphoraID string `json:"amphora_id"`
	Peer      string `json:"peer"`
	// Running is the desired state: true from the first start until stop
	// or delete.
	Running bool `json:"running"`
}

// ReadState returns the recorded state; a missing record is the zero State.
func (s *Store) ReadState(lb string) (State, error) {
	var st State
	data, err := os.ReadFile(s.Layout.StatePath(lb))
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(data, &st)
}

// WriteState records st for lb.
func (s *Store) WriteState(lb string, st State) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return fsutil.WriteFile(s.Layout.StatePath(lb), data, 0o600)
}

func (s *Store) checkRunner() procgroup.Runner {
	if s.Runner != nil {
		return s.Runner
	}
	return procgroup.Exec{Env: procwatch.CleanEnv()}
}

// Exists reports whether lb has a stored config.
func (s *Store) Exists(lb string) bool {
	if s.Layout.CheckID(lb) != nil {
		return false
	}
	_, err := os.Stat(s.Layout.ConfigPath(lb))
	return err == nil
}

// Upload validates cfg as lb's config and, if HAProxy accepts it, makes it
// the stored config. Nothing is started or reloaded. An invalid config is
// kept as haproxy.cfg.new-failed for inspection and leaves the stored
// config and any running HAProxy untouched.
func (s *Store) Upload(ctx context.Context, amphoraID, lb string, body []byte) error {
	if err := ValidateID("amphora id", amphoraID); err != nil {
		return fault.Invalid("Invalid request", err.Error())
	}
	if err := s.Layout.CheckID(lb); err != nil {
		return fault.Invalid("Invalid request", err.Error())
	}
	cfg := stripGroupLines(body)
	cfg, changed := compatConfig(cfg)
	if len(changed) > 0 {
		s.Log.Info("wrote what HAProxy 3.0 refuses as Octavia 2025.2 renders it",
			zap.String("lb", lb), zap.Strings("changes", changed))
	}
	if err := s.checkFDs(cfg); err != nil {
		return fault.Invalid("Invalid request", err.Error())
	}
	if err := os.MkdirAll(s.Layout.Dir(lb), 0o755); err != nil {
		return fault.Internalf("creating %s: %w", s.Layout.Dir(lb), err)
	}
	if err := s.EnsureUserGroupFile(); err != nil {
		return fault.Internalf("%w", err)
	}
	staged := s.Layout.StagedPath(lb)
	// Its data is fsync'd while HAProxy checks it; the directory once,
	// after the promoting rename below.
	if err := fsutil.Write(staged, cfg, 0o600, fsutil.Atomic); err != nil {
		return fault.Internalf("staging config: %w", err)
	}
	synced := make(chan error, 1)
	go func() { synced <- fsutil.SyncFile(staged) }()
	peer := PeerName(amphoraID)
	// Taken before the check, so that a file changed during it shows.
	rec := s.fingerprint(cfg, peer, s.memo.get(lb))
	s.memo.set(lb, nil)
	out, err := s.check(ctx, lb, staged, peer)
	syncErr := <-synced
	if err != nil {
		if errors.Is(err, errSandbox) {
			os.Remove(staged)
			return fault.Internalf("%w", err)
		}
		if errors.Is(err, errNotChecked) {
			// Says nothing about the config: answered 500, never 400,
			// which the controller would take as final.
			os.Remove(staged)
			return fault.Internal("Error checking haproxy configuration", out, err)
		}
		if rerr := os.Rename(staged, s.Layout.FailedPath(lb)); rerr != nil {
			s.Log.Warn("keeping the rejected config", zap.String("lb", lb), zap.Error(rerr))
		}
		return fault.Invalid("Invalid request", out)
	}
	if syncErr != nil {
		os.Remove(staged)
		return fault.Internalf("staging config: %w", syncErr)
	}
	st, err := s.ReadState(lb)
	if err != nil {
		s.Log.Warn("unreadable load balancer record; rewriting it", zap.String("lb", lb), zap.Error(err))
	}
	// Rewritten only when it changes: every upload after the first carries
	// the same amphora id, and each durable write costs two fsyncs.
	if err != nil || st.AmphoraID != amphoraID || st.Peer != peer {
		st.AmphoraID, st.Peer = amphoraID, peer
		if err := s.WriteState(lb, st); err != nil {
			return fault.Internalf("recording load balancer: %w", err)
		}
	}
	if err := os.Rename(staged, s.Layout.ConfigPath(lb)); err != nil {
		return fault.Internalf("promoting config: %w", err)
	}
	if err := fsutil.SyncDir(s.Layout.Dir(lb)); err != nil {
		return fault.Internalf("%w", err)
	}
	s.memo.set(lb, rec)
	return nil
}

// errNotChecked: `haproxy -c` could not run, or was cut short, so it said
// nothing about the config.
var errNotChecked = errors.New("haproxy -c did not check the configuration")

// check runs HAProxy's own validation, exactly as every later start and
// reload loads the config (same -f files, same -L peer). Like upstream's,
// it runs as long as it takes while the client that asked waits
// (caller.Of; ctx otherwise). Only HAProxy's own verdict is a rejection;
// a check that could not run or was cut short is errNotChecked.
func (s *Store) check(ctx context.Context, lb, path, peer string) (string, error) {
	ctx = caller.Or(ctx)
	args := []string{"-c", "-L", peer, "-f", path, "-f", s.UserGroupFile}
	var (
		out []byte
		err error
	)
	if s.Sandbox != nil {
		out, err = s.Sandbox.run(ctx, lb, path, s.UserGroupFile, s.HAProxyCmd, args...)
	} else {
		out, err = s.checkRunner().CombinedOutput(ctx, s.HAProxyCmd, args...)
	}
	if errors.Is(err, errSandbox) {
		return "", err
	}
	if err != nil {
		if len(out) == 0 {
			out = []byte(err.Error())
		}
		switch {
		case ctx.Err() != nil:
			out = fmt.Appendf(bytes.TrimRight(out, "\n"), "\nhaproxy -c did not finish: %v", context.Cause(ctx))
			return string(out), fmt.Errorf("%w: %w", errNotChecked, ctx.Err())
		case procgroup.NotRun(err):
			out = fmt.Appendf(bytes.TrimRight(out, "\n"), "\nhaproxy -c could not run: %v", err)
			return string(out), fmt.Errorf("%w: %w", errNotChecked, err)
		}
		return string(out), err
	}
	return string(out), nil
}

// Args are the arguments that load lb's config, shared by check, start
// and reload.
func (s *Store) configArgs(lb, peer string) []string {
	return []string{"-f", s.Layout.ConfigPath(lb), "-f", s.UserGroupFile, "-L", peer}
}

// defaultUserGroup is used when the image lacks its user/group file. Debian
// and Ubuntu images name the group nogroup; RHEL-family images haproxy.
func defaultUserGroup() string {
	group := "nogroup"
	if data, err := os.ReadFile("/etc/group"); err == nil && !regexp.MustCompile(`(?m)^nogroup:`).Match(data) {
		group = "haproxy"
	}
	return "global\n    group " + group + "\n"
}

// EnsureUserGroupFile writes a default user/group file when the image
// does not provide one, so uploads do not all fail for want of it.
func (s *Store) EnsureUserGroupFile() error {
	if _, err := os.Stat(s.UserGroupFile); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(s.UserGroupFile), 0o755); err != nil {
		return err
	}
	content := defaultUserGroup()
	s.Log.Warn("HAProxy user/group file missing; writing a default", zap.String("file", s.UserGroupFile), zap.String("content", content))
	return fsutil.WriteFile(s.UserGroupFile, []byte(content), 0o644)
}

// HAProxy needs about two descriptors per connection (client and server
// side) plus a few dozen for listeners, logs and sockets.
const fdsPerConn, fdSlack = 2, 40

// checkFDs refuses a config whose global maxconn needs more open files
// than HAProxy will be allowed, with the numbers and the setting to change,
// instead of the bare alert HAProxy would print at start.
func (s *Store) checkFDs(cfg []byte) error {
	sum := Parse(cfg)
	maxconn := sum.GlobalMaxconn
	if maxconn <= 0 {
		return nil
	}
	need := sum.FDsNeeded()
	limit := s.fdLimit(need)
	if need <= limit {
		return nil
	}
	return fmt.Errorf("the configuration needs about %d open files for its global maxconn of %d, but this amphora allows at most %d (RLIMIT_NOFILE): lower the listeners' connection_limit or raise LimitNOFILE of the amphora-agent service", need, maxconn, limit)
}

func (s *Store) fdLimit(need uint64) uint64 {
	if s.FDLimit != nil {
		return s.FDLimit()
	}
	return raiseFDLimit(need)
}

// FDsNeeded estimates the open files HAProxy asks for: two per
// connection, two per splice pipe (maxconn/4 of them when splicing is on),
// and some slack for listeners, logs and sockets. With Octavia's default
// 50000 connections and splicing that is about 125000.
func (s Summary) FDsNeeded() uint64 {
	if s.GlobalMaxconn <= 0 {
		return 0
	}
	// A maxconn near the int range would wrap around to a small need and
	// pass the check: saturate instead.
	hi, need := bits.Mul64(uint64(s.GlobalMaxconn), fdsPerConn)
	need, carry := bits.Add64(need, fdSlack, 0)
	if s.Splice {
		var c uint64
		need, c = bits.Add64(need, uint64(s.GlobalMaxconn/4)*2, 0)
		carry += c
	}
	if hi != 0 || carry != 0 {
		return math.MaxUint64
	}
	return need
}

// raiseFDLimit lifts this process's hard RLIMIT_NOFILE to need when it is
// lower and the kernel lets it (HAProxy inherits the hard limit and raises
// its own soft limit to what its maxconn needs). It returns the hard limit
// in force afterwards.
func raiseFDLimit(need uint64) uint64 {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return ^uint64(0)
	}
	if rl.Max >= need {
		return rl.Max
	}
	raised := unix.Rlimit{Cur: rl.Cur, Max: need}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &raised); err != nil {
		return rl.Max
	}
	return need
}

// Config returns lb's stored config.
func (s *Store) Config(lb string) ([]byte, error) {
	if err := s.Layout.CheckID(lb); err != nil {
		return nil, notFound(lb)
	}
	data, err := os.ReadFile(s.Layout.ConfigPath(lb))
	if errors.Is(err, os.ErrNotExist) {
		return nil, notFound(lb)
	}
	return data, err
}

func notFound(lb string) error {
	return fault.NotFound("Loadbalancer Not Found", "No loadbalancer with UUID: "+lb)
}

// Remove deletes every file of lb under base_path, including its stats
// socket. The caller stops HAProxy first. A folder that is not a load
// balancer's (Known) is left alone, and so is anything at a socket path
// that is not a socket: a config may name any file as its stats socket.
func (s *Store) Remove(lb string) error {
	s.memo.set(lb, nil)
	if !s.Layout.Known(lb) {
		return nil
	}
	if sum, err := s.Layout.Summary(lb); err == nil && sum.StatsSocket != "" {
		removeSocket(sum.StatsSocket)
	}
	removeSocket(s.Layout.SocketPath(lb))
	if err := os.RemoveAll(s.Layout.Dir(lb)); err != nil {
		return err
	}
	return fsutil.SyncDir(s.Layout.Base)
}

// removeSocket removes path if it is a unix socket; errors are ignored,
// as upstream ignores them.
func removeSocket(path string) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		os.Remove(path)
	}
}
