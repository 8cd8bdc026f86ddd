package keepalived

import (
	"bytes"
	"context"
	"errors"
	"os"
	"sync"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/procwatch"
)

// LVSOptions configure the listeners' keepalived instances.
type LVSOptions struct {
	Options
	Base string
	// Validate checks uploads; nil runs `keepalived -t` in the namespace.
	Validate Validator
	// Version returns `keepalived --version`'s output, which decides how
	// a listener is reloaded; nil runs Cmd.
	Version func(ctx context.Context) ([]byte, error)
}

// LVS runs one keepalived per UDP or SCTP listener, each supervised like
// the VRRP one: wanted from its first upload (upstream enables its unit)
// and from every start or restart, not from a stop. Closing it leaves
// them running.
type LVS struct {
	store *LVSStore
	opts  Options

	mu        sync.Mutex
	instances map[string]*daemon
	// busy counts, per listener, the starts, restarts and restores under
	// way, for the heartbeat to tell them from a keepalived that is down.
	busy map[string]int
	// slow is, per listener, the keepalived an operation answered for
	// before it was ready: busy too until it is (or is gone).
	slow      map[string]*procwatch.Process
	done      chan struct{}
	closeOnce sync.Once

	version func(ctx context.Context) ([]byte, error)
	// inPlace, once known, says whether a reload is a SIGHUP (true) or a
	// restart: keepalived's version is read at the first reload that can
	// read it, and kept.
	inPlace *bool
}

// NewLVS returns the listeners' supervision; call Restore to pick up the
// previous state.
func NewLVS(o LVSOptions) *LVS {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Validate == nil {
		o.Validate = Test(o.Cmd, o.Namespace)
	}
	if o.Version == nil {
		o.Version = func(ctx context.Context) ([]byte, error) { return VersionOutput(ctx, o.Cmd) }
	}
	l := LVSLayout{Base: o.Base, ProcDir: o.ProcDir}
	return &LVS{store: &LVSStore{Layout: l, Validate: o.Validate, Log: o.Log}, opts: o.Options,
		instances: map[string]*daemon{}, busy: map[string]int{},
		slow: map[string]*procwatch.Process{}, done: make(chan struct{}), version: o.Version}
}

// Layout names the listeners' files.
func (s *LVS) Layout() LVSLayout { return s.store.Layout }

// Close stops supervising; keepalived instances keep running.
func (s *LVS) Close() { s.closeOnce.Do(func() { close(s.done) }) }

// History is the listener's restart record; ok is false when it is not
// supervised.
func (s *LVS) History(id string) (h procwatch.History, ok bool) {
	s.mu.Lock()
	k := s.instances[id]
	s.mu.Unlock()
	if k == nil {
		return h, false
	}
	return k.d.History(), true
}

// Busy reports whether the agent is starting, restarting or restoring
// listener id's keepalived right now. A respawn after keepalived died on
// its own is not such an operation: that outage is real. An operation
// answered while its keepalived was still starting stays busy until that
// one is ready.
func (s *LVS) Busy(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[id] > 0 {
		return true
	}
	p, k := s.slow[id], s.instances[id]
	if p != nil && k != nil && k.d.Starting() == p {
		return true
	}
	delete(s.slow, id)
	return false
}

// operate runs op on listener id's keepalived, counted as busy meanwhile.
func (s *LVS) operate(id string, op func(*daemon) error) error {
	s.mu.Lock()
	s.busy[id]++
	s.mu.Unlock()
	k := s.instance(id)
	defer func() {
		slow := k.d.Starting()
		s.mu.Lock()
		if s.busy[id]--; s.busy[id] <= 0 {
			delete(s.busy, id)
		}
		if slow != nil {
			s.slow[id] = slow
		}
		s.mu.Unlock()
	}()
	return op(k)
}

func (s *LVS) instance(id string) *daemon {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.instances[id]
	if k == nil {
		o := s.opts
		o.Log = o.Log.With(zap.String("listener", id))
		k = newDaemon(o, s.store.Layout.Files(id), s.done)
		s.instances[id] = k
	}
	return k
}

// Upload stores a validated config and, on the first upload, records the
// listener as wanted. Nothing is started.
func (s *LVS) Upload(ctx context.Context, id string, body []byte) error {
	if err := s.store.Upload(ctx, id, body); err != nil {
		return err
	}
	if err := s.instance(id).wantFromUpload(); err != nil {
		return fault.Internalf("%w", err)
	}
	return nil
}

// Config returns a listener's stored config.
func (s *LVS) Config(id string) ([]byte, error) { return s.store.Config(id) }

// Exists reports whether listener id has a stored config.
func (s *LVS) Exists(id string) bool { return s.store.Exists(id) }

// Start starts the listener's keepalived unless it runs.
func (s *LVS) Start(ctx context.Context, id string) error {
	return s.ensure(ctx, id, false)
}

// Restart stops and starts it: every member starts over from its initial
// state, and IPVS is emptied meanwhile.
func (s *LVS) Restart(ctx context.Context, id string) error {
	return s.ensure(ctx, id, true)
}

// Reload has the listener's keepalived read its config again, as the
// controller asks after every upload: with SIGHUP when this keepalived's
// reload applies member changes and keeps their check states
// (reloadKeepsMembers), which leaves IPVS and its flows in place, else
// with a restart, as upstream. One that is not running is started.
// inPlace tells whether it was sent SIGHUP.
func (s *LVS) Reload(ctx context.Context, id string) (inPlace bool, err error) {
	if !s.Exists(id) {
		return false, lvsNotFound(id)
	}
	if !s.reloadsInPlace(ctx) {
		return false, s.Restart(ctx, id)
	}
	f := s.store.Layout.Files(id)
	cfg, statErr := os.Stat(f.Config)
	err = s.operate(id, func(k *daemon) error {
		var err error
		inPlace, _, err = k.startOrReload(ctx)
		return err
	})
	if inPlace && err == nil && statErr == nil {
		// The heartbeat reports members missing from IPVS as RESTARTING
		// while the config is newer than the checker's pid file, which a
		// restart rewrites and a reload does not: the file now says this
		// config is loaded.
		if err := os.Chtimes(f.CheckPid, cfg.ModTime(), cfg.ModTime()); err != nil {
			s.opts.Log.Warn("marking the reloaded config as loaded", zap.String("listener", id), zap.Error(err))
		}
	}
	return inPlace, err
}

// reloadsInPlace reads keepalived's version once (until it could be
// read) and tells whether its reload can stand in for a restart.
func (s *LVS) reloadsInPlace(ctx context.Context) bool {
	s.mu.Lock()
	known := s.inPlace
	s.mu.Unlock()
	if known != nil {
		return *known
	}
	out, err := s.version(ctx)
	v, ok := parseVersion(out)
	if !ok {
		s.opts.Log.Warn("keepalived's version is unknown: listeners are restarted on reload",
			zap.Error(err), zap.ByteString("output", firstLine(out)))
		return false
	}
	inPlace := v.atLeast(reloadKeepsMembers)
	s.mu.Lock()
	s.inPlace = &inPlace
	s.mu.Unlock()
	s.opts.Log.Info("keepalived's version decides how listeners are reloaded",
		zap.Stringer("version", v), zap.Bool("sighup", inPlace))
	return inPlace
}

func firstLine(b []byte) []byte {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	return line
}

func (s *LVS) ensure(ctx context.Context, id string, restart bool) error {
	if !s.Exists(id) {
		return lvsNotFound(id)
	}
	return s.operate(id, func(k *daemon) error { return k.ensureRunning(ctx, restart) })
}

// Stop stops the listener's keepalived and remembers that it must stay
// stopped.
func (s *LVS) Stop(ctx context.Context, id string) error {
	if !s.Exists(id) {
		return lvsNotFound(id)
	}
	return s.instance(id).stop()
}

// Delete stops the listener's keepalived and removes its files; an
// unknown listener is no error. Files stay when it would not stop.
func (s *LVS) Delete(ctx context.Context, id string) error {
	if !s.Exists(id) {
		return nil
	}
	err := s.instance(id).remove()
	s.mu.Lock()
	delete(s.instances, id) // supervision ended either way
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.store.remove(id)
}

// Restore brings every stored listener back to its desired state at
// agent start-up, after the network and the load balancers.
func (s *LVS) Restore(ctx context.Context) error {
	ids, err := s.store.Layout.Listeners()
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		if err := s.operate(id, func(k *daemon) error { return k.restore(ctx) }); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
