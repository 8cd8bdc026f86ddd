package netns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	vnetns "github.com/vishvananda/netns"
	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// osThreads is the number of OS threads of this process.
func osThreads(t *testing.T) int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	return len(tasks)
}

// A Dialer connects inside its namespace, 500 connections at once on
// no extra threads (Dial pins one per connect, and Go keeps them: issue
// 23, item 1); it times out, fails, stays in the namespace it entered,
// never leaves the process's main thread elsewhere, and refuses after
// Close.
func TestDialer(t *testing.T) {
	testkit.RequireRoot(t, needsRoot)
	name := newNamespace(t, "aa-dialer-")
	addr := netip.MustParseAddrPort(helloListener(t, name).Addr().String())

	ownNS, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	// Made and closed over and over, never on the main thread's namespace.
	for range 20 {
		d, err := NewDialer(name)
		if err != nil {
			t.Fatal(err)
		}
		d.Close()
		if now, _ := os.Readlink("/proc/self/ns/net"); now != ownNS {
			t.Fatalf("the process's namespace is %s after a Dialer, was %s", now, ownNS)
		}
	}

	d, err := NewDialer(name)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := osThreads(t)
	const conns = 500
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := d.DialTCP(ctx, addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(20 * time.Second))
			if b, err := io.ReadAll(c); err != nil || string(b) != "hello" {
				errs <- fmt.Errorf("read %q: %v", b, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The race detector and the runtime may add one or two of their own.
	if grown := osThreads(t) - before; grown > 4 {
		t.Errorf("%d connections grew the process by %d threads", conns, grown)
	}

	// Nothing listens: refused at once.
	closed, err := Listen(name, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := netip.MustParseAddrPort(closed.Addr().String())
	closed.Close()
	if c, err := d.DialTCP(ctx, refused); err == nil {
		c.Close()
		t.Fatal("connected to a closed port")
	} else if !strings.Contains(err.Error(), "refused") {
		t.Errorf("closed port: %v", err)
	}

	// A peer that never answers (behind a link whose other end is down):
	// the context ends the connect.
	ipRun(t, "-n", name, "link", "add", "aa-dial0", "type", "veth", "peer", "name", "aa-dial1")
	ipRun(t, "-n", name, "addr", "add", "198.51.100.2/24", "dev", "aa-dial0")
	ipRun(t, "-n", name, "link", "set", "aa-dial0", "up")
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	start := time.Now()
	c, err := d.DialTCP(short, netip.MustParseAddrPort("198.51.100.77:9101"))
	cancelShort()
	if err == nil {
		c.Close()
		t.Fatal("connected to a peer that drops everything")
	}
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("silent peer: %v after %v", err, time.Since(start))
	}

	// The name recreated: the Dialer stays in the namespace it entered,
	// where the listener is.
	if err := vnetns.DeleteNamed(name); err != nil {
		t.Fatal(err)
	}
	if err := EnsureWith(name, zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	if c, err := d.DialTCP(ctx, addr); err != nil {
		t.Errorf("after the name was recreated: %v", err)
	} else {
		c.Close()
	}

	d.Close()
	if _, err := d.DialTCP(ctx, addr); !errors.Is(err, ErrDialerClosed) {
		t.Errorf("after Close: %v", err)
	}
}
