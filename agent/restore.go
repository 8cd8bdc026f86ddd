package agent

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"
)

// RestoreOptions connect the start-up restore to the process around it.
type RestoreOptions struct {
	// Progress hears each step as it begins (the binary tells systemd);
	// nil ignores it.
	Progress func(step string)
	// Go runs fn in the background; the caller stops it through the
	// context given to Restore and joins it before exiting.
	Go func(name string, fn func() error)
	// NoDataPlane says why this process cannot build the data-plane
	// namespace (not root), "" when it can.
	NoDataPlane string
}

// Restore brings back what the amphora ran before a reboot or an agent
// restart, in the order the data plane needs. The network namespace and
// the plugged ports come back before Restore returns, so whatever the
// caller starts next (the API, the heartbeat) finds them; a plugged NIC
// that is not back yet is adopted in the background when it appears.
// Then, in the background so that the API answers meanwhile, the load
// balancers, the UDP and SCTP listeners and last the VRRP keepalived come
// back, each under the mutation lock so controller requests wait.
//
// A failed step is logged and the next one still runs: the controller
// must reach the API to repair the amphora or fail it over, so nothing
// here ends the agent. The returned channel receives every step's error
// joined (nil when all came back) once the last step ended; the
// background job named "restore" ends with those of the daemons only,
// as the network's was logged already.
func (a *Agent) Restore(ctx context.Context, o RestoreOptions) <-chan error {
	progress := o.Progress
	if progress == nil {
		progress = func(string) {}
	}
	progress("restoring network namespace")
	netErr := a.restoreNetwork(ctx, o)
	done := make(chan error, 1)
	o.Go("restore", func() error {
		err := a.restoreDaemons(ctx, progress)
		done <- errors.Join(netErr, err)
		return err
	})
	return done
}

// restoreNetwork brings the namespace and the plugged ports back, unless
// this process cannot build the namespace: then one line says what will
// not work instead of a netlink error (`make run` as a user).
func (a *Agent) restoreNetwork(ctx context.Context, o RestoreOptions) error {
	if o.NoDataPlane != "" {
		a.log.Warn(fmt.Sprintf("%s: the data-plane namespace %s cannot be made, so plugging NICs and running load balancers or keepalived will fail; the API, configuration and heartbeats work",
			o.NoDataPlane, a.Config().Namespace))
		return nil
	}
	err := a.prepareNetwork(ctx)
	o.Go("late ports", func() error { a.watchLatePorts(ctx, latePortsFor); return nil })
	return err
}

// restoreDaemons runs the steps after the network, in order: the VRRP
// keepalived last, since its check tracks the load balancers and the
// listeners.
func (a *Agent) restoreDaemons(ctx context.Context, progress func(string)) error {
	steps := []struct {
		status string
		run    func(context.Context) error
	}{
		{"restoring load balancers", a.lbs.Restore},
		{"restoring UDP and SCTP listeners", a.lvs.Restore},
		{"restoring keepalived", a.vrrp.Restore},
	}
	var errs []error
	for _, s := range steps {
		progress(s.status)
		if err := a.exclusive(ctx, s.run); err != nil {
			a.log.Error(s.status, zap.Error(err))
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
