package agent

import (
	"context"
	"sync"

	"github.com/amphora-agent/amphora-agent/agent/fault"
)

// coalescer merges identical requests that wait for the mutation lock:
// every request that arrived before the leader got the lock is answered
// with the leader's result. A request arriving after that waits for a run
// of its own, since the state it expects may be newer than what the
// running one sees.
type coalescer struct {
	mu      sync.Mutex
	pending map[string]*coalesced
}

type coalesced struct {
	done   chan struct{}
	result string
	err    error
}

// do runs fn for key, or joins a run that has not started yet. fn must
// call detach as soon as it holds the lock.
func (c *coalescer) do(ctx context.Context, key string, fn func(detach func()) (string, error)) (string, error) {
	c.mu.Lock()
	if c.pending == nil {
		c.pending = map[string]*coalesced{}
	}
	call, joined := c.pending[key]
	if !joined {
		call = &coalesced{done: make(chan struct{})}
		c.pending[key] = call
	}
	c.mu.Unlock()
	if joined {
		select {
		case <-call.done:
			return call.result, call.err
		case <-ctx.Done():
			return "", fault.Internal("Agent busy", "timed out waiting for a request in progress", ctx.Err())
		}
	}
	detached := false
	detach := func() {
		c.mu.Lock()
		if c.pending[key] == call {
			delete(c.pending, key)
		}
		detached = true
		c.mu.Unlock()
	}
	call.result, call.err = fn(detach)
	if !detached {
		detach()
	}
	close(call.done)
	return call.result, call.err
}
