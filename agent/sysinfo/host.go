// Package sysinfo gathers the host facts reported by GET /1.0/info and
// GET /1.0/details: package versions, CPU, memory, disk, load, TuneD profile
// and per-interface traffic inside the amphora network namespace.
//
// Load-balancer related fields and JSON encoding of the responses are left
// to the caller.
package sysinfo

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Default locations used when a Reader field is empty.
const (
	DefaultProcDir          = "/proc"
	DefaultTunedProfileFile = "/etc/tuned/active_profile"
	DefaultDiskPath         = "/"
)

// maxTunedProfileBytes bounds the TuneD read the same way upstream does.
const maxTunedProfileBytes = 1024

// Reader reads host facts on every request. The paths are configurable so
// tests can point them at fixtures; empty fields mean the defaults above.
type Reader struct {
	ProcDir          string
	TunedProfileFile string
	DiskPath         string
}

// CPU mirrors the "cpu" object of /1.0/details. User, System and SoftIRQ
// are strings because upstream passes the raw /proc/stat columns through.
type CPU struct {
	Total   int64  `json:"total"`
	User    string `json:"user"`
	System  string `json:"system"`
	SoftIRQ string `json:"soft_irq"`
}

// Memory mirrors the "memory" object of /1.0/details; all values are kB.
// SwapUsed is SwapCached, not SwapTotal-SwapFree: that is what upstream
// reports and the controller does not look at it.
type Memory struct {
	Total    int64 `json:"total"`
	Free     int64 `json:"free"`
	Buffers  int64 `json:"buffers"`
	Cached   int64 `json:"cached"`
	SwapUsed int64 `json:"swap_used"`
	Shared   int64 `json:"shared"`
	Slab     int64 `json:"slab"`
}

// Disk mirrors the "disk" object of /1.0/details; values are bytes.
type Disk struct {
	Used      int64 `json:"used"`
	Available int64 `json:"available"`
}

// Host is the system part of /1.0/details.
type Host struct {
	Hostname      string   `json:"hostname"`
	CPUCount      int      `json:"cpu_count"`
	CPU           CPU      `json:"cpu"`
	Memory        Memory   `json:"memory"`
	Disk          Disk     `json:"disk"`
	Load          []string `json:"load"`
	TunedProfiles string   `json:"active_tuned_profiles"`
}

func (r Reader) procDir() string {
	if r.ProcDir == "" {
		return DefaultProcDir
	}
	return r.ProcDir
}

func (r Reader) tunedProfileFile() string {
	if r.TunedProfileFile == "" {
		return DefaultTunedProfileFile
	}
	return r.TunedProfileFile
}

func (r Reader) diskPath() string {
	if r.DiskPath == "" {
		return DefaultDiskPath
	}
	return r.DiskPath
}

// Host reads all host facts. It is best effort: every source that can be
// read is filled in even when another fails, and the failures are returned
// joined, so the caller can decide between a partial answer and a 500.
// A missing TuneD file is not an error (tuned is optional).
func (r Reader) Host() (Host, error) {
	var h Host
	var errs []error

	name, err := os.Hostname()
	if err != nil {
		errs = append(errs, fmt.Errorf("hostname: %w", err))
	}
	h.Hostname = name

	if stat, err := os.ReadFile(filepath.Join(r.procDir(), "stat")); err != nil {
		errs = append(errs, err)
		h.CPUCount = runtime.NumCPU()
	} else {
		h.CPU, h.CPUCount, err = parseStat(stat)
		if err != nil {
			errs = append(errs, err)
		}
	}

	if mem, err := os.ReadFile(filepath.Join(r.procDir(), "meminfo")); err != nil {
		errs = append(errs, err)
	} else {
		h.Memory = parseMeminfo(mem)
	}

	if load, err := os.ReadFile(filepath.Join(r.procDir(), "loadavg")); err != nil {
		errs = append(errs, err)
	} else if h.Load, err = parseLoadavg(load); err != nil {
		errs = append(errs, err)
	}

	h.Disk, err = diskUsage(r.diskPath())
	if err != nil {
		errs = append(errs, err)
	}

	h.TunedProfiles = readTunedProfiles(r.tunedProfileFile())

	return h, errors.Join(errs...)
}

// parseStat extracts the aggregate "cpu" line and counts the per-CPU lines,
// which the kernel only prints for online CPUs. When no per-CPU line is
// present (unusual container setups) runtime.NumCPU is the best guess.
func parseStat(data []byte) (CPU, int, error) {
	var cpu CPU
	var found bool
	var parseErr error
	count := 0
	for line := range bytes.Lines(data) {
		fields := strings.Fields(string(line))
		if len(fields) == 0 || !strings.HasPrefix(fields[0], "cpu") {
			continue
		}
		if fields[0] == "cpu" {
			if found {
				continue
			}
			found = true
			cpu, parseErr = parseCPULine(fields)
			continue
		}
		if _, err := strconv.Atoi(fields[0][len("cpu"):]); err == nil {
			count++
		}
	}
	if count == 0 {
		count = runtime.NumCPU()
	}
	if !found {
		return cpu, count, errors.New("stat: no aggregate cpu line")
	}
	return cpu, count, parseErr
}

// parseCPULine handles "cpu user nice system idle iowait irq softirq ...".
// Upstream requires every column to be an integer for the total, so a
// malformed column is an error here too.
func parseCPULine(fields []string) (CPU, error) {
	// softirq is the 7th value column, present since Linux 2.6.0.
	if len(fields) < 8 {
		return CPU{}, fmt.Errorf("stat: cpu line has %d columns, want at least 7", len(fields)-1)
	}
	var total int64
	for _, f := range fields[1:] {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return CPU{}, fmt.Errorf("stat: cpu column %q: %w", f, err)
		}
		total += v
	}
	return CPU{Total: total, User: fields[1], System: fields[3], SoftIRQ: fields[7]}, nil
}

// parseMeminfo reads the kB-valued lines; keys absent from the file stay 0
// rather than failing the whole request.
func parseMeminfo(data []byte) Memory {
	var m Memory
	readMeminfo(data, map[string]*int64{
		"MemTotal":   &m.Total,
		"MemFree":    &m.Free,
		"Buffers":    &m.Buffers,
		"Cached":     &m.Cached,
		"SwapCached": &m.SwapUsed,
		"Shmem":      &m.Shared,
		"Slab":       &m.Slab,
	})
	return m
}

// readMeminfo stores the values of the keys dst names.
func readMeminfo(data []byte, dst map[string]*int64) {
	for line := range bytes.Lines(data) {
		key, rest, ok := strings.Cut(string(line), ":")
		if !ok {
			continue
		}
		p, wanted := dst[key]
		if !wanted {
			continue
		}
		fields := strings.Fields(rest)
		// Only "<n> kB" lines carry sizes; upstream skips the others too.
		if len(fields) != 2 || fields[1] != "kB" {
			continue
		}
		if v, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
			*p = v
		}
	}
}

func parseLoadavg(data []byte) ([]string, error) {
	fields := strings.Fields(string(data))
	if len(fields) < 3 {
		return nil, fmt.Errorf("loadavg: %d fields, want at least 3", len(fields))
	}
	return fields[:3:3], nil
}

func diskUsage(path string) (Disk, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return Disk{}, &fs.PathError{Op: "statfs", Path: path, Err: err}
	}
	return diskFromStatfs(&st), nil
}

// diskFromStatfs follows statvfs semantics: sizes are in fragment units,
// and Linux reports Frsize 0 only on filesystems where it equals Bsize.
func diskFromStatfs(st *unix.Statfs_t) Disk {
	unit := uint64(st.Frsize)
	if st.Frsize <= 0 {
		unit = uint64(st.Bsize)
	}
	return Disk{
		Used:      int64((st.Blocks - st.Bfree) * unit),
		Available: int64(st.Bavail * unit),
	}
}

// readTunedProfiles returns "" on any error: upstream treats an unreadable
// profile like an absent one.
func readTunedProfiles(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxTunedProfileBytes))
	if err != nil {
		return ""
	}
	// The byte cap may split a multi-byte character; drop the fragment so
	// the JSON string stays valid.
	return strings.ToValidUTF8(strings.TrimSpace(string(data)), "")
}

// Utilization is the load balancer's CPU and memory use in percent, as
// upstream's prometheus-proxy computes them with psutil: the 1-minute load
// average over the online CPU count, and the share of memory that is not
// available (MemAvailable; on kernels without it, free plus buffers plus
// page cache). Nothing is rounded here.
func (r Reader) Utilization() (cpuPercent, memPercent float64, err error) {
	load1, err := r.load1()
	if err != nil {
		return 0, 0, err
	}
	stat, err := os.ReadFile(filepath.Join(r.procDir(), "stat"))
	if err != nil {
		return 0, 0, err
	}
	_, count, _ := parseStat(stat)
	cpuPercent = load1 / float64(count) * 100

	mem, err := os.ReadFile(filepath.Join(r.procDir(), "meminfo"))
	if err != nil {
		return 0, 0, err
	}
	m := parseMeminfo(mem)
	if m.Total <= 0 {
		return 0, 0, errors.New("meminfo: no MemTotal")
	}
	avail := int64(-1)
	readMeminfo(mem, map[string]*int64{"MemAvailable": &avail})
	if avail < 0 {
		avail = m.Free + m.Buffers + m.Cached
	}
	if avail > m.Total {
		avail = m.Free
	}
	return cpuPercent, float64(m.Total-avail) / float64(m.Total) * 100, nil
}

// load1 is the 1-minute load average. On the host it comes from
// sysinfo(2), as glibc's getloadavg (psutil's source) takes it: finer
// than the two decimals of /proc/loadavg, which a Reader pointed at a
// fixture reads instead.
func (r Reader) load1() (float64, error) {
	if r.ProcDir == "" {
		var si unix.Sysinfo_t
		if err := unix.Sysinfo(&si); err != nil {
			return 0, fmt.Errorf("sysinfo: %w", err)
		}
		return float64(si.Loads[0]) / (1 << unix.SI_LOAD_SHIFT), nil
	}
	data, err := os.ReadFile(filepath.Join(r.procDir(), "loadavg"))
	if err != nil {
		return 0, err
	}
	fields, err := parseLoadavg(data)
	if err != nil {
		return 0, err
	}
	load, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return 0, fmt.Errorf("loadavg: %w", err)
	}
	return load, nil
}
