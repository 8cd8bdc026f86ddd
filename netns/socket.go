package netns

import (
	"fmt"
	"net"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// A socket belongs to the network namespace of the thread that creates
// it, for its whole life; afterwards any goroutine may use it. So Listen
// creates its own on a thread moved into the namespace just for that.

// Listen opens a listening socket inside the named namespace.
func Listen(namespace, network, address string) (net.Listener, error) {
	var ln net.Listener
	err := onThreadIn(namespace, func() error {
		var err error
		ln, err = net.Listen(network, address)
		return err
	})
	return ln, err
}

// ID identifies the namespace mounted under the name now (its nsfs inode),
// so that a caller can tell when the name has come to mean another
// namespace: deleted and created again, a socket opened in the old one
// stays there.
func ID(namespace string) (uint64, error) {
	if err := validName(namespace); err != nil {
		return 0, err
	}
	path := filepath.Join(RunDir, namespace)
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, err
	}
	if !isNamespaceMount(path) {
		return 0, fmt.Errorf("%s is not a network namespace", path)
	}
	return st.Ino, nil
}
