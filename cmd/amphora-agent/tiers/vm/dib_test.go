//go:build vm

package vm_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/ctrlutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/testenv"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/tiersutil"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/topo"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/vm"
)

// TestVMDIBImage boots the image diskimage-builder makes from Octavia's
// own elements with the package in place of upstream's amphora-agent
// element (make test-vm-dib builds it with packaging/image/dib.sh and names
// it in AMPHORA_DIB_IMAGE): cloud-init writes what Octavia's ComputeCreate
// asked for, the agent becomes ready, a load balancer serves through its
// VIP, and HAProxy's flow lines reach /var/log/haproxy.log through the
// package's rsyslog socket.
func TestVMDIBImage(t *testing.T) {
	path := os.Getenv("AMPHORA_DIB_IMAGE")
	if path == "" {
		t.Skip("AMPHORA_DIB_IMAGE is not set (make test-vm-dib builds the image and sets it)")
	}
	ctrlutil.RequireOctavia(t)
	img := vm.Baked(t, path)
	a := createAmphora(t, "amp-dib", "SINGLE", vmCreate{Timezone: "UTC", Image: &img})
	a.ready(t)
	t.Logf("%s", a.MustExec(`. /etc/os-release; echo "$PRETTY_NAME, kernel $(uname -r)"; dpkg-query -W -f='${Package} ${Version}\n' amphora-agent haproxy keepalived cloud-init`))

	// What upstream's elements and the package leave in the image.
	for what, check := range map[string]string{
		"rsyslog's socket for HAProxy":          "test -S /run/rsyslog/octavia/log",
		"the package's files unchanged":         "dpkg -V amphora-agent | grep -v ' /var/lib/octavia/ping-wrapper.sh$' | { ! grep .; }",
		"the packaged HAProxy service disabled": `[ "$(systemctl is-enabled haproxy.service)" != enabled ]`,
		"HAProxy's group include":               "grep -q 'group nogroup' /var/lib/octavia/haproxy-default-user-group.conf",
		"the kernel tuned as haproxy-octavia":   `[ "$(sysctl -n net.ipv4.tcp_max_tw_buckets)" = 5800000 ]`,
		"certificates in RAM":                   `[ "$(findmnt -n -o FSTYPE /var/lib/octavia/certs)" = tmpfs ]`,
	} {
		if _, out, err := a.Exec(t.Context(), check); err != nil {
			t.Errorf("%s: %v (%s)", what, err, strings.TrimSpace(out))
		}
	}

	n := newDataPlane(t)
	n.attach(t, a, "SINGLE", "203.0.113.4", "198.51.100.20")
	startLB(t, a, vmLVSSpec(t))
	waitServed(t, n, time.Minute)
	c := n.client.HTTPClient(false)
	c.Timeout = 3 * time.Second
	marker := "/aa-dib-" + topo.Tag()
	testenv.WaitFor(t, 30*time.Second, "a request through the VIP", func() bool {
		_, err := tiersutil.GetMember(c, fmt.Sprintf("http://%s%s", vmVIP, marker), "X-Member")
		return err == nil
	})
	a.WaitFor(30*time.Second, "the flow line in /var/log/haproxy.log", "grep -q -- '"+marker+"' /var/log/haproxy.log")
}
