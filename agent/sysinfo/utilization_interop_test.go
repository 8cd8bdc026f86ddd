//go:build interop

package sysinfo

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The CPU and memory gauges of the metrics endpoint are what upstream's
// prometheus-proxy prints from psutil on this host: read both ways close
// together until the host holds still between the two readings (the load
// average moves every 5 s, memory all the time).
func TestInteropUtilizationMatchesPsutil(t *testing.T) {
	script := `import os, psutil
print(f"{(psutil.getloadavg()[0] / os.cpu_count()) * 100:.1f} {psutil.virtual_memory()[2]:.1f}")`
	if err := exec.Command("/usr/bin/python3", "-c", "import psutil").Run(); err != nil {
		t.Skip("python3-psutil is not installed (python3-octavia depends on it)")
	}
	var last string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		out, err := exec.Command("/usr/bin/python3", "-c", script).Output()
		if err != nil {
			t.Fatal(err)
		}
		cpu, mem, err := Reader{}.Utilization()
		if err != nil {
			t.Fatal(err)
		}
		ours := strconv.FormatFloat(cpu, 'f', 1, 64) + " " + strconv.FormatFloat(mem, 'f', 1, 64)
		theirs := strings.TrimSpace(string(out))
		if ours == theirs {
			t.Logf("cpu and memory %s, as psutil", ours)
			return
		}
		last = "agent " + ours + ", psutil " + theirs
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("never the same as psutil within 30 s; last: %s", last)
}
