package health

import "time"

// Exported for tests only.

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
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	return s.unresponsive[lb]
}

// readEnded waits up to timeout for lb's read under way, if any, to end.
func (s *Sender) readEnded(lb string, timeout time.Duration) bool {
	s.cacheMu.Lock()
	rd := s.reading[lb]
	s.cacheMu.Unlock()
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
