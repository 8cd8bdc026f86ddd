package netns

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	vnetns "github.com/vishvananda/netns"
	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// A socket opened by Listen or a Dialer lives in the namespace by that
// name when it was opened; ID tells a namespace recreated under the same
// name.
func TestSocketsInNamespace(t *testing.T) {
	testkit.RequireRoot(t, "creates a network namespace")
	name := fmt.Sprintf("aa-sock-%d", os.Getpid())
	t.Cleanup(func() { vnetns.DeleteNamed(name) })
	if err := EnsureWith(name, zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	id1, err := ID(name)
	if err != nil {
		t.Fatal(err)
	}
	ln := helloListener(t, name)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// dial connects from the namespace the name means now.
	dial := func() (net.Conn, error) {
		d, err := NewDialer(name)
		if err != nil {
			return nil, err
		}
		defer d.Close()
		return d.DialTCP(ctx, netip.MustParseAddrPort(ln.Addr().String()))
	}
	c, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	c.Close()
	if err != nil || string(b) != "hello" {
		t.Fatalf("read %q, %v", b, err)
	}

	// Recreated: a new namespace under the old name, where nothing listens.
	if err := vnetns.DeleteNamed(name); err != nil {
		t.Fatal(err)
	}
	if _, err := ID(name); err == nil {
		t.Fatal("ID of a deleted namespace")
	}
	if err := EnsureWith(name, zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	id2, err := ID(name)
	if err != nil {
		t.Fatal(err)
	}
	if id1 == id2 {
		t.Fatalf("the recreated namespace has the old ID %d", id1)
	}
	if c, err := dial(); err == nil {
		c.Close()
		t.Fatal("dialled the old namespace's listener from the new one")
	}
}

// helloListener listens inside the namespace and writes "hello" on each
// connection before closing it, until the test ends.
func helloListener(t *testing.T, namespace string) net.Listener {
	t.Helper()
	ln, err := Listen(namespace, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "hello")
			c.Close()
		}
	}()
	return ln
}
