package netns

import (
	"fmt"
	"os/exec"
	"runtime"

	"github.com/vishvananda/netns"
)

// StartIn starts cmd inside the named network namespace. The child is
// forked from an OS thread that is switched into the namespace just for
// the fork; the thread is switched back afterwards, and if that fails it
// is left locked so the runtime retires it instead of reusing it in the
// wrong namespace. An empty name starts cmd in the current namespace.
func StartIn(namespace string, cmd *exec.Cmd) error {
	if namespace == "" {
		return cmd.Start()
	}
	target, err := netns.GetFromName(namespace)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", namespace, err)
	}
	defer target.Close()

	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("current network namespace: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("entering network namespace %s: %w", namespace, err)
	}
	startErr := cmd.Start()
	if err := netns.Set(orig); err != nil {
		// Keep the thread locked: it dies with this goroutine.
		return fmt.Errorf("leaving network namespace %s: %w (start: %v)", namespace, err, startErr)
	}
	runtime.UnlockOSThread()
	return startErr
}
