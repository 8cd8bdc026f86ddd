package agent

import (
	"context"
	"path/filepath"
	"strings"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/caller"
	"github.com/amphora-agent/amphora-agent/agent/etag"
	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/health"
	"github.com/amphora-agent/amphora-agent/certs"
	"github.com/amphora-agent/amphora-agent/keepalived"
)

// Load balancer actions the controller may ask for.
const (
	actionStart  = "start"
	actionStop   = "stop"
	actionReload = "reload"
)

// lbID refuses ids that are unsafe as a path element or that name one of
// the agent's own entries under base_path.
func (a *Agent) lbID(id string) error { return a.haproxyLayout().CheckID(id) }

// reservedNames is the one list of what the agent keeps under base_path
// besides the load balancers' folders, by top-level name, with what each
// holds: the layouts and the configuration in force say where their files
// are. Names with a dot (sockets <lb>.sock, stats_counters.json, the rules
// and user/group files) already fail the id pattern; they are listed all
// the same.
func (a *Agent) reservedNames() map[string]string {
	cfg := a.Config()
	base := a.haproxyLayout().Base
	owned := []struct{ path, what string }{
		{a.vrrpLayout().Dir(), "the VRRP keepalived's files"},
		{a.lvsLayout().Dir(), "the UDP/SCTP listeners' files"},
		{cfg.BaseCertDir, "the listeners' certificates (base_cert_dir)"},
		{cfg.NetworkDir, "the interface files (agent_server_network_dir)"},
		{cfg.PluggedInterfacesFile, "the plugged interfaces record (plugged_interfaces_file)"},
		{cfg.NftablesRulesFile, "the VIP firewall rules (nftables_rules_file)"},
		{cfg.HAProxyUserGroupFile, "HAProxy's user and group (haproxy_user_group_file)"},
		{health.CountersPath(base), "the heartbeat's counters"},
	}
	names := make(map[string]string, len(owned))
	for _, o := range owned {
		rel, err := filepath.Rel(base, o.path)
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
			continue
		}
		first, _, _ := strings.Cut(rel, string(filepath.Separator))
		names[first] = o.what
	}
	return names
}

// LoadBalancerState reports whether lb's HAProxy runs and whether the
// agent is starting, reloading or restoring it: the supervisor's answer,
// which the heartbeat asks every cycle and which never waits for an
// operation under way. A HAProxy the supervisor does not run but that
// serves lb's config (started by upstream's unit before an in-place
// upgrade from the Python agent, which reported it) counts as running,
// so that its listeners stay in the heartbeats.
func (a *Agent) LoadBalancerState(lb string) (running, busy bool) {
	running, busy = a.lbs.State(lb)
	if !running && !busy {
		running = a.haproxyLayout().RunsConfig(lb)
	}
	return running, busy
}

// RunningLoadBalancers counts the stored load balancers and those whose
// HAProxy runs, as the supervisor sees them.
func (a *Agent) RunningLoadBalancers() (running, stored int, err error) {
	lbs, err := a.haproxyLayout().LoadBalancers()
	for _, lb := range lbs {
		if r, _ := a.LoadBalancerState(lb); r {
			running++
		}
	}
	return running, len(lbs), err
}

// UploadHAProxy validates and stores a load balancer's HAProxy config and
// returns its ETag (the md5 of the body as received).
func (a *Agent) UploadHAProxy(ctx context.Context, amphoraID, lb string, body []byte) (string, error) {
	return locked(a, ctx, func(ctx context.Context) (string, error) {
		if err := a.lbStore.Upload(ctx, amphoraID, lb, body); err != nil {
			a.outcomes.refused(lb, err)
			return "", err
		}
		return etag.MD5(body), nil
	})
}

// HAProxyConfig returns the stored config and its md5.
func (a *Agent) HAProxyConfig(ctx context.Context, lb string) ([]byte, string, error) {
	data, err := a.lbStore.Config(lb)
	if err != nil {
		return nil, "", err
	}
	return data, etag.MD5(data), nil
}

// LoadBalancerAction runs start, stop or reload on a load balancer and
// returns the details text upstream answers with.
//
// It takes the mutation lock; reloads of one load balancer that queue for
// the lock are served by a single reload (the controller's flows and
// retries may send several).
func (a *Agent) LoadBalancerAction(ctx context.Context, id, action string) (string, error) {
	action = strings.ToLower(action)
	switch action {
	case actionStart, actionStop, actionReload:
	default:
		return "", fault.Invalid("Invalid Request", "Unknown action: "+action)
	}
	if action != actionReload {
		return locked(a, ctx, func(ctx context.Context) (string, error) {
			return a.loadBalancerAction(ctx, id, action)
		})
	}
	_, asked := caller.Of(ctx)
	return a.reloads.do(ctx, id, func(wait context.Context, holding func()) (string, error) {
		if asked {
			// The run's clients are all those that joined it.
			wait = caller.With(wait)
		}
		return locked(a, wait, func(ctx context.Context) (string, error) {
			holding()
			return a.loadBalancerAction(ctx, id, action)
		})
	})
}

// loadBalancerAction runs action under the mutation lock.
func (a *Agent) loadBalancerAction(ctx context.Context, id, action string) (string, error) {
	if a.isLVS(id) {
		return a.lvsAction(ctx, id, action)
	}
	if !a.lbStore.Exists(id) {
		return "", fault.NotFound("Loadbalancer Not Found", "No loadbalancer with UUID: "+id)
	}
	// A stop goes ahead even when the check script cannot be rewritten
	// (a full disk), and reports that after.
	var checkErr error
	if a.Config().ActiveStandby() {
		excluded := ""
		if action == actionStop {
			excluded = id
		}
		if checkErr = a.updateVRRPCheck(excluded); checkErr != nil && action != actionStop {
			return "", checkErr
		}
	}
	started := action == actionStart
	var err error
	switch action {
	case actionStart:
		err = a.lbs.Start(ctx, id)
	case actionStop:
		err = a.lbs.Stop(ctx, id)
		a.loadBalancerGone(id)
		if err == nil && checkErr != nil {
			err = fault.Internal("HAProxy stopped, but the VRRP check script could not be updated", checkErr.Error(), checkErr)
		}
	case actionReload:
		started, err = a.lbs.Reload(ctx, id)
		a.outcomes.reload(id, err)
	}
	if err != nil {
		return "", err
	}
	if action != actionStop && !a.Config().ActiveStandby() {
		// The start may have waited as long as the controller did.
		ctx, cancel := renewed(ctx)
		defer cancel()
		a.advertiseVIPs(ctx, id)
	}
	switch {
	case started:
		return "Configuration file is valid\nhaproxy daemon for " + id + " started", nil
	case action == actionReload:
		return "Listener " + id + " reloaded", nil
	default:
		// Sic: upstream's spelling, kept for byte-for-byte answers.
		return "Listener " + id + " stoped", nil
	}
}

// advertiseVIPs sends gratuitous ARP / unsolicited NA for the addresses
// the LB binds, so upstream switches learn the VIP's new home at once. In
// ACTIVE_STANDBY keepalived does this instead.
func (a *Agent) advertiseVIPs(ctx context.Context, lb string) {
	sum, err := a.haproxyLayout().Summary(lb)
	if err != nil || len(sum.BindAddresses) == 0 {
		return
	}
	if err := a.advertise(ctx, a.Config().Namespace, sum.BindAddresses); err != nil {
		a.log.Warn("advertising VIPs", zap.String("lb", lb), zap.Error(err))
	}
}

func (a *Agent) checkScripts() keepalived.CheckScripts {
	return keepalived.CheckScripts{Layout: a.vrrpLayout()}
}

// updateVRRPCheck rewrites keepalived's HAProxy check for every stored
// load balancer except excluded (one being stopped or deleted).
func (a *Agent) updateVRRPCheck(excluded string) error {
	lbs, err := a.haproxyLayout().LoadBalancers()
	if err != nil {
		return fault.Internalf("listing load balancers: %w", err)
	}
	lvs, err := a.lvsLayout().Listeners()
	if err != nil {
		return fault.Internalf("listing LVS listeners: %w", err)
	}
	if err := a.checkScripts().UpdateHAProxyCheck(lbs, excluded, lvs, a.haproxyLayout().SocketPath); err != nil {
		return fault.Internalf("writing the VRRP check script: %w", err)
	}
	return nil
}

// DeleteListener stops a load balancer and removes its config, socket and
// certificates, or a UDP or SCTP listener and its files. An id that names
// neither (unknown, or one of the agent's own folders) succeeds with
// nothing touched: the controller repeats deletes.
func (a *Agent) DeleteListener(ctx context.Context, id string) error {
	return a.exclusive(ctx, func(ctx context.Context) error {
		if a.isLVS(id) {
			return a.deleteLVS(ctx, id)
		}
		if !a.haproxyLayout().Known(id) {
			return nil
		}
		// Refreshed before the folder goes, as upstream: the check leaves this
		// load balancer out but still sees one exists, so deleting the last
		// one leaves a check with no sockets, which passes. Afterwards it
		// would find none and write "exit 1": both amphorae would go to FAULT
		// and drop the VIP.
		vrrp := a.checkScripts().VRRPInUse()
		refreshCheck := func(excluded string) {
			if err := a.updateVRRPCheck(excluded); err != nil {
				a.log.Warn("updating the VRRP check script", zap.String("lb", id), zap.Error(err))
			}
		}
		if vrrp {
			refreshCheck(id)
		}
		err := a.lbs.Delete(ctx, id)
		a.loadBalancerGone(id)
		if err != nil {
			if vrrp {
				// HAProxy did not stop and nothing was removed: check it again.
				refreshCheck("")
			}
			return err
		}
		a.outcomes.forget(id)
		if err := a.certStore().RemoveAll(id, a.lbID); err != nil {
			a.log.Warn("removing certificates", zap.String("lb", id), zap.Error(err))
		}
		return nil
	})
}

// PutCertificate stores a listener certificate and returns its md5.
func (a *Agent) PutCertificate(ctx context.Context, lb, name string, body []byte) (string, error) {
	return locked(a, ctx, func(ctx context.Context) (string, error) {
		return a.certStore().Put(lb, name, body, a.lbID)
	})
}

// CertificateMD5 returns the md5 of a stored certificate.
func (a *Agent) CertificateMD5(ctx context.Context, lb, name string) (string, error) {
	return a.certStore().MD5(lb, name, a.lbID)
}

// DeleteCertificate removes a stored certificate.
func (a *Agent) DeleteCertificate(ctx context.Context, lb, name string) error {
	return a.exclusive(ctx, func(ctx context.Context) error {
		return a.certStore().Delete(lb, name, a.lbID)
	})
}

// ValidateCertificateName applies the certificate file name rules.
func (a *Agent) ValidateCertificateName(name string) error { return certs.ValidateFilename(name) }
