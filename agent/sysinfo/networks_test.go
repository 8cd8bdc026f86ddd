package sysinfo

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

func uniqueNSName(t *testing.T) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "sysinfo-test-" + hex.EncodeToString(b)
}

func TestNetworksMissingNamespace(t *testing.T) {
	got, err := Networks(uniqueNSName(t))
	if err != nil {
		t.Fatalf("Networks() error = %v", err)
	}
	if got == nil || len(got) != 0 {
		t.Errorf("Networks() = %#v, want an empty non-nil map", got)
	}
}

func TestNetworksInvalidName(t *testing.T) {
	for _, name := range []string{"", ".", "..", "../etc"} {
		if _, err := Networks(name); err == nil {
			t.Errorf("Networks(%q) succeeded", name)
		}
	}
}

func ipCmd(t *testing.T, args ...string) error {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Logf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return err
}

func mustIP(t *testing.T, args ...string) {
	t.Helper()
	if err := ipCmd(t, args...); err != nil {
		t.Fatalf("ip %s failed", strings.Join(args, " "))
	}
}

func TestNetworksInNamespace(t *testing.T) {
	testkit.RequireRoot(t, "creates a network namespace (ip netns add)")
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("iproute2 'ip' command not installed")
	}
	ns := uniqueNSName(t)
	mustIP(t, "netns", "add", ns)
	t.Cleanup(func() {
		if err := ipCmd(t, "netns", "del", ns); err != nil {
			t.Errorf("could not delete namespace %s", ns)
		}
	})

	// Prefer dummy links; some kernels lack the module, then a veth pair
	// gives the same shape (eth7 plus a non-eth peer).
	if ipCmd(t, "-n", ns, "link", "add", "eth7", "type", "dummy") == nil {
		mustIP(t, "-n", ns, "link", "add", "other7", "type", "dummy")
	} else {
		t.Log("dummy links unavailable, using a veth pair")
		mustIP(t, "-n", ns, "link", "add", "eth7", "type", "veth", "peer", "name", "other7")
	}
	mustIP(t, "-n", ns, "addr", "add", "192.0.2.1/24", "dev", "eth7")
	mustIP(t, "-n", ns, "link", "set", "eth7", "up")
	mustIP(t, "-n", ns, "link", "set", "other7", "up")
	mustIP(t, "-n", ns, "link", "set", "lo", "up")
	// A veth's carrier comes on when its peer comes up, and the kernel
	// gives it a queue (until then every packet is dropped, not counted as
	// sent) only when its link watch gets to the event, up to a second
	// later; the state shows UP once that is done (a dummy's is UNKNOWN
	// from the start).
	testkit.WaitFor(t, 30*time.Second, "eth7 UP", func() bool {
		out, err := exec.Command("ip", "-n", ns, "-o", "link", "show", "dev", "eth7").Output()
		return err == nil && (strings.Contains(string(out), " state UP ") || strings.Contains(string(out), " state UNKNOWN "))
	})
	// A static neighbour lets the datagram leave without ARP.
	mustIP(t, "-n", ns, "neigh", "replace", "192.0.2.99", "lladdr", "02:00:00:00:00:99", "dev", "eth7")

	const payload = 1000
	sendUDPInNamespace(t, ns, "192.0.2.99:9", payload)

	got, err := Networks(ns)
	if err != nil {
		t.Fatalf("Networks() error = %v", err)
	}
	if len(got) != 1 {
		t.Fatalf("Networks() = %+v, want only eth7", got)
	}
	st, ok := got["eth7"]
	if !ok {
		t.Fatalf("Networks() = %+v, want eth7", got)
	}
	t.Logf("eth7: %+v", st)
	if st.TX < payload {
		t.Errorf("eth7 TX = %d bytes, want at least %d after sending a datagram", st.TX, payload)
	}
}

// sendUDPInNamespace sends one datagram from inside the namespace. It runs
// on a dedicated locked thread that is never unlocked, so the runtime
// discards the thread instead of reusing it in the wrong namespace.
func sendUDPInNamespace(t *testing.T, ns, addr string, size int) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		h, err := netns.GetFromName(ns)
		if err != nil {
			errc <- err
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			errc <- err
			return
		}
		c, err := net.Dial("udp4", addr)
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		_, err = c.Write(make([]byte, size))
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatalf("send UDP in %s: %v", ns, err)
	}
}
