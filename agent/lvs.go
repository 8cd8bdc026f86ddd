package agent

import (
	"context"
	"strings"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/config"
	"github.com/amphora-agent/amphora-agent/agent/etag"
	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/keepalived"
)

// lvsRunner runs the UDP and SCTP listeners' keepalived instances;
// keepalived.LVS in production, a fake in unit tests.
type lvsRunner interface {
	Upload(ctx context.Context, id string, body []byte) error
	Config(id string) ([]byte, error)
	Exists(id string) bool
	Start(ctx context.Context, id string) error
	Restart(ctx context.Context, id string) error
	Reload(ctx context.Context, id string) (inPlace bool, err error)
	Stop(ctx context.Context, id string) error
	Delete(ctx context.Context, id string) error
	Restore(ctx context.Context) error
	Busy(id string) bool
	Close()
}

func (a *Agent) newLVS(cfg *config.Config) *keepalived.LVS {
	return keepalived.NewLVS(keepalived.LVSOptions{Base: cfg.BasePath, Options: a.keepalivedOptions(cfg, "keepalivedlvs")})
}

// LVSBusy reports whether the agent is starting, restarting or restoring
// listener id's keepalived: the heartbeat reports such a listener from its
// last reading meanwhile.
func (a *Agent) LVSBusy(id string) bool { return a.lvs.Busy(id) }

// UploadLVS validates and stores a UDP or SCTP listener's keepalived
// config and returns its ETag. Nothing is started. In ACTIVE_STANDBY the
// VRRP checks learn of the listener. amphoraID is not used, as upstream.
// Takes the mutation lock.
func (a *Agent) UploadLVS(ctx context.Context, amphoraID, id string, body []byte) (string, error) {
	return locked(a, ctx, func(ctx context.Context) (string, error) {
		if err := a.lbID(id); err != nil {
			return "", fault.Invalid("Invalid request", strings.Replace(err.Error(), "load balancer", "listener", 1))
		}
		if err := a.lvs.Upload(ctx, id, body); err != nil {
			return "", err
		}
		if a.Config().ActiveStandby() {
			if err := a.checkScripts().WriteLVSCheck(a.lvsLayout().Dir()); err != nil {
				return "", fault.Internalf("writing the LVS VRRP check script: %w", err)
			}
			if err := a.updateVRRPCheck(""); err != nil {
				return "", err
			}
		}
		return etag.MD5(body), nil
	})
}

// LVSConfig returns a listener's stored config.
func (a *Agent) LVSConfig(ctx context.Context, id string) ([]byte, error) {
	if a.lbID(id) != nil {
		return nil, fault.NotFound("UDP Listener Not Found", "No UDP listener with UUID: "+id)
	}
	return a.lvs.Config(id)
}

// isLVS reports whether id names a UDP or SCTP listener the shared routes
// dispatch to: a load balancer of the same id wins, as upstream.
func (a *Agent) isLVS(id string) bool {
	return a.lbID(id) == nil && !a.lbStore.Exists(id) && a.lvs.Exists(id)
}

// lvsAction runs start, stop or reload on a listener under the mutation
// lock. A reload is keepalived's own (SIGHUP) where its version carries
// the members' check states over correctly, else a restart, as upstream;
// the answer names which.
func (a *Agent) lvsAction(ctx context.Context, id, action string) (string, error) {
	var err error
	switch action {
	case actionStart:
		err = a.lvs.Start(ctx, id)
	case actionReload:
		var inPlace bool
		if inPlace, err = a.lvs.Reload(ctx, id); !inPlace {
			action = "restart"
		}
	case actionStop:
		err = a.lvs.Stop(ctx, id)
	}
	if err != nil {
		if _, ok := fault.As(err); ok {
			return "", err
		}
		return "", fault.Internal("Failed to "+action+" keepalivedlvs listener "+id, err.Error(), err)
	}
	if action != actionStop && !a.Config().ActiveStandby() {
		// The start may have waited as long as the controller did.
		ctx, cancel := renewed(ctx)
		defer cancel()
		if cfg, err := a.lvs.Config(id); err == nil {
			if err := a.advertise(ctx, a.Config().Namespace, keepalived.VIPs(cfg)); err != nil {
				a.log.Warn("advertising VIPs", zap.String("listener", id), zap.Error(err))
			}
		}
	}
	// Sic: upstream appends "ed", hence "stoped".
	return "keepalivedlvs listener " + id + " " + action + "ed", nil
}

// deleteLVS stops a listener's keepalived and removes its files.
func (a *Agent) deleteLVS(ctx context.Context, id string) error {
	if err := a.lvs.Delete(ctx, id); err != nil {
		return fault.Internal("Error stopping keepalivedlvs", err.Error(), err)
	}
	return nil
}
