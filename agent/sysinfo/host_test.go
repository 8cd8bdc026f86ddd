package sysinfo

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestReaderHost(t *testing.T) {
	tests := []struct {
		name       string
		dir        string
		cpuCount   int // 0 means runtime.NumCPU()
		cpu        CPU
		mem        Memory
		load       []string
		tuned      string
		wantErr    string // substring; "" means no error
		loadAbsent bool
	}{
		{
			name:     "debian vm matches the observed upstream example",
			dir:      "debian-vm",
			cpuCount: 2,
			cpu:      CPU{Total: 89385, User: "17927", System: "6155", SoftIRQ: "162"},
			mem:      Memory{Total: 24684092, Free: 23681224, Buffers: 13164, Cached: 700568, SwapUsed: 0, Shared: 8856, Slab: 145412},
			load:     []string{"0.59", "0.60", "0.30"},
			tuned:    "amphora",
		},
		{
			name:     "offline cpu, guest columns summed, tuned trimmed",
			dir:      "offline-cpus",
			cpuCount: 3,
			cpu:      CPU{Total: 1178, User: "100", System: "50", SoftIRQ: "4"},
			mem:      Memory{Total: 2030000, Free: 500000, Buffers: 1000, Cached: 20000, SwapUsed: 4096, Shared: 300, Slab: 40000},
			load:     []string{"12.00", "3.50", "0.01"},
			tuned:    "amphora  throughput-performance",
		},
		{
			name:  "no per-cpu lines falls back to NumCPU, missing key is 0, no tuned file",
			dir:   "no-percpu",
			cpu:   CPU{Total: 28, User: "1", System: "3", SoftIRQ: "7"},
			mem:   Memory{Total: 1000, Free: 900, Buffers: 1, Cached: 2, SwapUsed: 3, Slab: 5},
			load:  []string{"0.00", "0.00", "0.00"},
			tuned: "",
		},
		{
			name:     "non-numeric cpu column is an error, the rest is still read",
			dir:      "bad-stat",
			cpuCount: 1,
			mem:      Memory{Total: 24684092, Free: 23681224, Buffers: 13164, Cached: 700568, SwapUsed: 0, Shared: 8856, Slab: 145412},
			load:     []string{"0.59", "0.60", "0.30"},
			wantErr:  `cpu column "x"`,
		},
		{
			name:       "missing loadavg is an error, the rest is still read",
			dir:        "missing-loadavg",
			cpuCount:   2,
			cpu:        CPU{Total: 89385, User: "17927", System: "6155", SoftIRQ: "162"},
			mem:        Memory{Total: 24684092, Free: 23681224, Buffers: 13164, Cached: 700568, SwapUsed: 0, Shared: 8856, Slab: 145412},
			wantErr:    "loadavg",
			loadAbsent: true,
		},
	}
	wantHost, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := filepath.Join("testdata", tt.dir)
			r := Reader{
				ProcDir:          filepath.Join(base, "proc"),
				TunedProfileFile: filepath.Join(base, "active_profile"),
				DiskPath:         t.TempDir(),
			}
			h, err := r.Host()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Host() error = %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Host() error = %v, want one containing %q", err, tt.wantErr)
			}
			wantCount := tt.cpuCount
			if wantCount == 0 {
				wantCount = runtime.NumCPU()
			}
			if h.Hostname != wantHost {
				t.Errorf("Hostname = %q, want %q", h.Hostname, wantHost)
			}
			if h.CPUCount != wantCount {
				t.Errorf("CPUCount = %d, want %d", h.CPUCount, wantCount)
			}
			if h.CPU != tt.cpu {
				t.Errorf("CPU = %+v, want %+v", h.CPU, tt.cpu)
			}
			if h.Memory != tt.mem {
				t.Errorf("Memory = %+v, want %+v", h.Memory, tt.mem)
			}
			if tt.loadAbsent {
				if h.Load != nil {
					t.Errorf("Load = %q, want nil", h.Load)
				}
			} else if !reflect.DeepEqual(h.Load, tt.load) {
				t.Errorf("Load = %q, want %q", h.Load, tt.load)
			}
			if h.TunedProfiles != tt.tuned {
				t.Errorf("TunedProfiles = %q, want %q", h.TunedProfiles, tt.tuned)
			}
			if h.Disk.Used < 0 || h.Disk.Available <= 0 {
				t.Errorf("Disk = %+v, want non-negative used and positive available", h.Disk)
			}
		})
	}
}

// The wire format matters to the controller: string cpu columns, integer
// kB memory, string load averages.
func TestHostJSON(t *testing.T) {
	r := Reader{
		ProcDir:          "testdata/debian-vm/proc",
		TunedProfileFile: "testdata/debian-vm/active_profile",
		DiskPath:         t.TempDir(),
	}
	h, err := r.Host()
	if err != nil {
		t.Fatal(err)
	}
	h.Hostname = "vm"
	h.Disk = Disk{Used: 12703412224, Available: 85089882112}
	got, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"hostname":"vm","cpu_count":2,"cpu":{"total":89385,"user":"17927","system":"6155","soft_irq":"162"},` +
		`"memory":{"total":24684092,"free":23681224,"buffers":13164,"cached":700568,"swap_used":0,"shared":8856,"slab":145412},` +
		`"disk":{"used":12703412224,"available":85089882112},"load":["0.59","0.60","0.30"],"active_tuned_profiles":"amphora"}`
	if string(got) != want {
		t.Errorf("JSON =\n%s\nwant\n%s", got, want)
	}
}

func TestDiskFromStatfs(t *testing.T) {
	tests := []struct {
		name string
		st   unix.Statfs_t
		want Disk
	}{
		{
			name: "fragment size is the unit",
			st:   unix.Statfs_t{Bsize: 4096, Frsize: 1024, Blocks: 1000, Bfree: 400, Bavail: 300},
			want: Disk{Used: 600 * 1024, Available: 300 * 1024},
		},
		{
			name: "zero fragment size falls back to block size",
			st:   unix.Statfs_t{Bsize: 4096, Blocks: 1000, Bfree: 400, Bavail: 300},
			want: Disk{Used: 600 * 4096, Available: 300 * 4096},
		},
		{
			// Bavail < Bfree because of root-reserved blocks; used counts them as free.
			name: "reserved blocks are neither used nor available",
			st:   unix.Statfs_t{Bsize: 4096, Frsize: 4096, Blocks: 25000000, Bfree: 21000000, Bavail: 19750000},
			want: Disk{Used: 4000000 * 4096, Available: 19750000 * 4096},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := diskFromStatfs(&tt.st); got != tt.want {
				t.Errorf("diskFromStatfs() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDiskUsageMatchesStatfs(t *testing.T) {
	dir := t.TempDir()
	got, err := diskUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	// Other processes may write between the two calls; allow a little drift.
	const slack = 64 << 20
	want := diskFromStatfs(&st)
	if d := got.Available - want.Available; d > slack || d < -slack {
		t.Errorf("Available = %d, statfs says %d", got.Available, want.Available)
	}
	if _, err := diskUsage(filepath.Join(dir, "missing")); err == nil {
		t.Error("diskUsage of a missing path succeeded")
	}
}

func TestTunedProfileLimit(t *testing.T) {
	dir := t.TempDir()
	long := filepath.Join(dir, "long")
	if err := os.WriteFile(long, []byte(strings.Repeat("a", 2000)), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := readTunedProfiles(long); len(got) != maxTunedProfileBytes {
		t.Errorf("len = %d, want %d", len(got), maxTunedProfileBytes)
	}
	// A two-byte character straddling the cap must not leave half a rune.
	split := filepath.Join(dir, "split")
	if err := os.WriteFile(split, []byte(strings.Repeat("a", maxTunedProfileBytes-1)+"é"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := readTunedProfiles(split); got != strings.Repeat("a", maxTunedProfileBytes-1) {
		t.Errorf("split rune: got %d bytes ending %q", len(got), got[len(got)-3:])
	}
	// A directory is unreadable as a file: treated as absent.
	if got := readTunedProfiles(dir); got != "" {
		t.Errorf("directory: got %q, want empty", got)
	}
}

func TestUtilization(t *testing.T) {
	cases := []struct {
		dir      string
		cpu, mem float64
	}{
		// psutil: 0.59 / 2 CPUs; (total - MemAvailable) / total.
		{"debian-vm", 0.59 / 2 * 100, float64(24684092-23970000) / 24684092 * 100},
		// No MemAvailable: free + buffers + cached count as available.
		{"offline-cpus", 12.0 / 3 * 100, float64(2030000-500000-1000-20000) / 2030000 * 100},
	}
	for _, c := range cases {
		cpu, mem, err := Reader{ProcDir: filepath.Join("testdata", c.dir, "proc")}.Utilization()
		if err != nil {
			t.Fatalf("%s: %v", c.dir, err)
		}
		if cpu != c.cpu || mem != c.mem {
			t.Errorf("%s: cpu %v mem %v, want %v %v", c.dir, cpu, mem, c.cpu, c.mem)
		}
	}
	if _, _, err := (Reader{ProcDir: filepath.Join("testdata", "missing-loadavg", "proc")}).Utilization(); err == nil {
		t.Error("no loadavg, no error")
	}
}
