// Package sctpcheck is the SCTP member health probe keepalived runs for
// SCTP pools (MISC_CHECK), upstream's amphora-health-checker: one INIT
// sent on a raw socket, the answer's chunk type is the verdict, and an
// ABORT ends the half-open exchange.
//
// Raw sockets, as upstream, rather than the kernel's SCTP stack: an
// amphora's kernel needs no sctp module for IPVS to balance SCTP, so the
// probe must work without one, and only the raw exchange tells an ABORT
// (port closed) from silence (host gone) from an unexpected chunk.
package sctpcheck

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// Result is the probe's verdict; its value is upstream's exit code.
type Result int

const (
	Up      Result = 0 // INIT ACK: something listens
	Down    Result = 1 // ABORT: nothing listens on the port
	Timeout Result = 2 // no answer in time
	Other   Result = 3 // another chunk type answered
)

// Chunk types (RFC 9260 §3.2) the probe sends or reads.
const (
	ChunkInit    = 1
	ChunkInitAck = 2
	ChunkAbort   = 6
)

const (
	HeaderLen = 12 // common header: ports, verification tag, checksum
	// The INIT's advertised receive window and stream counts, upstream's.
	initRwnd      = 106496
	initOutbound  = 10
	initInbound   = 65535
	abortFlagTBit = 1 // the verification tag is the sender's own
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Packet is a common header and its chunks (each padded, as Chunk makes
// them), with its CRC32c (stored little-endian, RFC 9260 Appendix A).
func Packet(srcPort, dstPort uint16, vtag uint32, chunks []byte) []byte {
	b := make([]byte, HeaderLen, HeaderLen+len(chunks))
	binary.BigEndian.PutUint16(b[0:], srcPort)
	binary.BigEndian.PutUint16(b[2:], dstPort)
	binary.BigEndian.PutUint32(b[4:], vtag)
	b = append(b, chunks...)
	binary.LittleEndian.PutUint32(b[8:], crc32.Checksum(b, castagnoli))
	return b
}

// Chunk is one chunk: type, flags, length (without the padding) and
// value, padded to 4 bytes.
func Chunk(typ, flags byte, value []byte) []byte {
	n := 4 + len(value)
	c := make([]byte, 4, n+3)
	c[0], c[1] = typ, flags
	binary.BigEndian.PutUint16(c[2:], uint16(n))
	c = append(c, value...)
	return append(c, make([]byte, (4-n%4)%4)...)
}

// Strip returns the SCTP packet of what a raw socket read: IPv4 raw
// sockets deliver the IP header too, IPv6 ones do not. Nil if too short.
func Strip(data []byte, ipv4 bool) []byte {
	if ipv4 {
		if len(data) < 1 || len(data) < int(data[0]&0x0f)*4 {
			return nil
		}
		data = data[int(data[0]&0x0f)*4:]
	}
	if len(data) < HeaderLen {
		return nil
	}
	return data
}

// InitPacket is an INIT without parameters; tag is the initiate tag the
// answer must carry as its verification tag.
func InitPacket(srcPort, dstPort uint16, tag, tsn uint32) []byte {
	v := make([]byte, 16)
	binary.BigEndian.PutUint32(v[0:], tag)
	binary.BigEndian.PutUint32(v[4:], initRwnd)
	binary.BigEndian.PutUint16(v[8:], initOutbound)
	binary.BigEndian.PutUint16(v[10:], initInbound)
	binary.BigEndian.PutUint32(v[12:], tsn)
	return Packet(srcPort, dstPort, 0, Chunk(ChunkInit, 0, v))
}

// abortPacket aborts the exchange an INIT with this tag started.
func abortPacket(srcPort, dstPort uint16, tag uint32) []byte {
	return Packet(srcPort, dstPort, tag, Chunk(ChunkAbort, abortFlagTBit, nil))
}

// answer returns the first chunk type of a packet that answers our INIT
// (ports swapped, our tag), or false.
func answer(data []byte, ipv4 bool, srcPort, dstPort uint16, tag uint32) (byte, bool) {
	data = Strip(data, ipv4)
	if len(data) < HeaderLen+4 ||
		binary.BigEndian.Uint16(data[0:]) != dstPort ||
		binary.BigEndian.Uint16(data[2:]) != srcPort ||
		binary.BigEndian.Uint32(data[4:]) != tag {
		return 0, false
	}
	return data[HeaderLen], true
}

// Probe sends an INIT to addr:port and waits up to timeout for the
// answer, writing upstream's progress lines to w. An error means no
// probe could be sent (no permission for a raw socket, bad address).
func Probe(ctx context.Context, addr netip.Addr, port uint16, timeout time.Duration, w io.Writer) (Result, error) {
	family, sa, err := Sockaddr(addr)
	if err != nil {
		return Down, err
	}
	fd, err := unix.Socket(family, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
	if err != nil {
		return Down, fmt.Errorf("raw SCTP socket: %w", err)
	}
	defer unix.Close(fd)
	// Connected: the socket receives only what the member sends.
	if err := unix.Connect(fd, sa); err != nil {
		return Down, fmt.Errorf("connect to %s: %w", addr, err)
	}

	tag := rand.Uint32N(^uint32(0)) + 1 // never 0: an INIT's tag is not
	srcPort := uint16(1024 + rand.IntN(65536-1024))
	fmt.Fprintf(w, "Sending INIT packet to %s:%d\n", addr, port)
	if _, err := unix.Write(fd, InitPacket(srcPort, port, tag, rand.Uint32())); err != nil {
		return Down, fmt.Errorf("send INIT to %s: %w", addr, err)
	}

	res, err := wait(ctx, fd, family == unix.AF_INET, srcPort, port, tag, timeout, w)
	if err != nil {
		return Down, err
	}
	if res == Up || res == Other {
		// A kernel with SCTP aborts the unknown INIT ACK itself; one
		// without does not, and the member would keep its half-open
		// state. A second ABORT is discarded as out of the blue.
		fmt.Fprintln(w, "Sending ABORT packet")
		unix.Write(fd, abortPacket(srcPort, port, tag))
	}
	return res, nil
}

// wait reads until an answer to the INIT arrives or the time is up.
func wait(ctx context.Context, fd int, ipv4 bool, srcPort, dstPort uint16, tag uint32, timeout time.Duration, w io.Writer) (Result, error) {
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	buf := make([]byte, 2048)
	for {
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			fmt.Fprintf(w, "Timeout after %v.\n", timeout)
			return Timeout, nil
		}
		// Poll in short slices so a cancelled context ends the wait.
		slice := min(left, 200*time.Millisecond)
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, int(slice.Milliseconds())+1)
		if errors.Is(err, unix.EINTR) || n == 0 {
			continue
		}
		if err != nil {
			return Down, fmt.Errorf("poll: %w", err)
		}
		m, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return Down, fmt.Errorf("receive: %w", err)
		}
		typ, ok := answer(buf[:m], ipv4, srcPort, dstPort, tag)
		if !ok {
			continue
		}
		switch typ {
		case ChunkInitAck:
			fmt.Fprintln(w, "Received INIT ACK")
			return Up, nil
		case ChunkAbort:
			fmt.Fprintln(w, "Received ABORT")
			return Down, nil
		default:
			fmt.Fprintf(w, "Received %d Type chunk\n", typ)
			return Other, nil
		}
	}
}

// Sockaddr is a raw socket's address, its family first; the port stays
// 0 (an IPv6 raw socket would take it for the protocol).
func Sockaddr(addr netip.Addr) (int, unix.Sockaddr, error) {
	if addr.Is4() {
		return unix.AF_INET, &unix.SockaddrInet4{Addr: addr.As4()}, nil
	}
	if !addr.Is6() {
		return 0, nil, fmt.Errorf("invalid address %s", addr)
	}
	sa := &unix.SockaddrInet6{Addr: addr.As16()}
	if z := addr.Zone(); z != "" {
		ifi, err := net.InterfaceByName(z)
		if err != nil {
			return 0, nil, fmt.Errorf("address %s: %w", addr, err)
		}
		sa.ZoneId = uint32(ifi.Index)
	}
	return unix.AF_INET6, sa, nil
}
