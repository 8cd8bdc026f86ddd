// Package promex turns the page of HAProxy's built-in Prometheus exporter
// into the page Octavia's PROMETHEUS listeners serve, line by line, as
// upstream's prometheus-proxy does: HAProxy's metric names become
// Octavia's (octavia_loadbalancer_*, octavia_listener_*, octavia_pool_*,
// octavia_member_*), the proxy and server labels become listener, pool
// and member labels, some HELP texts are replaced, the internal
// prometheus-exporter proxies and every metric Octavia does not name are
// dropped, and the load balancer's CPU and memory gauges are added.
//
// The translation streams: memory use does not grow with the page.
//
// It follows Octavia 11.0.0's prometheus-proxy, the controller version the
// interop tier runs: the metrics it names are renamed (haproxy_process_*
// to octavia_loadbalancer_* and octavia_memory_pool_*, haproxy_frontend_*
// to octavia_listener_*, haproxy_backend_* to octavia_pool_*,
// haproxy_server_* to octavia_member_*, and its few irregular names), and
// so are their labels (proxy= to listener= or pool=, server= to member=).
// The matching is upstream's, quirks included: a name found anywhere in a
// line, the first entry of its table wins. The table is one Go map in
// table.go. Upstream's master has since renamed three of HAProxy 2.4+'s
// metrics (frontend_ssl_reuse, idle_connections_current and _limit, which
// 11.0.0 drops) and shortened three HELP texts; the agent follows 11.0.0.
package promex

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
)

// A Source adds series of its own to families of the page (the IPVS
// counters of UDP and SCTP listeners, for one). The text format wants a
// family's samples together, so a source is asked for each family right
// after HAProxy's samples of it.
type Source interface {
	// WriteSamples writes the source's sample lines of the named Octavia
	// family (no HELP or TYPE lines), each ending in "\n".
	WriteSamples(w io.Writer, family string) error
}

// entry is what the translation needs of one table row.
type entry struct {
	rank   int    // position in upstream's order
	name   string // HAProxy's metric name
	to     string // Octavia's metric name
	help   []byte // whole replacement HELP line, or nil
	labels []rename
	// The keys upstream matches, name and space or name and "{", and
	// what replaces each: [0] space, [1] brace.
	keys, repl [2][]byte
}

// entries is table keyed by HAProxy's metric name.
var entries = func() map[string]*entry {
	m := make(map[string]*entry, len(table))
	for i, r := range table {
		name := r.fam.from + r.suffix
		to := r.to
		if to == "" {
			to = r.fam.to + r.suffix
		}
		e := &entry{rank: i, name: name, to: to, labels: r.fam.labels,
			keys: [2][]byte{[]byte(name + " "), []byte(name + "{")},
			repl: [2][]byte{[]byte(to + " "), []byte(to + "{")}}
		if r.help != "" {
			e.help = []byte("# HELP " + to + " " + r.help + "\n")
		}
		m[name] = e
	}
	return m
}()

var (
	namePrefix = []byte("haproxy_")
	// Lines naming the internal exporter frontend and backend, which only
	// carry the proxy's own scrapes, are not the tenant's business.
	internalMark = []byte("prometheus-exporter")
	helpMark     = []byte("HELP")
)

// Translator translates pages. Its buffers are reused from line to line
// and page to page; it is not safe for concurrent use.
type Translator struct {
	// Sources add series to the families of the page, in this order.
	Sources []Source

	in        *bufio.Reader
	out       *bufio.Writer
	lastFound *entry // the family of the previous line kept
}

// MaxLine is the longest line of HAProxy's page that is translated; a
// longer one ends the page with ErrLineTooLong instead of growing a
// buffer without end. HAProxy writes each line within one of its buffers
// (tune.bufsize, 16 KiB by default, which Octavia's template leaves
// alone), and its real lines are under 200 bytes.
const MaxLine = 64 << 10

// ErrLineTooLong: the page has a line longer than MaxLine.
var ErrLineTooLong = fmt.Errorf("a line of the exporter's page is over %d KiB", MaxLine>>10)

// readBuffer holds the longest line, its "\n" included.
const readBuffer = MaxLine + 1

// Translate reads HAProxy's page from src and writes Octavia's to dst
// (without the CPU and memory gauges: WriteUtilization writes those).
func (t *Translator) Translate(dst io.Writer, src io.Reader) error {
	if t.out == nil {
		t.out = bufio.NewWriterSize(dst, readBuffer)
	} else {
		t.out.Reset(dst)
	}
	t.lastFound = nil
	if t.in == nil {
		t.in = bufio.NewReaderSize(src, readBuffer)
	} else {
		t.in.Reset(src)
	}
	in := t.in
	for {
		line, err := in.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			return ErrLineTooLong
		}
		if len(line) > 0 {
			if werr := t.line(line); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read the exporter's page: %w", err)
		}
	}
	if err := t.endFamily(nil); err != nil {
		return err
	}
	return t.out.Flush()
}

// line translates one line, its "\n" included when it has one.
func (t *Translator) line(line []byte) error {
	if bytes.Contains(line, internalMark) {
		return nil
	}
	e, brace := t.match(line)
	if e == nil {
		return nil
	}
	if err := t.endFamily(e); err != nil {
		return err
	}
	if !brace && e.help != nil && bytes.Contains(line, helpMark) {
		_, err := t.out.Write(e.help)
		return err
	}
	// Upstream renames the labels (on sample lines of the labelled form
	// only), then the name, each with str.replace; no rename can make or
	// break another's match (none overlaps another or itself), so one
	// pass does them all.
	var labels []rename
	if brace && line[0] != '#' {
		labels = e.labels
	}
	k := 0
	if brace {
		k = 1
	}
	return writeRenamed(t.out, line, labels, rename{e.keys[k], e.repl[k]})
}

// endFamily asks the sources for the samples of the family the page is
// leaving, when next (nil at the end of the page) is another one.
func (t *Translator) endFamily(next *entry) error {
	prev := t.lastFound
	t.lastFound = next
	if prev == nil || prev == next || len(t.Sources) == 0 {
		return nil
	}
	for _, s := range t.Sources {
		if err := s.WriteSamples(t.out, prev.to); err != nil {
			return err
		}
	}
	return nil
}

// match finds which of upstream's keys the line contains. A key is a
// metric name followed by a space, or, for the labelled families, by "{",
// found anywhere in the line; when several are, the first in upstream's
// order wins (its "name " key before its "name{" key). Every name of the
// table begins with "haproxy_", so only those places are looked at.
func (t *Translator) match(line []byte) (best *entry, brace bool) {
	bestRank := -1
	for off := 0; ; {
		i := bytes.Index(line[off:], namePrefix)
		if i < 0 {
			return best, brace
		}
		start := off + i
		end := start + len(namePrefix)
		for end < len(line) && isNameByte(line[end]) {
			end++
		}
		off = start + 1
		if end == len(line) || (line[end] != ' ' && line[end] != '{') {
			continue
		}
		// Lines come in families: most have the previous line's name.
		e := t.lastFound
		if e == nil || string(line[start:end]) != e.name {
			e = entries[string(line[start:end])]
		}
		if e == nil {
			continue
		}
		b := line[end] == '{'
		if b && e.labels == nil {
			continue // process metrics have no labelled key
		}
		rank := 2 * e.rank
		if b {
			rank++
		}
		if bestRank < 0 || rank < bestRank {
			best, brace, bestRank = e, b, rank
		}
	}
}

// isNameByte: the bytes the table's metric names are made of.
func isNameByte(c byte) bool { return c >= 'a' && c <= 'z' || c == '_' }

// writeRenamed writes s with every occurrence of the labels' and the
// key's from replaced by their to. Occurrences must not overlap; label
// names end in their only "=" (TestTableNames checks), which is what the
// scan for them looks for.
func writeRenamed(w *bufio.Writer, s []byte, labels []rename, key rename) error {
	keyAt := bytes.Index(s, key.from)
	labelAt, label := nextLabel(s, 0, labels)
	done := 0
	for {
		at, r := keyAt, key
		if labelAt >= 0 && (keyAt < 0 || labelAt < keyAt) {
			at, r = labelAt, labels[label]
		}
		if at < 0 {
			_, err := w.Write(s[done:])
			return err
		}
		w.Write(s[done:at])
		w.Write(r.to)
		done = at + len(r.from)
		if at == keyAt {
			if keyAt = bytes.Index(s[done:], key.from); keyAt >= 0 {
				keyAt += done
			}
		} else {
			labelAt, label = nextLabel(s, done, labels)
		}
	}
}

// nextLabel finds the first label name in s[from:]: where it starts and
// which one, or -1.
func nextLabel(s []byte, from int, labels []rename) (int, int) {
	if len(labels) == 0 {
		return -1, 0
	}
	for j := from; ; {
		k := bytes.IndexByte(s[j:], '=')
		if k < 0 {
			return -1, 0
		}
		eq := j + k
		for i, r := range labels {
			if start := eq + 1 - len(r.from); start >= from && bytes.Equal(s[start:eq+1], r.from) {
				return start, i
			}
		}
		j = eq + 1
	}
}

// WriteUtilization writes the two gauges Octavia adds in front of the
// page: CPU utilization (the 1-minute load average over the CPU count, in
// percent) and memory utilization (percent of memory not available), one
// decimal each, as upstream prints them.
func WriteUtilization(w io.Writer, cpuPercent, memPercent float64) error {
	var b []byte
	b = append(b, "# HELP octavia_loadbalancer_cpu Load balancer CPU utilization (percentage).\n"+
		"# TYPE octavia_loadbalancer_cpu gauge\noctavia_loadbalancer_cpu "...)
	b = strconv.AppendFloat(b, cpuPercent, 'f', 1, 64)
	b = append(b, "\n# HELP octavia_loadbalancer_memory Load balancer memory utilization (percentage).\n"+
		"# TYPE octavia_loadbalancer_memory gauge\noctavia_loadbalancer_memory "...)
	b = strconv.AppendFloat(b, memPercent, 'f', 1, 64)
	b = append(b, '\n')
	_, err := w.Write(b)
	return err
}
