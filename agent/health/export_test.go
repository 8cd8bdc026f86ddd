package health

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/amphora-agent/amphora-agent/haproxy/stats"
)

// Exported for tests only.

// Wrap builds the datagram of doc as Encode does for a message's
// document. The returned slice is valid until the next call.
func (e *Encoder) Wrap(doc []byte, key string) ([]byte, error) { return e.wrap(doc, nil, key) }

// Wrap is Encoder.Wrap with a fresh encoder; the result is the caller's.
func Wrap(doc []byte, key string) ([]byte, error) {
	var e Encoder
	out, err := e.Wrap(doc, key)
	return bytes.Clone(out), err
}

// MarshalJSON makes encoding/json write what the agent sends (see
// appendMessage): empty collections as {}, never null. It is the
// reference the hand-written encoder is checked against.
func (m Message) MarshalJSON() ([]byte, error) {
	type plain Message
	if m.Listeners == nil {
		m.Listeners = map[string]Listener{}
	}
	if m.Pools == nil {
		m.Pools = map[string]Pool{}
	}
	return json.Marshal(plain(m))
}

// MarshalJSON writes a pool without members as {"members": {}}.
func (p Pool) MarshalJSON() ([]byte, error) {
	type plain Pool
	if p.Members == nil {
		p.Members = map[string]string{}
	}
	return json.Marshal(plain(p))
}

// FromRows is fromRows keeping every string as it is, with fresh scratch.
func FromRows(rows []stats.Row) (Reading, error) {
	return fromRows(rows, func(s string) string { return s }, &rowScratch{})
}

// NoLVS is the LVSSource of an amphora that has no LVS listeners at all.
type NoLVS struct{}

func (NoLVS) LVS(context.Context) (Reading, error) { return Reading{}, nil }

// StatusOpen is a listener's status as HAProxy reports it.
const StatusOpen = "OPEN"

// Last returns the stored value of listener's metric.
func (c *Counters) Last(listener, metric string) (int64, bool) {
	v, ok := c.m[listener][metric]
	return v, ok
}

// NextSeq is the number the next built message will carry.
func (b *Builder) NextSeq() uint64 { return b.seq }

// isUnresponsive reports whether lb's last read took the slow-read limit.
func (s *Sender) isUnresponsive(lb string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lbs[lb]
	return e != nil && e.unresponsive
}

// readEnded waits up to timeout for lb's read under way, if any, to end.
func (s *Sender) readEnded(lb string, timeout time.Duration) bool {
	s.mu.Lock()
	var rd *inflight
	if e := s.lbs[lb]; e != nil {
		rd = e.reading
	}
	s.mu.Unlock()
	if rd == nil {
		return true
	}
	select {
	case <-rd.done:
		return true
	case <-time.After(timeout):
		return false
	}
}
