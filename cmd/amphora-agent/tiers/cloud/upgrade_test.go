//go:build cloud

package cloud_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/cloud"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/vm"
)

// upgradeImageTag is the tag the operator gives the new release's amphora
// image in the upgrade (the flows then boot it for every new amphora).
const upgradeImageTag = "amphora-trixie"

// TestCloudUpgrade is Octavia's documented upgrade as an operator does it,
// under a load balancer that keeps serving: the host's Octavia 11 creates
// it on a bookworm amphora (HTTP listener, pool, an HTTP/1.1 monitor with
// a Host, two members); with HTTP asked through the VIP every 100 ms, the
// control plane is replaced by trixie's Octavia 16 on the same database
// (`octavia-db-manage upgrade head`) and the new image is tagged for new
// amphorae; the old amphora's heartbeats must be accepted, a listener
// update must work, and an amphora failover must replace it with a
// trixie amphora that serves the same. Opt-in: make test-cloud-upgrade
// sets AMPHORA_UPGRADE_ROOT (octavia-root.sh trixie) and
// AMPHORA_UPGRADE_IMAGE (the baked trixie image).
func TestCloudUpgrade(t *testing.T) {
	root, newImage := os.Getenv("AMPHORA_UPGRADE_ROOT"), os.Getenv("AMPHORA_UPGRADE_IMAGE")
	if root == "" || newImage == "" {
		t.Skip("AMPHORA_UPGRADE_ROOT and AMPHORA_UPGRADE_IMAGE are not set (make test-cloud-upgrade sets them)")
	}
	// The upgrade starts from the host's Octavia, whatever the run's.
	t.Setenv("AMPHORA_OCTAVIA_ROOT", "")
	boot := amphoraVMs(t)
	boot.Variants = map[string]vm.Image{upgradeImageTag: vm.Baked(t, newImage)}
	cp := cloud.Start(t, cloud.Options{VMs: boot})
	s := newScene(cp)
	created := time.Now()
	s.lb = waitLB(t, cp, createLB(t, cp, "lb-upgrade"), "ACTIVE", 20*time.Minute)
	t.Logf("Octavia %s: create → ACTIVE in %.1fs", cloud.OctaviaVersion(""), time.Since(created).Seconds())
	s.serveMembers(t, []string{sceneMember1, sceneMember2}, 0, false)
	pool := s.serve(t, "l-http", "HTTP", 80, "HTTP", "--url-path", "/", "--delay", "2", "--timeout", "2",
		"--max-retries", "1", "--http-version", "1.1", "--domain-name", "www.example.com")
	s.memberPair(t, pool, "", sceneHTTP)
	onlyFrom(t, "HTTP on Octavia 11", s.httpAsk(80, "/"), "member-1", "member-2")
	old := amphoraeOf(t, s, s.lb.ID)
	if len(old) != 1 {
		t.Fatalf("%d amphorae, want 1", len(old))
	}
	checkRelease(t, s, old[0], "bookworm")

	traffic := s.httpTraffic()
	defer traffic.Stop()
	began := time.Now()

	cp.Upgrade(root, "[controller_worker]\namp_image_tag = "+upgradeImageTag+"\n")
	t.Logf("control plane replaced by Octavia %s in %.1fs (schema upgraded, services ready)",
		cloud.OctaviaVersion(root), time.Since(began).Seconds())
	upgraded := time.Now()
	// The health manager of the new release takes the old amphora's
	// heartbeats: its amphora_health row moves on after the upgrade.
	cloud.WaitFor(t, 2*time.Minute, "a heartbeat of the old amphora stored by Octavia 16", func() bool {
		b, ok := heartbeatRows(t, cp)[old[0].ID]
		return ok && b.updated > float64(upgraded.Unix())
	})
	s.waitOperating(t, "load balancer", "/v2/lbaas/loadbalancers/"+s.lb.ID, "loadbalancer", "ONLINE")
	s.change(t, "listener connection limit (Octavia 16, bookworm amphora)", func() {
		s.cli(t, "loadbalancer", "listener", "set", "--connection-limit", "5000", "l-http")
	})
	onlyFrom(t, "HTTP after the listener update", s.httpAsk(80, "/"), "member-1", "member-2")
	if st := traffic.Since(began); st.Failed > 0 {
		t.Errorf("through the upgrade and the listener update: %v; want no failed request", st)
	} else {
		t.Logf("through the upgrade and the listener update: %v", st)
	}

	failedOver := time.Now()
	s.cli(t, "loadbalancer", "amphora", "failover", old[0].ID)
	var now []apiAmphora
	cloud.WaitFor(t, 20*time.Minute, "the load balancer ACTIVE on a new amphora", func() bool {
		if lb := waitLBNoError(t, cp, s.lb.ID); lb.ProvisioningStatus != "ACTIVE" {
			return false
		}
		now = amphoraeOf(t, s, s.lb.ID)
		return len(now) == 1 && now[0].ID != old[0].ID
	})
	t.Logf("amphora failover → ACTIVE in %.1fs", time.Since(failedOver).Seconds())
	checkRelease(t, s, now[0], "trixie")
	onlyFrom(t, "HTTP on the trixie amphora", s.httpAsk(80, "/"), "member-1", "member-2")
	s.waitOperating(t, "load balancer", "/v2/lbaas/loadbalancers/"+s.lb.ID, "loadbalancer", "ONLINE")
	checkHeartbeats(t, s, now)
	st := traffic.Since(failedOver)
	t.Logf("through the failover (SINGLE: one amphora replaced by another): %v", st)
	if st.FailedAfter() > 0 {
		t.Errorf("%d requests failed after HTTP came back on the new amphora", st.FailedAfter())
	}
}

// checkRelease asserts that amp's VM runs Debian release.
func checkRelease(t *testing.T, s *scene, amp apiAmphora, release string) {
	t.Helper()
	v := s.cp.VMs()[amp.ComputeID]
	if v == nil {
		t.Fatalf("no VM for amphora %s (server %s)", amp.ID, amp.ComputeID)
	}
	out := v.MustExec(". /etc/os-release; echo $VERSION_CODENAME; dpkg-query -W -f='${Version}' haproxy")
	if !strings.HasPrefix(out, release+"\n") {
		t.Fatalf("amphora %s runs %q, want Debian %s", amp.ID, out, release)
	}
	t.Logf("amphora %s: Debian %s, HAProxy %s", amp.ID, release, strings.TrimSpace(strings.TrimPrefix(out, release+"\n")))
}
