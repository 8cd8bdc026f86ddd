// Package fsutil has the one way the agent writes files: atomically and
// durably, so a crash or power loss leaves either the old or the new file,
// never a torn one. It also lists the folders the agent keeps its state in.
//
// A write is a temp file, fsync, rename, and an fsync of the directory.
// Files that are renamed again later or regenerated take fewer fsyncs
// (Write's durability). Two files are atomic but not fsync'd, because power
// loss makes them moot: HAProxy's servers-state (saved again before every
// reload of a config that loads it; HAProxy starts from the config's states
// without it) and the heartbeat's stats_counters.json (after power loss
// HAProxy's counters restart from zero, which the deltas treat as a reset
// whatever the file holds). An upload costs two fsyncs (the config's data,
// while HAProxy checks it, then its folder after the rename; the load
// balancer's record is rewritten only when the amphora id changes), and
// making a config the last good one two more.
package fsutil

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Durability says how far a write goes towards surviving power loss.
type Durability int

const (
	// Durable fsyncs the file and its directory: after WriteFile returns,
	// the new content survives power loss.
	Durable Durability = iota
	// DataOnly fsyncs the file but not its directory: for a file that is
	// renamed again later, whose final rename the caller makes durable
	// with SyncDir (one directory fsync instead of two).
	DataOnly
	// Atomic fsyncs nothing: readers see the old or the new content,
	// never a mix, but power loss may leave the old, the new or an empty
	// file. Only for files the agent or HAProxy regenerates and can do
	// without (saved server states, counters).
	Atomic
)

// WriteFile replaces path with data. It writes a temporary file in the same
// directory, sets perm, fsyncs it, renames it over path and fsyncs the
// directory so the rename itself survives a crash.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return Write(path, data, perm, Durable)
}

// Write replaces path with data through a temporary file and a rename,
// with the fsyncs d asks for.
func Write(path string, data []byte, perm os.FileMode, d Durability) error {
	st, err := Stage(path, data, perm, d)
	if err != nil {
		return err
	}
	if err := st.Commit(); err != nil {
		st.Discard()
		return err
	}
	if d != Durable {
		return nil
	}
	return SyncDir(filepath.Dir(path))
}

// Staged is a file written beside the path it will replace, not yet in
// place. A caller that replaces several files stages them all first, so
// that a failure while writing leaves every one of them unchanged.
type Staged struct {
	tmp, path string
}

// Stage writes data to a temporary file in path's directory with perm,
// fsynced unless d is Atomic; Commit puts it in place.
func Stage(path string, data []byte, perm os.FileMode, d Durability) (_ *Staged, err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	// CreateTemp makes the file 0600; chmod before writing so secrets are
	// never readable with a wider mode, even briefly.
	if err = tmp.Chmod(perm); err != nil {
		return nil, err
	}
	if _, err = tmp.Write(data); err != nil {
		return nil, err
	}
	if d != Atomic {
		if err = tmp.Sync(); err != nil {
			return nil, err
		}
	}
	if err = tmp.Close(); err != nil {
		return nil, err
	}
	return &Staged{tmp: tmp.Name(), path: path}, nil
}

// Commit renames the staged file over its path. The caller fsyncs the
// directory (SyncDir) when the rename must survive power loss.
func (s *Staged) Commit() error { return os.Rename(s.tmp, s.path) }

// Discard removes a staged file that was not committed.
func (s *Staged) Discard() { os.Remove(s.tmp) }

// SyncFile fsyncs the file at path: for a file written Atomic whose
// flush can wait, overlapped with other work, until before its final
// rename.
func SyncFile(path string) error { return fsync(path) }

// SyncDir fsyncs a directory so entries created, renamed or removed in it
// are durable.
func SyncDir(dir string) error { return fsync(dir) }

func fsync(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	return nil
}

// ReadDirOrEmpty lists dir like os.ReadDir, but a folder that does not exist
// is empty: the agent's state folders appear only with their first entry.
func ReadDirOrEmpty(dir string) ([]os.DirEntry, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return entries, err
}
