package netns

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// AdvertiseWith tells the neighbours of the namespace that each address lives
// here now: a gratuitous ARP request for IPv4, an unsolicited neighbour
// advertisement (Router and Override flags, target link-layer address
// option) to all nodes for IPv6, sent on the interface inside the
// namespace that holds the address. Addresses not present in the
// namespace are skipped (on the backup amphora keepalived has not added
// the VIP); a failure for one address does not stop the others. The
// error joins what failed; callers that only advertise as a courtesy, as
// upstream does, log it and go on. Skipped addresses are logged to log at
// debug level (zap.L() when nil).
func AdvertiseWith(ctx context.Context, namespace string, addrs []netip.Addr, log *zap.Logger) error {
	if log == nil {
		log = zap.L()
	}
	if len(addrs) == 0 {
		return nil
	}
	holders, err := addressHolders(namespace)
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range addrs {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, err)...)
		}
		a = a.Unmap()
		ifc, ok := holders[a]
		if !ok {
			log.Debug("address not in the namespace; not advertised",
				zap.String("namespace", namespace), zap.Stringer("address", a))
			continue
		}
		var err error
		if a.Is4() {
			err = onThreadIn(namespace, func() error { return sendGARP(ifc, a) })
		} else {
			err = onThreadIn(namespace, func() error { return sendUnsolicitedNA(ifc, a) })
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("advertise %s on %s: %w", a, ifc.name, err))
		}
	}
	return errors.Join(errs...)
}

type holder struct {
	index int
	name  string
	mac   net.HardwareAddr
}

// addressHolders maps every address inside the namespace to the link that
// carries it.
func addressHolders(namespace string) (map[netip.Addr]holder, error) {
	h, err := openHandle(namespace)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	links, err := retryDump(h.LinkList)
	if err != nil {
		return nil, fmt.Errorf("list links in %s: %w", namespace, err)
	}
	byIndex := make(map[int]holder, len(links))
	for _, l := range links {
		a := l.Attrs()
		byIndex[a.Index] = holder{index: a.Index, name: a.Name, mac: a.HardwareAddr}
	}
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return h.AddrList(nil, unix.AF_UNSPEC) })
	if err != nil {
		return nil, fmt.Errorf("list addresses in %s: %w", namespace, err)
	}
	out := make(map[netip.Addr]holder, len(addrs))
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		if l, ok := byIndex[a.LinkIndex]; ok {
			out[ip.Unmap()] = l
		}
	}
	return out, nil
}

// sendGARP sends, on a packet socket of the calling thread's namespace, an
// ARP request whose sender and target protocol addresses are both ip, to
// the Ethernet broadcast address.
func sendGARP(ifc holder, ip netip.Addr) error {
	if len(ifc.mac) != 6 {
		return fmt.Errorf("interface %s has no Ethernet address", ifc.name)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ARP)))
	if err != nil {
		return fmt.Errorf("packet socket: %w", err)
	}
	defer unix.Close(fd)
	frame := garpFrame(ifc.mac, ip)
	to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: ifc.index, Halen: 6}
	copy(to.Addr[:], broadcastMAC)
	return unix.Sendto(fd, frame, 0, to)
}

var broadcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

func garpFrame(mac net.HardwareAddr, ip netip.Addr) []byte {
	b := make([]byte, 0, 42)
	b = append(b, broadcastMAC...)
	b = append(b, mac...)
	b = binary.BigEndian.AppendUint16(b, unix.ETH_P_ARP)
	b = binary.BigEndian.AppendUint16(b, 1)      // hardware type: Ethernet
	b = binary.BigEndian.AppendUint16(b, 0x0800) // protocol type: IPv4
	b = append(b, 6, 4)                          // address sizes
	b = binary.BigEndian.AppendUint16(b, 1)      // opcode: request
	b = append(b, mac...)
	v4 := ip.As4()
	b = append(b, v4[:]...)
	b = append(b, broadcastMAC...)
	return append(b, v4[:]...)
}

// sendUnsolicitedNA sends a neighbour advertisement for ip to ff02::1 from
// a raw ICMPv6 socket bound to ip (the kernel fills in the checksum), hop
// limit 255 as neighbour discovery requires.
func sendUnsolicitedNA(ifc holder, ip netip.Addr) error {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)
	if err != nil {
		return fmt.Errorf("icmpv6 socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, 255); err != nil {
		return err
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, ifc.index); err != nil {
		return err
	}
	src := &unix.SockaddrInet6{Addr: ip.As16()}
	if ip.IsLinkLocalUnicast() {
		src.ZoneId = uint32(ifc.index)
	}
	if err := unix.Bind(fd, src); err != nil {
		return fmt.Errorf("bind %s: %w", ip, err)
	}
	dst := &unix.SockaddrInet6{Addr: netip.MustParseAddr("ff02::1").As16(), ZoneId: uint32(ifc.index)}
	return unix.Sendto(fd, naMessage(ifc.mac, ip), 0, dst)
}

func naMessage(mac net.HardwareAddr, ip netip.Addr) []byte {
	b := make([]byte, 0, 32)
	b = append(b, 136, 0, 0, 0)                      // type, code, checksum (kernel)
	b = binary.BigEndian.AppendUint32(b, 0xa0000000) // Router, Override
	t := ip.As16()
	b = append(b, t[:]...)
	if len(mac) == 6 {
		b = append(b, 2, 1) // option: target link-layer address, 8 bytes
		b = append(b, mac...)
	}
	return b
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// dumpAttempts bounds retries of a netlink dump the kernel marked as
// interrupted (the table changed while it was read).
const dumpAttempts = 5

// retryDump repeats an interrupted dump; after the last attempt the
// interruption is an error, since plugging decisions need a consistent
// view.
func retryDump[T any](dump func() (T, error)) (T, error) {
	var (
		v   T
		err error
	)
	for range dumpAttempts {
		v, err = dump()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return v, err
		}
	}
	return v, err
}
