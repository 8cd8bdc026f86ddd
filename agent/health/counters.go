package health

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/amphora-agent/amphora-agent/agent/fsutil"
)

// CountersFile is the counter file's name under base_path, the same file
// the Python agent keeps, so an in-place upgrade keeps counting correctly.
const CountersFile = "stats_counters.json"

// countersMode is upstream's mode for the file: owner rw, group r.
const countersMode = 0o640

// The metrics sent as deltas, with HAProxy's names (the file's keys).
const (
	metricBin  = "bin"
	metricBout = "bout"
	metricEreq = "ereq"
	metricStot = "stot"
)

// Counters holds, per listener, the last absolute value of each delta
// metric. Upstream keeps the entries of deleted listeners for good, so
// its file grows with every listener ever created; here Drop removes
// those of listeners that are gone.
type Counters struct {
	m map[string]map[string]int64
	// seen are the listeners this process took deltas of: only their
	// entries may be dropped, since only for them does it know whether
	// they still count (an entry loaded from the file may belong to a
	// HAProxy that has not answered yet).
	seen    map[string]struct{}
	written []byte // what the file holds after the last successful Save
	// changed says m differs from written (a heartbeat without traffic
	// changes nothing, and then Save neither renders nor compares).
	changed bool
}

// NewCounters is an empty state.
func NewCounters() *Counters {
	return &Counters{m: map[string]map[string]int64{}, seen: map[string]struct{}{}}
}

// CountersPath is the counter file of base_path.
func CountersPath(base string) string { return filepath.Join(base, CountersFile) }

// LoadCounters reads the counter file. A missing file is an empty state; a
// corrupt one is an empty state and an error to log (upstream starts from
// scratch too, which resends the absolute totals once).
func LoadCounters(path string) (*Counters, error) {
	c := NewCounters()
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return c, nil
	}
	var m map[string]map[string]int64
	if err := json.Unmarshal(data, &m); err != nil {
		return c, &os.PathError{Op: "parse", Path: path, Err: err}
	}
	for id, metrics := range m {
		if metrics == nil {
			metrics = map[string]int64{}
		}
		c.m[id] = metrics
	}
	return c, nil
}

type deltas struct{ bin, bout, ereq, stot int64 }

// deltas stores l's absolute counters and returns how much each grew since
// the stored values; a counter that went down (HAProxy restarted, IPVS
// counters reset) reports its current value.
func (c *Counters) deltas(l ListenerReading) deltas {
	if _, ok := c.seen[l.ID]; !ok {
		c.seen[l.ID] = struct{}{}
	}
	return deltas{
		bin:  c.Delta(l.ID, metricBin, l.Bin),
		bout: c.Delta(l.ID, metricBout, l.Bout),
		ereq: c.Delta(l.ID, metricEreq, l.Ereq),
		stot: c.Delta(l.ID, metricStot, l.Stot),
	}
}

// Delta records current as the last value of listener's metric and
// returns current − last, or current when that is negative.
func (c *Counters) Delta(listener, metric string, current uint64) int64 {
	cur := clamp(current)
	lc := c.m[listener]
	if lc == nil {
		lc = map[string]int64{}
		c.m[listener] = lc
	}
	old, ok := lc[metric]
	if !ok || old != cur {
		c.changed = true
	}
	last := max(old, 0)
	lc[metric] = cur
	if d := cur - last; d >= 0 {
		return d
	}
	return cur
}

// Drop removes the entries of the listeners this process took deltas of
// that alive says are gone.
func (c *Counters) Drop(alive func(listener string) bool) {
	for id := range c.seen {
		if !alive(id) {
			delete(c.m, id)
			delete(c.seen, id)
			c.changed = true
		}
	}
}

// dropGoneCounters drops the counters of listeners that no longer count:
// in none of the load balancers the sender follows (their last good
// reading, kept while their HAProxy runs, even one whose socket fails)
// and not among the running LVS listeners. Such a listener's counters
// start from zero should it come back (a new HAProxy process, as any
// reload or start makes, or a new IPVS service), and a missing entry
// reports that just as a stored, higher one does. It only looks when
// there are more entries than listeners in the message (each listener of
// the message has one), and not after an LVS reading that came with an
// error (a listener may be missing from it while still counting).
func (s *Sender) dropGoneCounters(msg Message, lvs Reading, lvsErr error) {
	c := s.builder.Counters()
	if lvsErr != nil || len(c.m) <= len(msg.Listeners) {
		return
	}
	alive := map[string]bool{}
	for _, l := range lvs.Listeners {
		alive[l.ID] = true
	}
	s.mu.Lock()
	for _, e := range s.lbs {
		for _, l := range e.last.Listeners {
			alive[l.ID] = true
		}
	}
	s.mu.Unlock()
	c.Drop(func(id string) bool { return alive[id] })
}

// Marshal renders the state as upstream writes it: one JSON object,
// listener → {"bin": n, "bout": n, "ereq": n, "stot": n}, with Python's
// separators; listeners sorted so the output is stable.
func (c *Counters) Marshal() []byte {
	ids := make([]string, 0, len(c.m))
	for id := range c.m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var b bytes.Buffer
	b.WriteByte('{')
	for i, id := range ids {
		if i > 0 {
			b.WriteString(", ")
		}
		writeKey(&b, id)
		b.WriteByte('{')
		metrics := make([]string, 0, len(c.m[id]))
		for k := range c.m[id] {
			metrics = append(metrics, k)
		}
		sort.Strings(metrics)
		for j, k := range metrics {
			if j > 0 {
				b.WriteString(", ")
			}
			writeKey(&b, k)
			b.WriteString(strconv.FormatInt(c.m[id][k], 10))
		}
		b.WriteByte('}')
	}
	b.WriteByte('}')
	return b.Bytes()
}

func writeKey(b *bytes.Buffer, k string) {
	q, _ := json.Marshal(k)
	b.Write(q)
	b.WriteString(": ")
}

// Save writes the state to path atomically (temp file, rename) with mode
// 0640. It skips the write when the file already holds exactly this state
// from an earlier Save. Nothing is fsync'd (upstream does not either): an
// agent restart finds the file in the page cache, and only power loss can
// lose a write, after which HAProxy's counters restart from zero too, so
// every counter is below the stored one and Delta reports it whole, with
// an old, new or empty file alike. Two fsyncs per heartbeat under traffic
// would cost more than the rest of the cycle.
func (c *Counters) Save(path string) error {
	if c.written != nil && !c.changed {
		return nil
	}
	data := c.Marshal()
	if c.written == nil || !bytes.Equal(data, c.written) {
		if err := fsutil.Write(path, data, countersMode, fsutil.Atomic); err != nil {
			return err
		}
	}
	c.written, c.changed = data, false
	return nil
}

// clamp converts a counter to int64, saturating (a JSON integer the HM's
// database accepts).
func clamp(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}
