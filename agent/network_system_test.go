//go:build system

package agent

import (
	"os/exec"
	"testing"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
	"github.com/amphora-agent/amphora-agent/netns"
)

// TestPrepareNetworkAndPlugVIPKernel runs the checks of
// TestPrepareNetworkAndPlugVIP on the real kernel: a real namespace, and
// a veth end with the port's MAC standing in for the hot-plugged NIC.
func TestPrepareNetworkAndPlugVIPKernel(t *testing.T) {
	testkit.RequireRoot(t, "creates a network namespace and a veth pair")
	ns := "aa-agent-" + randHex(3)
	t.Cleanup(func() { exec.Command("ip", "netns", "delete", ns).Run() })
	host, peer := "aah"+randHex(3), "aap"+randHex(3)
	const mac = "fa:16:3e:a9:00:01"
	if out, err := exec.Command("ip", "link", "add", host, "address", mac, "type", "veth", "peer", "name", peer).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() {
		exec.Command("ip", "link", "delete", peer).Run()
		exec.Command("ip", "link", "delete", host).Run()
	})
	checkPrepareAndPlugVIP(t, netns.SystemKernel{}, ns, mac)
}
