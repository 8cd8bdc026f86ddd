package stats

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"unsafe"
)

// Names of the columns the agent reads, and svname values of the summary
// rows.
const (
	ColPxName = "pxname"
	ColSvName = "svname"
	ColStatus = "status"
	ColWeight = "weight"
	ColScur   = "scur"
	ColStot   = "stot"
	ColBin    = "bin"
	ColBout   = "bout"
	ColEreq   = "ereq"

	Frontend = "FRONTEND"
	Backend  = "BACKEND"
)

// Row is one line of `show stat`, addressed by column name. It keeps the
// line as HAProxy sent it and splits it only as far as a caller asks: the
// heartbeat reads 9 of about 100 columns, all among the first 20.
type Row struct {
	h      *header
	line   string
	quoted bool // the line holds a '"', so fields need the careful split
}

// header is the column layout shared by every row of one answer. It holds
// no reference into the answer, so that the next answer of a reader that
// reuses its rows can share it.
type header struct {
	line string // the header line as HAProxy sent it
	cols map[string]int
	// px, sv, status are the indices of the columns every row is asked for.
	px, sv, status int
}

// Get returns the value of column name, or "" when the column is unknown or
// the row is shorter than the header.
func (r Row) Get(name string) string {
	i, ok := r.h.cols[name]
	if !ok {
		return ""
	}
	return r.At(i)
}

// Column is the index of column name for At and Fields, or -1.
func (r Row) Column(name string) int {
	if i, ok := r.h.cols[name]; ok {
		return i
	}
	return -1
}

// At returns field i (unquoted), or "" when the row is shorter or i < 0.
func (r Row) At(i int) string {
	if i < 0 {
		return ""
	}
	if !r.quoted {
		line := r.line
		for ; i > 0; i-- {
			c := strings.IndexByte(line, ',')
			if c < 0 {
				return ""
			}
			line = line[c+1:]
		}
		if c := strings.IndexByte(line, ','); c >= 0 {
			return line[:c]
		}
		return line
	}
	var buf [1]string
	f := r.Fields(buf[:0], i+1)
	if len(f) <= i {
		return ""
	}
	return f[i]
}

// Fields appends the first n fields of the row (unquoted; fewer when the
// row is shorter) to dst, splitting the line once.
func (r Row) Fields(dst []string, n int) []string {
	line := r.line
	start := len(dst)
	if n <= 0 {
		return dst
	}
	if !r.quoted {
		// Most fields are a few characters long, so a call to IndexByte
		// for each costs more than it saves, and a loop over bytes
		// mispredicts at every comma: the commas of 8 bytes at a time
		// are found at once (commas), then taken in order.
		from, i := 0, 0
		for ; i+8 <= len(line); i += 8 {
			for m := commas(binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(line[i:]), 8))); m != 0; m &= m - 1 {
				c := i + bits.TrailingZeros64(m)>>3
				dst = append(dst, line[from:c])
				from = c + 1
				if len(dst)-start == n {
					return dst
				}
			}
		}
		for ; i < len(line); i++ {
			if line[i] == ',' {
				dst = append(dst, line[from:i])
				from = i + 1
				if len(dst)-start == n {
					return dst
				}
			}
		}
		if n > len(dst)-start {
			dst = append(dst, line[from:])
		}
		return dst
	}
	for len(dst)-start < n {
		var f string
		if r.quoted && len(line) > 0 && line[0] == '"' {
			f, line = unquote(line)
		} else if c := strings.IndexByte(line, ','); c >= 0 {
			f, line = line[:c], line[c:]
		} else {
			f, line = line, ""
		}
		dst = append(dst, f)
		if line == "" {
			break
		}
		line = line[1:] // the comma
	}
	return dst
}

// FieldsAt sets dst[k] to field at[k] of the row (unquoted; "" when the
// row is shorter) for every k; at must be strictly ascending and dst at
// least as long. Only the wanted fields are cut out: 8 bytes whose commas
// all lie before the next wanted field are passed over by counting them,
// so a server row, whose status follows fifteen short counters, costs a
// few words instead of a string per field (Fields).
func (r Row) FieldsAt(dst []string, at []int) {
	dst = dst[:len(at)]
	clear(dst)
	if len(at) == 0 {
		return
	}
	if r.quoted {
		var buf [32]string
		f := r.Fields(buf[:0], at[len(at)-1]+1)
		for k, i := range at {
			if i < len(f) {
				dst[k] = f[i]
			}
		}
		return
	}
	line := r.line
	// field is the index of the field that starts at from.
	field, from, k := 0, 0, 0
	take := func(end int) bool {
		if field == at[k] {
			dst[k] = line[from:end]
			if k++; k == len(at) {
				return true
			}
		}
		field++
		from = end + 1
		return false
	}
	i := 0
	for ; i+8 <= len(line); i += 8 {
		m := commas(binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(line[i:]), 8)))
		if m == 0 {
			continue
		}
		// The commas here end fields field … field+n-1; unless one of
		// them is wanted, only where the last one ends matters.
		if n := bits.OnesCount64(m); field+n <= at[k] {
			field += n
			from = i + (63-bits.LeadingZeros64(m))>>3 + 1
			continue
		}
		for ; m != 0; m &= m - 1 {
			if take(i + bits.TrailingZeros64(m)>>3) {
				return
			}
		}
	}
	for ; i < len(line); i++ {
		if line[i] == ',' && take(i) {
			return
		}
	}
	if field == at[k] {
		dst[k] = line[from:]
	}
}

// commas returns w (8 bytes, the first in the low byte) with the high bit
// of each byte set where that byte is a comma, and no other bit: the
// exact form of the zero-byte test, whose borrows cannot mark a byte
// that is not a comma.
func commas(w uint64) uint64 {
	const lo7, hi = 0x7f7f7f7f7f7f7f7f, 0x8080808080808080
	x := w ^ (hi>>7)*','                   // comma bytes become zero
	return ^((x&lo7 + lo7) | x | lo7) & hi // high bit set only for zero bytes
}

// unquote reads the quoted field at the start of s (the line has been
// checked by recordEnd, so the closing quote exists) and returns it and
// the rest of s from the character after the closing quote.
func unquote(s string) (string, string) {
	var b strings.Builder
	i := 1
	for i < len(s) {
		j := strings.IndexByte(s[i:], '"')
		if j < 0 {
			b.WriteString(s[i:])
			return b.String(), ""
		}
		b.WriteString(s[i : i+j])
		i += j + 1
		if i < len(s) && s[i] == '"' {
			b.WriteByte('"')
			i++
			continue
		}
		break
	}
	rest := s[min(i, len(s)):]
	// Anything between the closing quote and the next comma stays with
	// the field, as a lenient reader would keep it.
	if c := strings.IndexByte(rest, ','); c > 0 {
		b.WriteString(rest[:c])
		rest = rest[c:]
	} else if c < 0 {
		b.WriteString(rest)
		rest = ""
	}
	return b.String(), rest
}

// Uint parses column name as an unsigned decimal counter.
func (r Row) Uint(name string) (uint64, error) {
	v := r.Get(name)
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s %s: column %s = %q is not a counter", r.PxName(), r.SvName(), name, v)
	}
	return n, nil
}

// PxName, SvName and Status are the columns every consumer reads.
func (r Row) PxName() string { return r.At(r.h.px) }
func (r Row) SvName() string { return r.At(r.h.sv) }
func (r Row) Status() string { return r.At(r.h.status) }

// ShowStat runs `show stat -1 -1 -1` for a reader that asks every few
// seconds: the answer is read into buf and the rows are appended to
// rows[:0], so both are reused; the rows point into buf until it is written
// again. A long answer is read in rounds a few milliseconds apart, which
// saves CPU and costs those milliseconds (see rawsock.Exchange).
func ShowStat(ctx context.Context, socketPath string, buf *bytes.Buffer, rows []Row) ([]Row, error) {
	const cmd = "show stat -1 -1 -1"
	out, err := command(ctx, socketPath, cmd, buf, true)
	if err != nil {
		return nil, err
	}
	return parseStatAnswer(socketPath, cmd, out, rows[:0])
}

// parseStatAnswer parses the answer out to cmd, appending to rows.
func parseStatAnswer(socketPath, cmd string, out []byte, rows []Row) ([]Row, error) {
	// The rows point into out instead of into a copy (see above).
	rows, err := parseStat(unsafe.String(unsafe.SliceData(out), len(out)), rows)
	if err != nil {
		return nil, &Error{Socket: socketPath, Command: cmd, Err: err}
	}
	return rows, nil
}

// ParseStat parses a `show stat` answer: a header line starting with "# "
// naming the columns, then one CSV record per proxy, backend or server.
// Columns are found by name, so columns added by later HAProxy releases,
// quoted fields and the empty column after each line's trailing comma are
// all harmless. Empty lines are skipped. Records are split into fields
// only when read (Row.Get, Row.Fields): the answer is copied once and each
// row is a slice of it.
func ParseStat(data []byte) ([]Row, error) { return parseStat(string(data), nil) }

// parseStat appends the rows of data to rows.
func parseStat(data string, rows []Row) ([]Row, error) {
	if !strings.HasPrefix(data, "# ") {
		return nil, notCSV([]byte(data))
	}
	s := data[2:]
	// Quotes are rare (HAProxy quotes only fields holding a comma, a
	// quote or a line break): the answer is searched for the next one
	// once, not every line for its own.
	q := quotes{s: s, next: -1}
	end, next, err := recordEnd(s, 0, &q)
	if err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrNotCSV, err)
	}
	first := Row{line: s[:end], quoted: q.in(0, end)}
	var h *header
	if cap(rows) > 0 {
		// rows are those of the reader's last answer (ShowStat),
		// from the same HAProxy: its header is most likely this one, and
		// sharing it saves building a map of a hundred columns each time.
		if last := rows[:1][0].h; last != nil && last.line == first.line {
			h = last
		}
	}
	if h == nil {
		names := first.Fields(nil, math.MaxInt)
		h = &header{line: strings.Clone(first.line), cols: make(map[string]int, len(names))}
		for i, name := range names {
			name = strings.TrimSpace(name)
			if _, dup := h.cols[name]; name == "" || dup {
				continue
			}
			h.cols[strings.Clone(name)] = i
		}
		for _, need := range []string{ColPxName, ColSvName, ColStatus} {
			if _, ok := h.cols[need]; !ok {
				return nil, fmt.Errorf("%w: no %s column", ErrNotCSV, need)
			}
		}
		h.px, h.sv, h.status = h.cols[ColPxName], h.cols[ColSvName], h.cols[ColStatus]
	}
	if rows == nil {
		rows = make([]Row, 0, strings.Count(s[next:], "\n"))
	}
	for p := next; p < len(s); p = next {
		if end, next, err = recordEnd(s, p, &q); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNotCSV, err)
		}
		row := Row{h: h, line: s[p:end], quoted: q.in(p, end)}
		if row.quoted || strings.IndexByte(row.line, ',') < 0 {
			// A record of one blank field is an empty line.
			var one [2]string
			if f := row.Fields(one[:0], 2); len(f) == 1 && strings.TrimSpace(f[0]) == "" {
				continue
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// quotes finds the quotes of s from left to right.
type quotes struct {
	s    string
	next int // a quote at or after the last position asked about, or len(s); -1 at first
}

// in reports whether s[p:end] holds a quote; p never decreases.
func (q *quotes) in(p, end int) bool {
	if q.next < p {
		q.next = len(q.s)
		if i := strings.IndexByte(q.s[p:], '"'); i >= 0 {
			q.next = p + i
		}
	}
	return q.next < end
}

// recordEnd finds the end of the record starting at p: the next line break
// outside quotes (a trailing \r is not part of the record), and where the
// next record starts. A quote left open is an error.
func recordEnd(s string, p int, q *quotes) (end, next int, err error) {
	nl := strings.IndexByte(s[p:], '\n')
	lineEnd := len(s)
	if nl >= 0 {
		lineEnd = p + nl
	}
	if q.in(p, lineEnd) {
		// A quoted field may hold line breaks: walk the quotes ("" inside
		// quotes toggles twice).
		in := false
		lineEnd = len(s)
		for i := p; i < len(s); i++ {
			if s[i] == '"' {
				in = !in
			} else if s[i] == '\n' && !in {
				lineEnd = i
				break
			}
		}
		if in {
			return 0, 0, fmt.Errorf("record at byte %d: extraneous or missing \" in quoted-field", p)
		}
	}
	next = lineEnd + 1
	end = lineEnd
	if end > p && s[end-1] == '\r' {
		end--
	}
	return end, min(next, len(s)), nil
}

func notCSV(data []byte) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return fmt.Errorf("%w: %w", ErrNotCSV, ErrEmpty)
	}
	first, _, _ := bytes.Cut(bytes.TrimSpace(data), []byte("\n"))
	if len(first) > 120 {
		first = first[:120]
	}
	return fmt.Errorf("%w: %q", ErrNotCSV, first)
}

// unexpectedAnswer is the error of an answer that is not the command's:
// nothing at all, or something else (an error message).
func unexpectedAnswer(out []byte) error {
	if len(bytes.TrimSpace(out)) == 0 {
		return ErrEmpty
	}
	return fmt.Errorf("unexpected answer %q", bytes.TrimSpace(out))
}

// ShowServersState runs `show servers state` and returns the answer as
// HAProxy sent it, for the server-state-file HAProxy reads at its next
// start. The answer must begin with the format version line; anything else
// (an error message, nothing at all) is an error so it never replaces a
// good state file.
func ShowServersState(ctx context.Context, socketPath string) ([]byte, error) {
	const cmd = "show servers state"
	out, err := Command(ctx, socketPath, cmd)
	if err != nil {
		return nil, err
	}
	first, _, _ := bytes.Cut(out, []byte("\n"))
	if _, perr := strconv.Atoi(string(bytes.TrimSpace(first))); perr != nil {
		return nil, &Error{Socket: socketPath, Command: cmd, Err: unexpectedAnswer(out)}
	}
	return out, nil
}
