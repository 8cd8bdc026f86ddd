package procwatch

import (
	"errors"
	"io"
	"os"
	"strings"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/fsutil"
	"github.com/amphora-agent/amphora-agent/agent/tick"
)

func withOutput(err error, out string) error {
	if out == "" {
		return err
	}
	return &outputError{err: err, out: out}
}

// outputError is a failure with the daemon's output, which is what the
// controller is answered with.
type outputError struct {
	err error
	out string
}

func (e *outputError) Error() string { return e.err.Error() + "\n" + e.out }
func (e *outputError) Unwrap() error { return e.err }

// Output returns the daemon's output in err, or "" when it has none.
func Output(err error) string {
	var oe *outputError
	if errors.As(err, &oe) {
		return oe.out
	}
	return ""
}

// openLog opens the daemon's output file for a new process: the previous
// run's output moves to <path>.1, so the file never holds more than one
// run and a crash loop cannot grow it.
func openLog(path string) (*os.File, error) {
	if st, err := os.Stat(path); err == nil && st.Size() > 0 {
		os.Rename(path, path+".1")
	}
	return os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
}

// capLog holds a daemon's output file to max bytes: the content moves to
// <path>.1 and the file is emptied. The daemon writes with O_APPEND, so
// its next line lands at the new end. It reports whether it emptied the
// file.
func capLog(path string, max int64) bool {
	st, err := os.Stat(path)
	if err != nil || st.Size() <= max {
		return false
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	if int64(len(data)) > max {
		data = data[int64(len(data))-max:]
	}
	return fsutil.WriteFile(path+".1", data, 0o600) == nil && os.Truncate(path, 0) == nil
}

// keepLog holds the output file to MaxLog and, when Journal has a sink,
// forwards its new lines, for as long as the daemon is supervised (the
// file outlives each process: a new run renames it away, a restart of the
// agent finds it). It runs on its own, never takes the daemon's lock and
// never waits for the journal; a start shares only fwMu with it, for one
// bounded read. The cap runs right after a read, so only what the daemon
// writes in between those two steps misses the journal (it is in
// <log>.1).
func (d *Daemon) keepLog() {
	defer close(d.kept)
	s := &d.spec
	every := logCheckEvery
	if d.fw != nil {
		every = forwardEvery
	}
	// On the agent's shared instants: polling wakes the agent, and its
	// other periodic work wakes it at the same moments.
	t := tick.NewTicker(every)
	defer t.Stop()
	lastCap := time.Now()
	for {
		select {
		case <-t.C:
			t.Next()
		case <-d.done:
			d.closeForward()
			return
		case <-d.gone:
			d.closeForward()
			return
		}
		d.fwMu.Lock()
		if d.fw != nil {
			d.fw.Poll()
		}
		if time.Since(lastCap) >= logCheckEvery {
			lastCap = time.Now()
			if capLog(s.LogPath, s.MaxLog) && d.fw != nil {
				d.fw.Rewind()
			}
		}
		d.fwMu.Unlock()
	}
}

// forward sends what is new in the output file to the journal now.
func (d *Daemon) forward() {
	d.fwMu.Lock()
	defer d.fwMu.Unlock()
	if d.fw != nil {
		d.fw.Poll()
	}
}

func (d *Daemon) closeForward() {
	d.fwMu.Lock()
	defer d.fwMu.Unlock()
	if d.fw != nil {
		d.fw.Close()
		d.fw = nil
	}
}

// LogSize is the current size of the output file: pass it to Output to
// get what the daemon writes from now on.
func (d *Daemon) LogSize() int64 {
	st, err := os.Stat(d.spec.LogPath)
	if err != nil {
		return 0
	}
	return st.Size()
}

// Output returns what the daemon wrote after offset (at most MaxOutput,
// the latest), trimmed.
func (d *Daemon) Output(offset int64) string {
	f, err := os.Open(d.spec.LogPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil {
		if st.Size() < offset {
			offset = 0 // capped meanwhile
		}
		if st.Size()-offset > MaxOutput {
			offset = st.Size() - MaxOutput
		}
	}
	f.Seek(offset, io.SeekStart)
	data, _ := io.ReadAll(io.LimitReader(f, MaxOutput))
	return strings.TrimSpace(string(data))
}
