// Package caller lets a step that runs detached from the request that
// asked for it (so that a client hanging up never leaves a change half
// done) still see whether that client waits for the answer: a start the
// controller asked for waits for readiness, and a config check runs, for
// as long as the client does, as upstream's blocking systemctl and
// haproxy -c do.
package caller

import "context"

type key struct{}

// With records ctx as the context of the client that asked; it stays
// reachable through contexts derived from the result, also detached ones
// (context.WithoutCancel keeps values).
func With(ctx context.Context) context.Context {
	return context.WithValue(ctx, key{}, ctx)
}

// Of returns the context With recorded; ok is false when no client asked
// (a restore at boot, a respawn).
func Of(ctx context.Context) (c context.Context, ok bool) {
	c, ok = ctx.Value(key{}).(context.Context)
	return c, ok && c != nil
}

// Without is ctx with no client recorded: what runs under it is bounded
// as if the agent had asked for it itself.
func Without(ctx context.Context) context.Context {
	return context.WithValue(ctx, key{}, nil)
}

// Or returns the client's context when one is recorded, else ctx.
func Or(ctx context.Context) context.Context {
	if c, ok := Of(ctx); ok {
		return c
	}
	return ctx
}
