// Package journalfwd copies the lines a daemon writes to its output file
// into the systemd journal. The daemon keeps writing the file (it must
// outlive the agent, so it cannot write into a pipe the agent holds); the
// agent reads what is new and sends it on, under the identifier an
// operator looks for. Nothing here ever blocks the caller: lines go
// through a bounded queue to a sender of their own, and are dropped
// (and counted) when the journal does not keep up.
//
// The agent forwards only under systemd (a journal listens on
// /run/systemd/journal/socket when the agent starts); elsewhere the output
// files are all there is. The daemons write their output files in every
// case: the files must outlive the agent (a daemon left writing into a
// pipe the agent held would die of SIGPIPE when the agent restarts and
// adopts it), and an error answer to the controller quotes them. Lines go
// to the journal by its native protocol, one entry per line, with the
// identifier (SYSLOG_IDENTIFIER) the agent gives each daemon:
// haproxy-<lb>, octavia-keepalived, octavia-keepalivedlvs-<id>.
//
//   - The file is read every second, and before a start the previous run's
//     file is moved to .1, so a crash's last words are sent too; when the
//     size cap empties a file it is read again from the start.
//   - On start-up forwarding begins at the end of each file: what an
//     earlier agent forwarded is not sent twice; what a daemon wrote while
//     no agent ran (or in about the last second before an agent stopped)
//     stays in the file only.
//   - A line longer than 4 KiB is sent in pieces, an unfinished last line
//     once the file moves away or the agent stops.
//   - Supervision is never held up (forwarding runs beside it and never
//     waits for the journal): lines wait in a queue of 256 per daemon (at
//     most 1 MiB) and, when the journal does not keep up, are dropped,
//     counted and reported in a line saying how many.
//   - HAProxy's lines carry the priority of their level ([ALERT] err,
//     [WARNING] warning, [NOTICE] notice).
//
// keepalived logs to syslog itself, with the facility
// LOG_LOCAL<administrative_log_facility> that the amphora's log offloading
// forwards; the journal collects those records as Keepalived (the parent),
// Keepalived_vrrp and Keepalived_healthcheckers, identifiers every
// keepalived of the amphora shares. Its output file holds the same records
// (it runs with --log-console, which is where the VRRP role and error
// answers come from), so only the lines of that file that are not log
// records are forwarded (a record starts with keepalived's date, "Mon Nov
// 30 16:09:07 2026: "): a bad option, a crash. Each line reaches the
// journal once.
package journalfwd

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"syscall"

	"github.com/coreos/go-systemd/v22/journal"
)

// Defaults of Options.
const (
	DefaultMaxLine = 4 << 10
	DefaultQueue   = 256
	// readBudget bounds what one Poll reads; the rest waits for the next.
	readBudget = 1 << 20
)

// Sink receives the forwarded lines: the journal, or a fake in tests.
type Sink interface {
	Send(message string, priority journal.Priority, fields map[string]string) error
}

// Journal is the systemd journal (its native socket).
type Journal struct{}

func (Journal) Send(m string, p journal.Priority, f map[string]string) error {
	return journal.Send(m, p, f)
}

// Available reports whether a journal listens on this host (systemd).
func Available() bool { return journal.Enabled() }

// StderrIsJournal reports whether this process's stderr is a journal
// stream (systemd's JOURNAL_STREAM names it), as under a unit.
func StderrIsJournal() bool {
	ok, _ := journal.StderrIsJournalStream()
	return ok
}

// Options shape a Follower.
type Options struct {
	Sink Sink
	// Identifier is the SYSLOG_IDENTIFIER of every line (journalctl -t).
	Identifier string
	// Fields are added to every line.
	Fields map[string]string
	// Priority classifies a line; nil sends everything at info.
	Priority func(line []byte) journal.Priority
	// Skip leaves out lines that reach the journal another way.
	Skip func(line []byte) bool
	// MaxLine cuts longer lines into pieces of this many bytes.
	MaxLine int
	// Queue is how many lines may wait for the sender.
	Queue int
}

type entry struct {
	msg string
	pri journal.Priority
}

// Follower follows one output file. Poll and Close must be called from
// one goroutine.
type Follower struct {
	path    string
	o       Options
	fields  map[string]string
	f       *os.File
	dev     uint64
	ino     uint64
	off     int64
	partial []byte
	q       chan entry
	dropped atomic.Int64
}

// New starts following path from its current end: what the file already
// holds was written before this agent ran (and forwarded by the earlier
// one, or left to the file). A file that does not exist yet is read from
// its start once it appears.
func New(path string, o Options) *Follower {
	if o.MaxLine <= 0 {
		o.MaxLine = DefaultMaxLine
	}
	if o.Queue <= 0 {
		o.Queue = DefaultQueue
	}
	fields := map[string]string{"SYSLOG_IDENTIFIER": o.Identifier}
	for k, v := range o.Fields {
		fields[k] = v
	}
	fw := &Follower{path: path, o: o, fields: fields, q: make(chan entry, o.Queue)}
	if fw.open() {
		if st, err := fw.f.Stat(); err == nil {
			fw.off = st.Size()
		}
	}
	go fw.send()
	return fw
}

func (fw *Follower) open() bool {
	f, err := os.Open(fw.path)
	if err != nil {
		return false
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return false
	}
	sys := st.Sys().(*syscall.Stat_t)
	fw.f, fw.dev, fw.ino, fw.off = f, uint64(sys.Dev), sys.Ino, 0
	return true
}

// Poll forwards the complete lines written since the last call. A file
// renamed away (a new run of the daemon starts a new file) is read to
// its end first; a file truncated under it (held to its size cap) is
// read again from its start.
func (fw *Follower) Poll() {
	if fw.f == nil && !fw.open() {
		return
	}
	if st, err := os.Stat(fw.path); err == nil {
		sys := st.Sys().(*syscall.Stat_t)
		if uint64(sys.Dev) != fw.dev || sys.Ino != fw.ino {
			fw.read(-1)
			fw.flush()
			fw.f.Close()
			fw.f = nil
			if !fw.open() {
				return
			}
		}
	}
	if st, err := fw.f.Stat(); err == nil && st.Size() < fw.off {
		fw.flush()
		fw.off = 0
	}
	fw.read(readBudget)
}

// read forwards what the open file holds past the offset, at most budget
// bytes (negative: all of it).
func (fw *Follower) read(budget int64) {
	var r io.Reader = io.NewSectionReader(fw.f, fw.off, 1<<62)
	if budget >= 0 {
		r = io.LimitReader(r, budget)
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		fw.off += int64(n)
		fw.split(buf[:n])
		if err != nil || n == 0 {
			return
		}
	}
}

// split sends the complete lines of data and keeps the rest for later;
// a line that grows past MaxLine is sent in pieces.
func (fw *Follower) split(data []byte) {
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			fw.partial = append(fw.partial, data...)
			for len(fw.partial) >= fw.o.MaxLine {
				fw.emit(fw.partial[:fw.o.MaxLine])
				fw.partial = append(fw.partial[:0], fw.partial[fw.o.MaxLine:]...)
			}
			return
		}
		line := data[:i]
		data = data[i+1:]
		if len(fw.partial) > 0 {
			line = append(fw.partial, line...)
			fw.partial = fw.partial[:0]
		}
		for len(line) > fw.o.MaxLine {
			fw.emit(line[:fw.o.MaxLine])
			line = line[fw.o.MaxLine:]
		}
		fw.emit(line)
	}
}

// flush sends an unfinished last line: its file will not grow any more.
func (fw *Follower) flush() {
	if len(fw.partial) > 0 {
		fw.emit(fw.partial)
		fw.partial = fw.partial[:0]
	}
}

func (fw *Follower) emit(line []byte) {
	line = bytes.TrimRight(line, "\r")
	if len(bytes.TrimSpace(line)) == 0 || fw.o.Skip != nil && fw.o.Skip(line) {
		return
	}
	pri := journal.PriInfo
	if fw.o.Priority != nil {
		pri = fw.o.Priority(line)
	}
	select {
	case fw.q <- entry{msg: string(line), pri: pri}:
	default:
		fw.dropped.Add(1)
	}
}

// send delivers the queued lines. A failed send is not retried: the line
// is still in the file.
func (fw *Follower) send() {
	for e := range fw.q {
		if n := fw.dropped.Swap(0); n > 0 {
			fw.o.Sink.Send(fmt.Sprintf("%d lines of %s not forwarded: the journal did not keep up", n, fw.path),
				journal.PriWarning, fw.fields)
		}
		fw.o.Sink.Send(e.msg, e.pri, fw.fields)
	}
}

// Close forwards what is left (an unfinished last line too) and stops.
// It does not wait for the sender to deliver.
func (fw *Follower) Close() {
	if fw.f != nil {
		fw.read(readBudget)
		fw.flush()
		fw.f.Close()
		fw.f = nil
	}
	close(fw.q)
}

// Rewind tells that the caller has just emptied the file (to hold it to
// its size cap) after a Poll: what the daemon writes next is at its start.
func (fw *Follower) Rewind() {
	fw.flush()
	fw.off = 0
}
