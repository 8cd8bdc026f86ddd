package health

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
