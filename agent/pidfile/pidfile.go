// Package pidfile answers "is the process named by this pid file alive",
// the way upstream decides whether HAProxy or keepalived runs.
package pidfile

import (
	"bytes"
	"os"
	"strconv"
)

// Read returns the pid on the first line of path.
func Read(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	pid, err := strconv.Atoi(string(bytes.TrimSpace(line)))
	if err != nil || pid <= 0 {
		return 0, &os.PathError{Op: "parse pid", Path: path, Err: strconv.ErrSyntax}
	}
	return pid, nil
}

// Alive reports whether path names a process that exists under procDir
// (normally /proc), as upstream checks it.
func Alive(procDir, path string) bool {
	pid, err := Read(path)
	if err != nil {
		return false
	}
	_, err = os.Stat(procDir + "/" + strconv.Itoa(pid))
	return err == nil
}
