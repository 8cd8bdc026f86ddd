package agent

import (
	"context"
	"sync"
)

// coalescer merges identical requests that wait for the mutation lock:
// every request that arrived before the run got the lock is answered with
// its result. A request arriving after that waits for a run of its own,
// since the state it expects may be newer than what the running one sees.
//
// A run belongs to no single caller: it waits for the lock as long as any
// caller still waits for it, and once it holds the lock it completes even
// if every caller has gone.
type coalescer struct {
	mu      sync.Mutex
	pending map[string]*coalesced
}

type coalesced struct {
	done    chan struct{}
	abandon context.CancelFunc
	waiters int
	locked  bool // the run holds the lock: it no longer takes joiners
	result  string
	err     error
}

// do runs fn for key, or joins a run that has not taken the lock yet. fn
// waits for the lock with wait (which ends when every caller has given
// up) and must call holding as soon as it holds the lock.
func (c *coalescer) do(ctx context.Context, key string, fn func(wait context.Context, holding func()) (string, error)) (string, error) {
	c.mu.Lock()
	if c.pending == nil {
		c.pending = map[string]*coalesced{}
	}
	call, joined := c.pending[key]
	if !joined {
		wait, abandon := context.WithCancel(context.WithoutCancel(ctx))
		call = &coalesced{done: make(chan struct{}), abandon: abandon}
		c.pending[key] = call
		go c.run(key, call, wait, fn)
	}
	call.waiters++
	c.mu.Unlock()

	select {
	case <-call.done:
		return call.result, call.err
	case <-ctx.Done():
		c.mu.Lock()
		call.waiters--
		if call.waiters == 0 {
			// Nobody wants it any more: one that changed nothing yet
			// gives up, one under way stops waiting for what only its
			// callers wait for (caller.Of) and runs to its end.
			call.abandon()
			if !call.locked && c.pending[key] == call {
				delete(c.pending, key)
			}
		}
		c.mu.Unlock()
		return "", errAbandoned(ctx)
	}
}

func (c *coalescer) run(key string, call *coalesced, wait context.Context, fn func(context.Context, func()) (string, error)) {
	defer call.abandon()
	unlist := func() {
		c.mu.Lock()
		if c.pending[key] == call {
			delete(c.pending, key)
		}
		call.locked = true
		c.mu.Unlock()
	}
	call.result, call.err = fn(wait, unlist)
	unlist()
	close(call.done)
}
