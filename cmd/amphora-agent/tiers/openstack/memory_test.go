//go:build openstack

package openstack_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	cloudtier "github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/cloud"
)

// cloudMemory is the proportional set size of every process in the
// cloud's PID namespace: the control plane (services, agents, dnsmasq,
// libvirt) and the guests (QEMU, one per amphora or member server).
// PSS splits shared pages between their users, so the sum is what the
// cloud costs the host.
type cloudMemory struct {
	control, guests uint64 // bytes
	nGuests         int
}

func (m cloudMemory) String() string {
	gib := func(b uint64) string { return strconv.FormatFloat(float64(b)/(1<<30), 'f', 2, 64) }
	return fmt.Sprintf("control plane %s GiB, %d guests %s GiB, whole cloud %s GiB",
		gib(m.control), m.nGuests, gib(m.guests), gib(m.control+m.guests))
}

// memory sums PSS over the processes that share the namespace's first
// process's PID namespace.
func (c *Cloud) memory() (cloudMemory, error) {
	var m cloudMemory
	u, err := os.ReadFile(filepath.Join(c.Dir, "unshare.pid"))
	if err != nil {
		return m, err
	}
	children, err := os.ReadFile(fmt.Sprintf("/proc/%s/task/%[1]s/children", strings.TrimSpace(string(u))))
	if err != nil {
		return m, err
	}
	first := strings.Fields(string(children))
	if len(first) == 0 {
		return m, fmt.Errorf("the cloud has no first process")
	}
	ns, err := os.Readlink("/proc/" + first[0] + "/ns/pid")
	if err != nil {
		return m, err
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		if l, err := os.Readlink(p + "/ns/pid"); err != nil || l != ns {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(p))
		pss := uint64(cloudtier.ProcessPSS(pid)) << 10
		comm, _ := os.ReadFile(p + "/comm")
		if strings.HasPrefix(string(comm), "qemu-system") {
			m.guests += pss
			m.nGuests++
		} else {
			m.control += pss
		}
	}
	return m, nil
}

// logMemory logs the cloud's memory now, labelled with when.
func logMemory(t *testing.T, c *Cloud, when string) {
	t.Helper()
	m, err := c.memory()
	if err != nil {
		t.Logf("memory %s: %v", when, err)
		return
	}
	t.Logf("memory %s: %v", when, m)
}

// samplePeakMemory samples the cloud's memory every 20 seconds until the
// returned function is called, which returns the largest sample.
func samplePeakMemory(c *Cloud) (stop func() cloudMemory) {
	done := make(chan struct{})
	result := make(chan cloudMemory, 1)
	go func() {
		var peak cloudMemory
		tick := time.NewTicker(20 * time.Second)
		defer tick.Stop()
		for {
			if m, err := c.memory(); err == nil && m.control+m.guests > peak.control+peak.guests {
				peak = m
			}
			select {
			case <-done:
				result <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return func() cloudMemory {
		close(done)
		return <-result
	}
}
