package rawsock

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// A HAProxy master that reloads takes the listening sockets over from its
// current worker. When that worker does not hand them over within a
// second (HAProxy's limit; a worker still starting up or starved of CPU
// during back-to-back reloads), the master binds a new stats socket and
// renames it over the path. A connection already queued on the old socket
// then waits for the old worker, however long it stalls, while the new
// one answers at once. So while no answer has come, the path is looked at
// every replacedEvery; once it names another socket, or none, the
// exchange starts again on a new connection.
const replacedEvery = 50 * time.Millisecond

// errReplaced ends a connection whose socket the path no longer names.
var errReplaced = errors.New("the socket was replaced")

// fileID tells one socket file from another.
type fileID struct{ dev, ino uint64 }

// fileOf is the socket file at path; false for an abstract socket or a
// path that cannot be looked at (connecting tells why).
func fileOf(path string) (fileID, bool) {
	if path == "" || path[0] == '@' {
		return fileID{}, false
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}, false
	}
	return fileID{dev: st.Dev, ino: st.Ino}, true
}

// watch makes the reads of s before the answer begins end with
// errReplaced once path no longer names file.
func (s *sock) watch(path string, file fileID) {
	s.path, s.file = path, file
	s.nextLook = time.Now().Add(replacedEvery)
}

// replaced reports, at most every replacedEvery, whether the path has
// come to name another socket while no answer has come.
func (s *sock) replaced() bool {
	if s.path == "" || s.started {
		return false
	}
	now := time.Now()
	if now.Before(s.nextLook) {
		return false
	}
	s.nextLook = now.Add(replacedEvery)
	file, ok := fileOf(s.path)
	return !ok || file != s.file
}
