package health

import (
	"sync"
	"time"
)

// State is what an operator sees of the sender (`amphora-agent status`).
type State struct {
	LastSendAt  time.Time
	Destination string // of the last datagram sent
	Seq         uint64 // of the last message built
	// LastResult is "sent" or why the last cycle sent nothing.
	LastResult string
	// Suppressed is why heartbeats are withheld now ("" when they are not).
	Suppressed string
}

// stateRecord is the sender's State, written by the loop and read from
// any goroutine.
type stateRecord struct {
	mu sync.Mutex
	s  State
}

func (r *stateRecord) update(fn func(*State)) {
	r.mu.Lock()
	fn(&r.s)
	r.mu.Unlock()
}

// withheld records a cycle that sent nothing on purpose.
func (r *stateRecord) withheld(why string) {
	r.update(func(s *State) { s.Suppressed, s.LastResult = why, "not sent: "+why })
}

// failed records a cycle whose datagram did not leave.
func (r *stateRecord) failed(why string) { r.update(func(s *State) { s.LastResult = why }) }

// State returns the sender's state; safe from any goroutine.
func (s *Sender) State() State {
	s.state.mu.Lock()
	defer s.state.mu.Unlock()
	return s.state.s
}
