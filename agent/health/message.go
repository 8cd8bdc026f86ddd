package health

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/amphora-agent/amphora-agent/haproxy/stats"
)

// Version is the message format version the agent sends (counters are
// deltas since version 3).
const Version = 3

// Message is one heartbeat. Every key is always present: the HM fails on a
// message without `listeners` or `pools`.
type Message struct {
	ID        string              `json:"id"`
	Seq       uint64              `json:"seq"`
	Listeners map[string]Listener `json:"listeners"`
	Pools     map[string]Pool     `json:"pools"`
	Ver       int                 `json:"ver"`

	// poolsAsBefore says Pools (and Ver) are those of the message the
	// same reusing Builder built last, so that an Encoder that wrote that
	// one can keep its pools part.
	poolsAsBefore bool
}

// Listener is a listener's entry: its status (OPEN, FULL, STOP, ...) and
// its statistics.
type Listener struct {
	Status string `json:"status"`
	Stats  Stats  `json:"stats"`
}

// Stats are a listener's statistics: Conns is absolute, the others are
// deltas since the previous heartbeat. All are non-negative.
type Stats struct {
	TX       int64 `json:"tx"`
	RX       int64 `json:"rx"`
	Conns    int64 `json:"conns"`
	TotConns int64 `json:"totconns"`
	Ereq     int64 `json:"ereq"`
}

// Pool is a pool's entry: UP or DOWN, and member id → status string.
type Pool struct {
	Status  string            `json:"status"`
	Members map[string]string `json:"members"`
}

// Reading is what one source (an LB's HAProxy, or the LVS listeners)
// reported at one moment, with absolute counters, in report order.
type Reading struct {
	Listeners []ListenerReading
	Pools     []PoolReading
	// Skipped names backends left out because their name is not
	// <pool>:<listener> or they had no BACKEND row.
	Skipped []string
}

// ListenerReading is one listener with HAProxy's counter names.
type ListenerReading struct {
	ID     string
	Status string
	Bin    uint64 // bytes from clients → rx
	Bout   uint64 // bytes to clients → tx
	Scur   uint64 // current sessions → conns
	Stot   uint64 // cumulative sessions → totconns
	Ereq   uint64 // request errors → ereq
}

// PoolReading is one pool: Key is `<pool>:<listener>` for HAProxy backends
// and the bare pool id for LVS listeners.
type PoolReading struct {
	Key     string
	Status  string
	Members []MemberReading
}

// MemberReading is one member and its status string.
type MemberReading struct {
	ID     string
	Status string
}

// Status strings the agent produces or rewrites.
const (
	StatusUp    = "UP"
	StatusDrain = "DRAIN"
)

// excluded reports whether a proxy is internal and must never be reported
// (the Prometheus exporter frontend and backend the controller renders).
func excluded(pxname string) bool { return strings.Contains(pxname, "prometheus") }

// rowScratch is what fromRows may reuse from one reading to the next.
// The members of the reading it returns lie in sc.members: the caller
// must detach them (settle) before the next call.
type rowScratch struct {
	members    []MemberReading
	pools      map[string]int // backend name → index in r.Pools
	backendRow []bool         // by index in r.Pools: its BACKEND row came
}

// fromRows turns the rows of `show stat -1 -1 -1` into a Reading:
//   - rows of proxies whose name contains "prometheus" are dropped;
//   - each FRONTEND row is a listener (status verbatim, counters parsed);
//   - other rows are grouped by backend: the BACKEND row gives the pool
//     status, every server row a member with its status verbatim, except
//     that exactly "UP" with weight exactly "0" is DRAIN (Octavia drains
//     a member by setting its weight to 0).
//
// A backend whose name is not <pool>:<listener> or that has no BACKEND row
// is skipped and named in Skipped. A FRONTEND row with an unparsable
// counter fails the whole reading: guessing would corrupt the deltas.
//
// Every string the reading keeps passes through keep (see names), and
// members are cut out of sc.
func fromRows(rows []stats.Row, keep func(string) string, sc *rowScratch) (Reading, error) {
	var r Reading
	if len(rows) == 0 {
		return r, nil
	}
	if sc.pools == nil {
		sc.pools = map[string]int{}
	}
	clear(sc.pools)
	pools, backendRow := sc.pools, sc.backendRow[:0]
	// Every row of one answer shares its header: find the columns once.
	// A row is cut only at what every row needs (row); a FRONTEND row
	// also at the listener's counters (front).
	var row, front picker
	row.init(rows[0], cPx, cSv, cStatus, cWeight)
	front.init(rows[0], cBin, cBout, cScur, cStot, cEreq)
	lastPool := -1
	lastPx, skip := "", false
	// Pools' members are cut from one array (no row is two members) in the
	// order pools appear: the last pool cut grows into the rest of it, and
	// its capacity is capped once another pool's rows come, so that a
	// backend whose rows come apart copies only its own members.
	if cap(sc.members) < len(rows) {
		sc.members = make([]MemberReading, 0, len(rows))
	}
	all := sc.members[:0]
	tail := -1 // the pool growing into all
	for _, rw := range rows {
		row.read(rw)
		px := row.get(cPx)
		if px != lastPx { // a proxy's rows come together
			lastPx, skip = px, excluded(px)
		}
		if skip {
			continue
		}
		switch sv := row.get(cSv); sv {
		case stats.Frontend:
			l := ListenerReading{ID: keep(px), Status: keep(row.get(cStatus))}
			if err := readCounters(&front, rw, &l); err != nil {
				return Reading{}, fmt.Errorf("%s %s: %w", px, sv, err)
			}
			r.Listeners = append(r.Listeners, l)
		default:
			// A backend's rows come together: most rows need no lookup.
			i := lastPool
			if i < 0 || r.Pools[i].Key != px {
				if tail >= 0 {
					m := r.Pools[tail].Members
					r.Pools[tail].Members, tail = m[:len(m):len(m)], -1
				}
				var ok bool
				if i, ok = pools[px]; !ok {
					i, tail = len(r.Pools), len(r.Pools)
					pools[px] = i
					backendRow = append(backendRow, false)
					r.Pools = append(r.Pools, PoolReading{Key: keep(px), Members: all[len(all):]})
				}
				lastPool = i
			}
			if sv == stats.Backend {
				r.Pools[i].Status = keep(row.get(cStatus))
				backendRow[i] = true
				continue
			}
			status := row.get(cStatus)
			if status == StatusUp && row.get(cWeight) == "0" {
				status = StatusDrain
			}
			r.Pools[i].Members = append(r.Pools[i].Members, MemberReading{ID: keep(sv), Status: keep(status)})
			if i == tail {
				all = all[:len(all)+1]
			}
		}
	}
	sc.backendRow = backendRow
	skipIncomplete(&r, backendRow)
	return r, nil
}

// readCounters parses a FRONTEND row's counters into l; an unparsable one
// fails the reading.
func readCounters(front *picker, rw stats.Row, l *ListenerReading) error {
	front.read(rw)
	for _, c := range [...]struct {
		col int
		dst *uint64
	}{{cBin, &l.Bin}, {cBout, &l.Bout}, {cScur, &l.Scur}, {cStot, &l.Stot}, {cEreq, &l.Ereq}} {
		v := front.get(c.col)
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return fmt.Errorf("column %s = %q is not a counter", colNames[c.col], v)
		}
		*c.dst = n
	}
	return nil
}

// skipIncomplete moves the pools without a BACKEND row (by index in
// backendRow) or not named <pool>:<listener> from r.Pools to r.Skipped.
func skipIncomplete(r *Reading, backendRow []bool) {
	kept := r.Pools[:0]
	for i, p := range r.Pools {
		if !backendRow[i] || strings.Count(p.Key, ":") != 1 {
			r.Skipped = append(r.Skipped, p.Key)
			continue
		}
		kept = append(kept, p)
	}
	r.Pools = kept
}

// picker cuts some columns out of rows sharing one header.
type picker struct {
	at   [nCols]int // the columns' indices in the row, ascending: at[:n]
	n    int
	slot [nCols]int // for each column of colNames, its place in at, or -1
	vals [nCols]string
}

// init makes p cut the columns cs (positions in colNames) out of rows
// with the header of first; a column the header lacks reads as "".
func (p *picker) init(first stats.Row, cs ...int) {
	for i := range p.slot {
		p.slot[i] = -1
	}
	p.n = 0
	for _, c := range cs {
		if i := first.Column(colNames[c]); i >= 0 {
			p.at[p.n] = i
			p.n++
		}
	}
	at := p.at[:p.n]
	slices.Sort(at)
	for _, c := range cs {
		if i := first.Column(colNames[c]); i >= 0 {
			p.slot[c], _ = slices.BinarySearch(at, i)
		}
	}
}

func (p *picker) read(r stats.Row) { r.FieldsAt(p.vals[:], p.at[:p.n]) }

// get returns column c (a position in colNames) of the row read last.
func (p *picker) get(c int) string {
	if k := p.slot[c]; k >= 0 {
		return p.vals[k]
	}
	return ""
}

// The columns fromRows reads, by position in colNames.
const (
	cPx = iota
	cSv
	cStatus
	cWeight
	cBin
	cBout
	cScur
	cStot
	cEreq
	nCols
)

var colNames = [nCols]string{stats.ColPxName, stats.ColSvName, stats.ColStatus, stats.ColWeight,
	stats.ColBin, stats.ColBout, stats.ColScur, stats.ColStot, stats.ColEreq}

// counts sums what a message carries, for log lines.
type counts struct {
	LoadBalancers, Listeners, Pools, Members int
}

// Builder assembles messages: it numbers them and turns absolute counters
// into deltas.
type Builder struct {
	seq      uint64
	counters *Counters

	// reuse makes Build fill the maps of the message it built last
	// instead of new ones (the sender's messages live for one cycle;
	// thousands of map entries a heartbeat were most of its garbage).
	reuse     bool
	listeners map[string]Listener
	pools     map[string]Pool
	members   map[string]map[string]string // pool key → its members map
	// last is the pools of each reading of the last message, while its
	// maps hold them (readings are never changed once made).
	last   [][]PoolReading
	lastOK bool
}

// reusing is NewBuilder for a caller that is done with each message
// before asking for the next: every message shares the maps of the last.
func reusing(counters *Counters) *Builder {
	b := NewBuilder(counters)
	b.reuse = true
	return b
}

// NewBuilder starts numbering at 0 and takes deltas against counters.
func NewBuilder(counters *Counters) *Builder {
	if counters == nil {
		counters = NewCounters()
	}
	return &Builder{counters: counters}
}

// Counters is the delta state the builder updates.
func (b *Builder) Counters() *Counters { return b.counters }

// Build makes the next message from the readings of the load balancers
// (in order) and then the LVS listeners. It consumes one sequence number.
func (b *Builder) Build(amphoraID string, readings ...Reading) Message {
	msg := Message{ID: amphoraID, Seq: b.seq, Ver: Version}
	b.seq++
	if b.reuse {
		if b.listeners == nil {
			b.listeners, b.pools, b.members = map[string]Listener{}, map[string]Pool{}, map[string]map[string]string{}
		}
		clear(b.listeners)
		msg.Listeners, msg.Pools = b.listeners, b.pools
		if b.lastOK && samePools(b.last, readings) {
			// The maps hold these pools already.
			msg.poolsAsBefore = true
		} else {
			clear(b.pools)
			b.lastOK = false
		}
	} else {
		msg.Listeners, msg.Pools = map[string]Listener{}, map[string]Pool{}
	}
	for _, r := range readings {
		for _, l := range r.Listeners {
			d := b.counters.deltas(l)
			msg.Listeners[l.ID] = Listener{Status: l.Status, Stats: Stats{
				TX: d.bout, RX: d.bin, Conns: clamp(l.Scur), TotConns: d.stot, Ereq: d.ereq,
			}}
		}
		if msg.poolsAsBefore {
			continue
		}
		for _, p := range r.Pools {
			var members map[string]string
			if b.reuse {
				members = b.members[p.Key]
				clear(members)
			}
			if members == nil {
				members = make(map[string]string, len(p.Members))
				if b.reuse {
					b.members[p.Key] = members
				}
			}
			for _, m := range p.Members {
				members[m.ID] = m.Status
			}
			msg.Pools[p.Key] = Pool{Status: p.Status, Members: members}
		}
	}
	if b.reuse && !msg.poolsAsBefore {
		for k := range b.members {
			if _, ok := msg.Pools[k]; !ok {
				delete(b.members, k)
			}
		}
		b.last = b.last[:0]
		for _, r := range readings {
			b.last = append(b.last, r.Pools)
		}
		b.lastOK = true
	}
	return msg
}

// samePools reports whether readings have exactly the pools of last, in
// the same order.
func samePools(last [][]PoolReading, readings []Reading) bool {
	if len(last) != len(readings) {
		return false
	}
	for i, r := range readings {
		if !equalPools(r.Pools, last[i]) {
			return false
		}
	}
	return true
}

// equalPools reports whether a and b hold the same pools and members in
// the same order. Names kept from one reading to the next are the same
// strings, so most comparisons stop at the pointer.
func equalPools(a, b []PoolReading) bool {
	if len(a) != len(b) {
		return false
	}
	for j, p := range a {
		q := b[j]
		if p.Key != q.Key || p.Status != q.Status || !slices.Equal(p.Members, q.Members) {
			return false
		}
	}
	return true
}

// settle detaches the pools of a reading fromRows made from its scratch:
// if they equal prev (the LB's last reading; its pools are never changed)
// the reading shares prev's, so that a steady LB allocates nothing for
// its members; otherwise they are copied into one new array.
func settle(pools, prev []PoolReading) []PoolReading {
	if prev != nil && equalPools(pools, prev) {
		return prev
	}
	n := 0
	for _, p := range pools {
		n += len(p.Members)
	}
	all := make([]MemberReading, 0, n)
	for i, p := range pools {
		all = append(all, p.Members...)
		pools[i].Members = all[len(all)-len(p.Members) : len(all) : len(all)]
	}
	return pools
}

func countReadings(lbs int, readings []Reading) counts {
	c := counts{LoadBalancers: lbs}
	for _, r := range readings {
		c.Listeners += len(r.Listeners)
		c.Pools += len(r.Pools)
		for _, p := range r.Pools {
			c.Members += len(p.Members)
		}
	}
	return c
}
