package netns

import (
	"context"
	"errors"
	"fmt"
	"os"

	"go.uber.org/zap"
)

// WriteLoFile writes lo.json, as upstream's agent does at start-up.
func (n *Network) WriteLoFile() error { return WriteInterfaceFile(n.cfg.NetworkDir, LoFile()) }

// Restore brings the data plane back after a reboot or an agent restart:
// the namespace is ensured, every port of the plugged-interfaces file that
// is back in the agent's namespace is moved into it under its recorded
// name, and every interface file is applied (`interface up all`). Ports
// that are gone are logged; one failing interface does not stop the
// others. What the upstream image did with its amphora-netns unit.
func (n *Network) Restore(ctx context.Context) error {
	if err := n.WriteLoFile(); err != nil {
		n.log.Warn("cannot write lo.json", zap.Error(err))
	}
	if err := n.kernel.EnsureNamespace(n.cfg.Namespace); err != nil {
		return fmt.Errorf("network namespace %s: %w", n.cfg.Namespace, err)
	}
	plugged, err := ReadPlugged(n.cfg.PluggedFile)
	if err != nil {
		return err
	}
	var errs []error
	if len(plugged) > 0 {
		if err := n.movePlugged(plugged); err != nil {
			errs = append(errs, err)
		}
	}
	// The VIP firewall comes back before the interfaces do, so the VIP is
	// never reachable unfiltered. Upstream reloaded it only for SR-IOV
	// ports; any rules the controller set are restored here.
	if _, err := os.Stat(n.cfg.NftablesFile); err == nil {
		if err := n.rules.ensureBase(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := n.Interfaces(ctx, "up", "all"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (n *Network) movePlugged(plugged []Plugged) error {
	host, err := n.kernel.Open("")
	if err != nil {
		return err
	}
	defer host.Close()
	inside, err := n.kernel.Open(n.cfg.Namespace)
	if err != nil {
		return err
	}
	defer inside.Close()
	var errs []error
	for _, p := range plugged {
		if _, ok, err := linkByMAC(inside, p.MAC); err != nil {
			errs = append(errs, err)
			continue
		} else if ok {
			continue
		}
		l, ok, err := linkByMAC(host, p.MAC)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			n.log.Warn("plugged interface not present; not restored", zap.Stringer("mac", p.MAC), zap.String("name", p.Name))
			continue
		}
		if err := host.Move(l.Index, n.cfg.Namespace, p.Name); err != nil {
			errs = append(errs, fmt.Errorf("move %s into %s as %s: %w", l.Name, n.cfg.Namespace, p.Name, err))
			continue
		}
		n.log.Info("plugged interface restored into the namespace", zap.String("from", l.Name), zap.String("name", p.Name), zap.Stringer("mac", p.MAC))
	}
	return errors.Join(errs...)
}

// Interfaces is `interface up|down <name|all>`: it applies (or takes
// down) the named interface file, or all of them.
func (n *Network) Interfaces(ctx context.Context, action, name string) error {
	var fn func(context.Context, *InterfaceFile) error
	switch action {
	case "up":
		fn = n.conf.up
	case "down":
		fn = n.conf.down
	default:
		return fmt.Errorf("unknown action %q", action)
	}
	var files []*InterfaceFile
	var errs []error
	if name == "all" {
		all, err := ReadInterfaceFiles(n.cfg.NetworkDir)
		if err != nil {
			errs = append(errs, err)
		}
		files = all
	} else {
		f, err := ReadInterfaceFile(n.cfg.NetworkDir, name)
		if err != nil {
			return fmt.Errorf("could not find interface %q: %w", name, err)
		}
		files = []*InterfaceFile{f}
	}
	for _, f := range files {
		if err := fn(ctx, f); err != nil {
			errs = append(errs, fmt.Errorf("action %s on interface %s: %w", action, f.Name, err))
		}
	}
	return errors.Join(errs...)
}
