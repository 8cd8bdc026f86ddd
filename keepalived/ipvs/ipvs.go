// Package ipvs reads the kernel's IPVS table inside a network namespace:
// the virtual services keepalived programs for UDP and SCTP listeners,
// their real servers with weights and connection counts, and the
// counters of both.
//
// Two kernel sources, each read once per call: /proc/net/ip_vs (weights
// and connection counts; no fork, read on a thread moved into the
// namespace) and `ipvsadm -Ln --stats --exact` (counters, which only the
// netlink interface gives; one short command in the namespace).
// Upstream runs ipvsadm twice and cat once per heartbeat. Netlink through
// github.com/cloudflare/ipvs would spare the one command but bring a
// netlink module stack for two dump calls; ipvsadm's text is what upstream
// parses and an operator reads, and the parsers are tested on output
// recorded from the VM image's kernel (testdata). Without the ip_vs module
// the table is empty.
package ipvs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/procgroup"
	"github.com/amphora-agent/amphora-agent/netns"
)

// Stats are the kernel's counters of a virtual service or a real server.
type Stats struct {
	Conns    uint64 // connections (UDP: flows) scheduled
	InPkts   uint64 // packets from clients
	OutPkts  uint64 // packets to clients
	InBytes  uint64 // bytes from clients
	OutBytes uint64 // bytes to clients
}

func (s *Stats) Add(o Stats) {
	s.Conns += o.Conns
	s.InPkts += o.InPkts
	s.OutPkts += o.OutPkts
	s.InBytes += o.InBytes
	s.OutBytes += o.OutBytes
}

// Key names a virtual service: protocol (TCP, UDP, SCTP) and address.
// Firewall-mark services are not read.
type Key struct {
	Protocol string
	Addr     netip.AddrPort
}

func (k Key) String() string { return k.Protocol + " " + k.Addr.String() }

// Service is one virtual service.
type Service struct {
	Key
	Scheduler string
	Stats     Stats
	Dests     []Dest
}

// Dest is one real server of a virtual service.
type Dest struct {
	Addr       netip.AddrPort
	Forward    string // Masq, Route, Tunnel, ...
	Weight     int
	ActiveConn uint64
	InActConn  uint64
	Stats      Stats
}

// Table is the namespace's virtual services in the kernel's order.
type Table struct {
	Services []Service
}

// Service returns the virtual service k, or nil.
func (t Table) Service(k Key) *Service {
	for i := range t.Services {
		if t.Services[i].Key == k {
			return &t.Services[i]
		}
	}
	return nil
}

// Reader reads the IPVS table (Kernel; fakes in tests).
type Reader interface {
	Read(ctx context.Context) (Table, error)
}

// Kernel reads the table of the processes in Namespace ("" is the
// caller's own).
type Kernel struct {
	Namespace string
	// Ipvsadm is the command (default "ipvsadm", looked up in PATH).
	Ipvsadm string
	// Timeout bounds the ipvsadm run (default 5 s).
	Timeout time.Duration
}

func (k Kernel) Read(ctx context.Context) (Table, error) {
	var procData []byte
	err := netns.Do(k.Namespace, func() error {
		var err error
		procData, err = os.ReadFile("/proc/thread-self/net/ip_vs")
		return err
	})
	if errors.Is(err, fs.ErrNotExist) {
		// The ip_vs module is not loaded: no virtual service exists.
		return Table{}, nil
	}
	if err != nil {
		return Table{}, fmt.Errorf("reading the IPVS table: %w", err)
	}
	t, err := ParseProc(procData)
	if err != nil {
		return Table{}, err
	}
	if len(t.Services) == 0 {
		// Nothing to count: spare the command.
		return t, nil
	}
	cmdName, timeout := k.Ipvsadm, k.Timeout
	if cmdName == "" {
		cmdName = "ipvsadm"
	}
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := procgroup.Command(ctx, cmdName, "-Ln", "--stats", "--exact")
	var out bytes.Buffer
	cmd.Stdout = &out
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := procgroup.Run(cmd, func(c *exec.Cmd) error { return netns.StartIn(k.Namespace, c) }); err != nil {
		return Table{}, fmt.Errorf("%s -Ln --stats --exact: %w: %s", cmdName, err, strings.TrimSpace(errOut.String()))
	}
	counted, err := ParseStats(out.Bytes())
	if err != nil {
		return Table{}, err
	}
	Merge(&t, counted)
	return t, nil
}

// Merge copies counted's counters into t's services and real servers of
// the same keys and addresses (the two reads are not one snapshot: a
// service or server only one of them saw keeps what that one said).
func Merge(t *Table, counted Table) {
	for i := range t.Services {
		s := &t.Services[i]
		c := counted.Service(s.Key)
		if c == nil {
			continue
		}
		s.Stats = c.Stats
		for j := range s.Dests {
			for _, cd := range c.Dests {
				if cd.Addr == s.Dests[j].Addr {
					s.Dests[j].Stats = cd.Stats
					break
				}
			}
		}
	}
}

// ParseProc parses /proc/net/ip_vs: services as
// `UDP  CB00710A:0035 rr [flags]` (IPv6 `[2001:0db8:…]:0035`), real
// servers as `  -> C000021F:0035 Masq 1 0 3` (address, forwarding,
// weight, active and inactive connections). Firewall-mark services and
// their servers are skipped.
func ParseProc(data []byte) (Table, error) {
	var t Table
	var cur *Service // nil while inside a skipped service
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		f := strings.Fields(line)
		switch {
		case len(f) == 0 || n <= 3 && isHeader(f):
		case f[0] == "->":
			if cur == nil {
				continue
			}
			if len(f) < 6 {
				return Table{}, fmt.Errorf("/proc/net/ip_vs line %d: %q: too few fields", n, line)
			}
			addr, err := parseHexAddrPort(f[1])
			if err != nil {
				return Table{}, fmt.Errorf("/proc/net/ip_vs line %d: %w", n, err)
			}
			d := Dest{Addr: addr, Forward: f[2]}
			w, err1 := strconv.Atoi(f[3])
			ac, err2 := strconv.ParseUint(f[4], 10, 64)
			ic, err3 := strconv.ParseUint(f[5], 10, 64)
			if err1 != nil || err2 != nil || err3 != nil {
				return Table{}, fmt.Errorf("/proc/net/ip_vs line %d: %q: bad number", n, line)
			}
			d.Weight, d.ActiveConn, d.InActConn = w, ac, ic
			cur.Dests = append(cur.Dests, d)
		case f[0] == "FWM":
			cur = nil
		default:
			if len(f) < 3 {
				return Table{}, fmt.Errorf("/proc/net/ip_vs line %d: %q: too few fields", n, line)
			}
			addr, err := parseHexAddrPort(f[1])
			if err != nil {
				return Table{}, fmt.Errorf("/proc/net/ip_vs line %d: %w", n, err)
			}
			t.Services = append(t.Services, Service{Key: Key{Protocol: f[0], Addr: addr}, Scheduler: f[2]})
			cur = &t.Services[len(t.Services)-1]
		}
	}
	return t, sc.Err()
}

// isHeader recognises the three title lines both outputs start with.
func isHeader(f []string) bool {
	return f[0] == "IP" || f[0] == "Prot" || (f[0] == "->" && len(f) > 1 && f[1] == "RemoteAddress:Port")
}

// parseHexAddrPort reads the kernel's `CB00710A:0035` or
// `[2001:0db8:…:0010]:0035`.
func parseHexAddrPort(s string) (netip.AddrPort, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return netip.AddrPort{}, fmt.Errorf("address %q: no port", s)
	}
	port, err := strconv.ParseUint(s[i+1:], 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q: port: %w", s, err)
	}
	host := s[:i]
	var addr netip.Addr
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		addr, err = netip.ParseAddr(host[1 : len(host)-1])
	} else {
		// Network byte order, as the kernel prints it.
		var b []byte
		if b, err = hex.DecodeString(host); err == nil && len(b) == 4 {
			addr = netip.AddrFrom4([4]byte(b))
		} else if err == nil {
			err = fmt.Errorf("not 8 hex digits")
		}
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q: %w", s, err)
	}
	return netip.AddrPortFrom(addr, uint16(port)), nil
}

// ParseStats parses `ipvsadm -Ln --stats --exact`: services as
// `UDP  203.0.113.10:53  Conns InPkts OutPkts InBytes OutBytes`
// (IPv6 `[2001:db8::10]:53`), real servers as the same after `->`.
// Firewall-mark services and their servers are skipped.
func ParseStats(data []byte) (Table, error) {
	var t Table
	var cur *Service
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 || n <= 3 && isHeader(f) {
			continue
		}
		dest := f[0] == "->"
		if dest {
			f = f[1:]
		}
		if !dest && f[0] == "FWM" {
			cur = nil
			continue
		}
		if dest && cur == nil {
			continue
		}
		if !dest {
			if len(f) < 2 {
				return Table{}, fmt.Errorf("ipvsadm line %d: %q: too few fields", n, line)
			}
			f = f[1:] // the protocol, kept below
		}
		if len(f) != 6 {
			return Table{}, fmt.Errorf("ipvsadm line %d: %q: want an address and 5 counters", n, line)
		}
		addr, err := netip.ParseAddrPort(f[0])
		if err != nil {
			return Table{}, fmt.Errorf("ipvsadm line %d: %w", n, err)
		}
		var v [5]uint64
		for i := range v {
			if v[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
				return Table{}, fmt.Errorf("ipvsadm line %d: %q: %w (run with --exact)", n, line, err)
			}
		}
		st := Stats{Conns: v[0], InPkts: v[1], OutPkts: v[2], InBytes: v[3], OutBytes: v[4]}
		if dest {
			cur.Dests = append(cur.Dests, Dest{Addr: addr, Stats: st})
			continue
		}
		proto := strings.Fields(line)[0]
		t.Services = append(t.Services, Service{Key: Key{Protocol: proto, Addr: addr}, Stats: st})
		cur = &t.Services[len(t.Services)-1]
	}
	return t, sc.Err()
}
