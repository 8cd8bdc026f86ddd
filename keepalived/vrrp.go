package keepalived

import (
	"context"
	"errors"
	"sync"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/procwatch"
)

// VRRPOptions configure the VRRP keepalived.
type VRRPOptions struct {
	Options
	Base string
	// Validate checks uploads; nil runs `keepalived -t` in the namespace.
	Validate Validator
}

// VRRP is the ACTIVE_STANDBY amphora's keepalived: its store and its
// supervision. It is wanted from the first upload (upstream enables its
// unit so that it starts at boot) and from every start or reload, and not
// from a stop until the next start or reload. Unlike upstream, one that
// dies is restarted. Closing it leaves keepalived running.
type VRRP struct {
	store *VRRPStore
	k     *daemon

	done      chan struct{}
	closeOnce sync.Once
}

// NewVRRP returns the VRRP keepalived; call Restore to pick up the
// previous state.
func NewVRRP(o VRRPOptions) *VRRP {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	l := VRRPLayout{Base: o.Base}
	if o.Validate == nil {
		o.Validate = Test(o.Cmd, o.Namespace)
	}
	v := &VRRP{store: &VRRPStore{Layout: l, Validate: o.Validate, Log: o.Log}, done: make(chan struct{})}
	v.k = newDaemon(o.Options, l.Files(), v.done)
	return v
}

// Layout names the VRRP files.
func (v *VRRP) Layout() VRRPLayout { return v.store.Layout }

// Close stops supervising; keepalived keeps running for the next agent.
func (v *VRRP) Close() { v.closeOnce.Do(func() { close(v.done) }) }

// Upload stores a validated config (see VRRPStore.Upload) and, on the
// first upload, records keepalived as wanted. It neither starts nor
// reloads keepalived.
func (v *VRRP) Upload(ctx context.Context, body []byte) error {
	if err := v.store.Upload(ctx, body); err != nil {
		return err
	}
	if err := v.k.wantFromUpload(); err != nil {
		return fault.Internalf("%w", err)
	}
	return nil
}

// Configured reports whether a VRRP config was uploaded.
func (v *VRRP) Configured() bool { return v.store.Configured() }

// Running reports whether the supervised keepalived is alive.
func (v *VRRP) Running() bool { return v.k.d.Running() }

// Pid is the supervised keepalived's main pid, 0 when it does not run.
func (v *VRRP) Pid() int { return v.k.d.Pid() }

// History is keepalived's restart record.
func (v *VRRP) History() procwatch.History { return v.k.d.History() }

var errNotConfigured = errors.New("no keepalived configuration has been uploaded")

// Start starts keepalived; one that already runs is reloaded instead, as
// upstream does (reloaded reports that).
func (v *VRRP) Start(ctx context.Context) (reloaded bool, err error) {
	if !v.Configured() {
		return false, errNotConfigured
	}
	reloaded, _, err = v.k.startOrReload(ctx)
	return reloaded, err
}

// Reload makes keepalived re-read its config (SIGHUP). A keepalived that
// does not run is started instead (started reports that).
func (v *VRRP) Reload(ctx context.Context) (started bool, err error) {
	if !v.Configured() {
		return false, errNotConfigured
	}
	_, started, err = v.k.startOrReload(ctx)
	return started, err
}

// Stop stops keepalived (it gives up the VIPs) and remembers that it must
// stay stopped.
func (v *VRRP) Stop(ctx context.Context) error { return v.k.stop() }

// Restore brings keepalived back to its desired state at agent start-up,
// after the network and the load balancers.
func (v *VRRP) Restore(ctx context.Context) error {
	if !v.Configured() {
		return nil
	}
	return v.k.restore(ctx)
}
