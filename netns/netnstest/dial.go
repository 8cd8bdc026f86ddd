package netnstest

import (
	"context"
	"net"

	"github.com/amphora-agent/amphora-agent/netns"
)

// Dial connects from inside the named (real) network namespace, for a
// test that plays a client there. It holds a thread of its own for the
// whole connect, and Go keeps every thread it makes: the agent itself
// uses a netns.Dialer.
func Dial(ctx context.Context, namespace, network, address string) (net.Conn, error) {
	var c net.Conn
	err := netns.Do(namespace, func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}
