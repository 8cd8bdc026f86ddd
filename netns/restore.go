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
// whose NIC is not back yet are logged and left to AdoptLatePorts; one
// failing interface does not stop the others. What the upstream image did with its amphora-netns unit.
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
	// A port whose NIC is not back yet is brought up by AdoptLatePorts
	// once it appears, not reported as a failure now.
	late := map[string]bool{}
	if len(plugged) > 0 {
		_, missing, err := n.movePlugged(plugged)
		if err != nil {
			errs = append(errs, err)
		}
		for _, p := range missing {
			late[p.Name] = true
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
	if err := n.interfaces(ctx, "up", "all", late); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// movePlugged moves every plugged port whose NIC is in the agent's
// namespace into the data-plane namespace under its recorded name. It
// returns the names it moved and the ports whose NIC is in neither.
func (n *Network) movePlugged(plugged []Plugged) (moved []string, missing []Plugged, err error) {
	host, err := n.kernel.Open("")
	if err != nil {
		return nil, nil, err
	}
	defer host.Close()
	inside, err := n.kernel.Open(n.cfg.Namespace)
	if err != nil {
		return nil, nil, err
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
			n.log.Warn("plugged interface not present yet", zap.Stringer("mac", p.MAC), zap.String("name", p.Name))
			missing = append(missing, p)
			continue
		}
		if err := host.Move(l.Index, n.cfg.Namespace, p.Name); err != nil {
			errs = append(errs, fmt.Errorf("move %s into %s as %s: %w", l.Name, n.cfg.Namespace, p.Name, err))
			continue
		}
		moved = append(moved, p.Name)
		n.log.Info("plugged interface restored into the namespace", zap.String("from", l.Name), zap.String("name", p.Name), zap.Stringer("mac", p.MAC))
	}
	return moved, missing, errors.Join(errs...)
}

// AdoptLatePorts finishes the restore of plugged ports whose NIC was not
// back when Restore ran (a NIC that enumerates late after a reboot): each
// one now in the agent's namespace is moved in and brought up from its
// interface file. It returns the ports still missing; with rescan set it
// also asks for a PCI rescan when some are.
func (n *Network) AdoptLatePorts(ctx context.Context, rescan bool) ([]Plugged, error) {
	plugged, err := ReadPlugged(n.cfg.PluggedFile)
	if err != nil || len(plugged) == 0 {
		return nil, err
	}
	moved, missing, err := n.movePlugged(plugged)
	errs := []error{err}
	for _, name := range moved {
		errs = append(errs, n.interfaces(ctx, "up", name, nil))
	}
	if len(missing) > 0 && rescan {
		n.pciRescan()
	}
	return missing, errors.Join(errs...)
}

// Interfaces is the operator's `interface up|down <name|all>`: it applies
// (or takes down) the named interface file, or all of them. Its up runs
// every up-script, also on a link already up.
func (n *Network) Interfaces(ctx context.Context, action, name string) error {
	if action == "up" {
		action = "up-all"
	}
	return n.interfaces(ctx, action, name, nil)
}

// interfaces applies action to the named file, or to all of them but
// those in skip when name is "all". The agent's own "up" runs up-scripts
// only for a link that comes up.
func (n *Network) interfaces(ctx context.Context, action, name string, skip map[string]bool) error {
	var fn func(context.Context, *InterfaceFile) error
	switch action {
	case "up":
		fn = n.conf.up
	case "up-all":
		fn, action = n.conf.upAll, "up"
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
		f, err := findInterfaceFile(n.cfg.NetworkDir, name)
		if err != nil {
			return err
		}
		files = []*InterfaceFile{f}
	}
	for _, f := range files {
		if skip[f.Name] {
			continue
		}
		if err := fn(ctx, f); err != nil {
			errs = append(errs, fmt.Errorf("action %s on interface %s: %w", action, f.Name, err))
		}
	}
	return errors.Join(errs...)
}

// findInterfaceFile returns the file of dir that describes the interface
// called name. As upstream, the name is looked up among the files the
// folder holds, never turned into a path: "../x" cannot reach a file
// elsewhere. Files that cannot be read are skipped (reported only when
// the name is not found).
func findInterfaceFile(dir, name string) (*InterfaceFile, error) {
	files, err := ReadInterfaceFiles(dir)
	for _, f := range files {
		if f.Name == name {
			return f, nil
		}
	}
	msg := fmt.Sprintf("could not find interface %q among the interface files of %s", name, dir)
	if err != nil {
		return nil, fmt.Errorf("%s (%w)", msg, err)
	}
	return nil, errors.New(msg)
}
