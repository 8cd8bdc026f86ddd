package stats

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// All is the `show stat <iid> <type> <sid>` argument for every proxy,
// every object type, or every server.
const All = -1

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

// Row is one line of `show stat`, addressed by column name.
type Row struct {
	cols   map[string]int
	fields []string
}

// Get returns the value of column name, or "" when the column is unknown or
// the row is shorter than the header.
func (r Row) Get(name string) string {
	i, ok := r.cols[name]
	if !ok || i >= len(r.fields) {
		return ""
	}
	return r.fields[i]
}

// Uint parses column name as an unsigned decimal counter.
func (r Row) Uint(name string) (uint64, error) {
	v := r.Get(name)
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s %s: column %s = %q is not a counter", r.Get(ColPxName), r.Get(ColSvName), name, v)
	}
	return n, nil
}

// PxName, SvName and Status are the columns every consumer reads.
func (r Row) PxName() string { return r.Get(ColPxName) }
func (r Row) SvName() string { return r.Get(ColSvName) }
func (r Row) Status() string { return r.Get(ColStatus) }

// ShowStat runs `show stat <iid> <typeMask> <sid>` (use All for -1) and
// parses the answer.
func ShowStat(ctx context.Context, socketPath string, iid, typeMask, sid int) ([]Row, error) {
	cmd := fmt.Sprintf("show stat %d %d %d", iid, typeMask, sid)
	out, err := Command(ctx, socketPath, cmd)
	if err != nil {
		return nil, err
	}
	rows, err := ParseStat(out)
	if err != nil {
		return nil, &Error{Socket: socketPath, Command: cmd, Err: err}
	}
	return rows, nil
}

// ParseStat parses a `show stat` answer: a header line starting with "# "
// naming the columns, then one CSV record per proxy, backend or server.
// Columns are found by name, so columns added by later HAProxy releases,
// quoted fields and the empty column after each line's trailing comma are
// all harmless. Empty lines are skipped.
func ParseStat(data []byte) ([]Row, error) {
	if !bytes.HasPrefix(data, []byte("# ")) {
		return nil, notCSV(data)
	}
	r := csv.NewReader(bytes.NewReader(data[2:]))
	r.FieldsPerRecord = -1
	header, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrNotCSV, err)
	}
	cols := make(map[string]int, len(header))
	for i, name := range header {
		name = strings.TrimSpace(name)
		if _, dup := cols[name]; name == "" || dup {
			continue
		}
		cols[name] = i
	}
	for _, need := range []string{ColPxName, ColSvName, ColStatus} {
		if _, ok := cols[need]; !ok {
			return nil, fmt.Errorf("%w: no %s column", ErrNotCSV, need)
		}
	}
	var rows []Row
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNotCSV, err)
		}
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue
		}
		rows = append(rows, Row{cols: cols, fields: rec})
	}
	return rows, nil
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

// Info is the answer to `show info`: key → value, both trimmed.
type Info map[string]string

// ShowInfo runs `show info`.
func ShowInfo(ctx context.Context, socketPath string) (Info, error) {
	const cmd = "show info"
	out, err := Command(ctx, socketPath, cmd)
	if err != nil {
		return nil, err
	}
	info := ParseInfo(out)
	if len(info) == 0 {
		return nil, &Error{Socket: socketPath, Command: cmd, Err: notInfo(out)}
	}
	return info, nil
}

func notInfo(out []byte) error {
	if len(bytes.TrimSpace(out)) == 0 {
		return ErrEmpty
	}
	return fmt.Errorf("unexpected answer %q", bytes.TrimSpace(out))
}

// ParseInfo parses `Key: value` lines, splitting at the first colon and
// trimming both sides. Lines without a colon are skipped.
func ParseInfo(data []byte) Info {
	info := Info{}
	for line := range strings.SplitSeq(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if k = strings.TrimSpace(k); k != "" {
			info[k] = strings.TrimSpace(v)
		}
	}
	return info
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
		return nil, &Error{Socket: socketPath, Command: cmd, Err: notInfo(out)}
	}
	return out, nil
}
