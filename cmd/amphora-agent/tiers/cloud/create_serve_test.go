//go:build cloud

package cloud_test

import (
	"os"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/cloud"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/vm"
)

// TestCloudCreateServeDelete is the shortest whole path a user takes: a
// load balancer created through Octavia's API on a freshly booted
// amphora, an HTTP listener whose pool has an HTTP/1.1 health monitor
// with a Host header (the hidden-header check that HAProxy 3.0 refuses
// as Octavia up to 16 renders it, haproxy/compat.go), both members
// ONLINE in the API and serving through the VIP, then the cascade delete
// leaving nothing behind. make test runs it with Octavia 16 and the
// trixie image; TestCloudScenarios covers the rest of a load balancer's
// life.
func TestCloudCreateServeDelete(t *testing.T) {
	boot := amphoraVMs(t)
	cp := cloud.Start(t, cloud.Options{VMs: boot,
		Extra: "[house_keeping]\ncleanup_interval = 5\namphora_expiry_age = 1\nload_balancer_expiry_age = 1\n"})
	t.Logf("control plane: Octavia %s, amphorae of Debian %s", cloud.OctaviaVersion(os.Getenv("AMPHORA_OCTAVIA_ROOT")), vm.Suite())
	created := time.Now()
	s := newScene(cp)
	s.lb = waitLB(t, cp, createLB(t, cp, "lb-create-serve"), "ACTIVE", 20*time.Minute)
	s.names[s.lb.ID] = "lb"
	s.checkCreate(t, time.Since(created), vm.Accel(boot.Image))
	s.serveMembers(t, []string{sceneMember1, sceneMember2}, 0, false)
	pool := s.serve(t, "l-http", "HTTP", 80, "HTTP", "--url-path", "/", "--http-version", "1.1",
		"--domain-name", "www.example.com", "--delay", "2", "--timeout", "2", "--max-retries", "1")
	s.memberPair(t, pool, "", sceneHTTP)
	onlyFrom(t, "HTTP", s.httpAsk(80, "/"), "member-1", "member-2")
	s.cascadeDelete(t)
}
