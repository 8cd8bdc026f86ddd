package netns

import (
	"context"
	"time"
)

// What the external tests (package netns_test) need of the inside; they
// are external because they use netnstest's kernel, which imports netns.

// RenderBaseRules is the drop-all rules file.
var RenderBaseRules = renderBaseRules

// NoWaits makes n's waits for the kernel return at once, so that unit
// tests against a fake kernel never sleep.
func NoWaits(n *Network) {
	n.conf.wait = func(ctx context.Context, d time.Duration) error { return ctx.Err() }
}
