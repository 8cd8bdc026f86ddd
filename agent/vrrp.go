package agent

import (
	"context"
	"strings"

	"github.com/amphora-agent/amphora-agent/agent/config"
	"github.com/amphora-agent/amphora-agent/agent/etag"
	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/keepalived"
)

// vrrpRunner runs the ACTIVE_STANDBY keepalived; keepalived.VRRP in
// production, a fake in unit tests.
type vrrpRunner interface {
	Upload(ctx context.Context, body []byte) error
	Start(ctx context.Context) (reloaded bool, err error)
	Reload(ctx context.Context) (started bool, err error)
	Stop(ctx context.Context) error
	Restore(ctx context.Context) error
	Close()
}

func (a *Agent) newVRRP(cfg *config.Config) *keepalived.VRRP {
	return keepalived.NewVRRP(keepalived.VRRPOptions{Base: cfg.BasePath, Options: a.keepalivedOptions(cfg, "keepalived")})
}

// keepalivedOptions are what every keepalived the agent runs shares.
func (a *Agent) keepalivedOptions(cfg *config.Config, logName string) keepalived.Options {
	return keepalived.Options{
		Cmd:         cfg.KeepalivedCmd,
		Namespace:   cfg.Namespace,
		LogFacility: cfg.AdministrativeLogFacility,
		ProcDir:     a.procDir,
		Log:         a.log.Named(logName),
		Journal:     a.journal,
	}
}

func (a *Agent) vrrpLayout() keepalived.VRRPLayout {
	return keepalived.VRRPLayout{Base: a.lbStore.Layout.Base}
}

// UploadVRRP validates and stores the keepalived (VRRP) config, refreshes
// the HAProxy check keepalived tracks, and returns the ETag (the md5 of
// the body). keepalived is neither started nor reloaded. Takes the
// mutation lock.
func (a *Agent) UploadVRRP(ctx context.Context, body []byte) (string, error) {
	return locked(a, ctx, func(ctx context.Context) (string, error) {
		if err := a.vrrp.Upload(ctx, body); err != nil {
			return "", err
		}
		if err := a.updateVRRPCheck(""); err != nil {
			return "", err
		}
		return etag.MD5(body), nil
	})
}

// VRRPAction starts, stops or reloads keepalived and returns upstream's
// details text; start on a running keepalived is a reload. Takes the
// mutation lock.
func (a *Agent) VRRPAction(ctx context.Context, action string) (string, error) {
	return locked(a, ctx, func(ctx context.Context) (string, error) {
		action = strings.ToLower(action)
		var err error
		switch action {
		case actionStart:
			var reloaded bool
			if reloaded, err = a.vrrp.Start(ctx); reloaded {
				action = actionReload
			}
		case actionReload:
			var started bool
			if started, err = a.vrrp.Reload(ctx); started {
				action = actionStart
			}
		case actionStop:
			err = a.vrrp.Stop(ctx)
		default:
			return "", fault.Invalid("Invalid Request", "Unknown action: "+action)
		}
		if err != nil {
			if _, ok := fault.As(err); ok {
				return "", err
			}
			return "", fault.Internal("Failed to "+action+" octavia-keepalived service", err.Error(), err)
		}
		// Sic: upstream appends "ed", hence "stoped".
		return "keepalived " + action + "ed", nil
	})
}
