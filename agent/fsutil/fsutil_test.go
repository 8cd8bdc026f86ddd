package fsutil

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFileReplacesAtomicallyWithMode(t *testing.T) {
	for name, write := range map[string]func(string, []byte, os.FileMode) error{
		"WriteFile": WriteFile,
		"DataOnly":  func(p string, b []byte, m os.FileMode) error { return Write(p, b, m, DataOnly) },
		"Atomic":    func(p string, b []byte, m os.FileMode) error { return Write(p, b, m, Atomic) },
	} {
		t.Run(name, func(t *testing.T) { testReplace(t, write) })
	}
}

func testReplace(t *testing.T, write func(string, []byte, os.FileMode) error) {
	dir := t.TempDir()
	path := filepath.Join(dir, "server.pem")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := write(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "new" {
		t.Fatalf("content = %q, %v; want new", got, err)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %v, want 0600", st.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
}

func TestWriteFileFailureLeavesOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cfg")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A directory where the target should be makes the rename fail.
	if err := WriteFile(filepath.Join(dir, "missing", "cfg"), []byte("x"), 0o600); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
	got, _ := os.ReadFile(path)
	if string(got) != "old" {
		t.Fatalf("old file changed: %q", got)
	}
}

// SyncFile flushes a file that exists and reports one that does not
// (a staged config removed meanwhile must not pass as flushed).
func TestSyncFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := Write(p, []byte("x"), 0o600, Atomic); err != nil {
		t.Fatal(err)
	}
	if err := SyncFile(p); err != nil {
		t.Fatal(err)
	}
	if err := SyncFile(p + ".missing"); err == nil {
		t.Fatal("SyncFile of a missing file succeeded")
	}
}

func TestReadDirOrEmpty(t *testing.T) {
	dir := t.TempDir()
	if got, err := ReadDirOrEmpty(filepath.Join(dir, "missing")); err != nil || len(got) != 0 {
		t.Fatalf("missing folder = %v, %v; want empty, nil", got, err)
	}
	file := filepath.Join(dir, "a")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadDirOrEmpty(dir); err != nil || len(got) != 1 || got[0].Name() != "a" {
		t.Fatalf("folder = %v, %v; want [a], nil", got, err)
	}
	if _, err := ReadDirOrEmpty(file); err == nil {
		t.Fatal("a file read as a folder: want an error")
	}
}
