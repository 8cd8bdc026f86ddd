package agent

import (
	"context"
	"strings"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/config"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/netns"
)

// network is the namespace's network state as the configuration in force
// describes it. It is cheap to build; building it per call means a
// changed topology (PUT /1.0/config) applies to the next plug.
func (a *Agent) network() *netns.Network {
	return netns.NewNetwork(NetworkConfig(a.Config(), func() bool { return a.Config().ActiveStandby() }),
		a.kernel, a.log.Named("netns"))
}

// NetworkConfig is the data-plane network setup cfg describes; the
// topology is asked through activeStandby so that it can follow config
// changes.
func NetworkConfig(cfg *config.Config, activeStandby func() bool) netns.Config {
	return netns.Config{
		Namespace:        cfg.Namespace,
		NetworkDir:       cfg.NetworkDir,
		PluggedFile:      cfg.PluggedInterfacesFile,
		NftablesFile:     cfg.NftablesRulesFile,
		PCIRescanFile:    cfg.PCIRescanFile,
		MasqueradeScript: cfg.LVSMasqueradeScript,
		ActiveStandby:    activeStandby,
	}
}

// prepareNetwork runs at start-up, before any load balancer is started: it
// writes lo.json, ensures the namespace (created if missing, lo up,
// sysctls), moves every plugged port that is back in the default namespace
// (after a reboot) into it under its recorded name, and applies every
// interface file. Failures are logged and returned; the caller keeps
// serving, since the controller must still reach the API to repair the
// amphora (or fail it over).
func (a *Agent) prepareNetwork(ctx context.Context) error {
	err := a.network().Restore(ctx)
	if err != nil {
		a.log.Error("network namespace not fully restored", zap.String("namespace", a.Config().Namespace), zap.Error(err))
		return err
	}
	a.log.Info("network namespace ready", zap.String("namespace", a.Config().Namespace))
	return nil
}

// How long the agent keeps looking for plugged NICs that are not back
// when it starts, and how often; a PCI rescan is asked for every
// lateRescanEvery meanwhile.
const (
	latePortsFor    = 10 * time.Minute
	latePortsEvery  = 2 * time.Second
	lateRescanEvery = 30 * time.Second
)

// watchLatePorts finishes the restore of plugged ports whose NIC appears
// only after start-up (late enumeration after a reboot): until none is
// missing, or for at most limit, it moves each one that appeared into the
// namespace and brings it up, holding the mutation lock for each attempt.
// Before, such a port stayed unplugged until the controller plugged it
// again.
func (a *Agent) watchLatePorts(ctx context.Context, limit time.Duration) {
	deadline := time.Now().Add(limit)
	var lastRescan time.Time
	var waiting string
	for {
		var missing []netns.Plugged
		err := a.exclusive(ctx, func(ctx context.Context) error {
			rescan := time.Since(lastRescan) >= lateRescanEvery
			if rescan {
				lastRescan = time.Now()
			}
			var err error
			missing, err = a.network().AdoptLatePorts(ctx, rescan)
			return err
		})
		if err != nil && ctx.Err() == nil {
			a.log.Error("restoring a late plugged interface", zap.Error(err))
		}
		if len(missing) == 0 {
			if waiting != "" {
				a.log.Info("every plugged interface is back in the namespace")
			}
			return
		}
		names := make([]string, len(missing))
		for i, p := range missing {
			names[i] = p.Name + " (" + p.MAC.String() + ")"
		}
		if now := strings.Join(names, ", "); now != waiting {
			waiting = now
			a.log.Warn("waiting for plugged interfaces to appear", zap.String("interfaces", now),
				zap.Duration("at_most", time.Until(deadline).Round(time.Second)))
		}
		if time.Now().After(deadline) {
			a.log.Error("plugged interfaces never appeared; they stay unplugged until the controller plugs them again",
				zap.String("interfaces", waiting))
			return
		}
		t := time.NewTimer(latePortsEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// PlugVIP is POST /1.0/plug/vip/{vip}: it returns the 202 details text.
// A missing NIC is an error matching netns.ErrNoInterface.
func (a *Agent) PlugVIP(ctx context.Context, vip string, body []byte) (string, error) {
	return locked(a, ctx, func(ctx context.Context) (string, error) {
		return a.network().PlugVIP(ctx, vip, body)
	})
}

// PlugNetwork is POST /1.0/plug/network: it returns the 202 details text.
func (a *Agent) PlugNetwork(ctx context.Context, body []byte) (string, error) {
	return locked(a, ctx, func(ctx context.Context) (string, error) {
		return a.network().PlugNetwork(ctx, body)
	})
}

// InterfaceFor is GET /1.0/interface/{ip}: the interface inside the
// namespace holding ip.
func (a *Agent) InterfaceFor(ctx context.Context, ip string) (string, error) {
	return a.network().InterfaceFor(ip)
}

// SetInterfaceRules is PUT /1.0/interface/{ip}/rules.
func (a *Agent) SetInterfaceRules(ctx context.Context, ip string, body []byte) error {
	return a.exclusive(ctx, func(ctx context.Context) error {
		return a.network().SetRules(ctx, ip, body)
	})
}
