package sctpcheck

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestPackets checks the INIT and ABORT bytes field by field, and the
// checksum against RFC 9260's algorithm run on the zeroed field.
func TestPackets(t *testing.T) {
	init := InitPacket(4000, 5000, 0x11223344, 0x55667788)
	want := []byte{
		0x0f, 0xa0, 0x13, 0x88, // ports
		0, 0, 0, 0, // an INIT's verification tag is 0
		0, 0, 0, 0, // checksum, filled below
		1, 0, 0, 20, // INIT, no flags, 20 bytes
		0x11, 0x22, 0x33, 0x44, // initiate tag
		0, 1, 0xa0, 0, // a_rwnd 106496
		0, 10, 0xff, 0xff, // 10 outbound, 65535 inbound streams
		0x55, 0x66, 0x77, 0x88, // initial TSN
	}
	binary.LittleEndian.PutUint32(want[8:], crc32.Checksum(want, crc32.MakeTable(crc32.Castagnoli)))
	if !bytes.Equal(init, want) {
		t.Errorf("INIT\n% x\nwant\n% x", init, want)
	}
	// The RFC's test: the CRC32c of 32 zero bytes is 0x8a9136aa.
	if got := crc32.Checksum(make([]byte, 32), castagnoli); got != 0x8a9136aa {
		t.Errorf("CRC32c of 32 zero bytes = %#x", got)
	}
	abort := abortPacket(4000, 5000, 0x11223344)
	if got := abort[:8]; !bytes.Equal(got, []byte{0x0f, 0xa0, 0x13, 0x88, 0x11, 0x22, 0x33, 0x44}) {
		t.Errorf("ABORT header % x", got)
	}
	if got := abort[12:]; !bytes.Equal(got, []byte{6, 1, 0, 4}) {
		t.Errorf("ABORT chunk % x, want T bit set, no causes", got)
	}
}

func TestAnswer(t *testing.T) {
	reply := func(src, dst uint16, tag uint32, typ byte) []byte {
		return Packet(src, dst, tag, []byte{typ, 0, 0, 4})
	}
	ipHeader := make([]byte, 24) // IHL 6: options are skipped too
	ipHeader[0] = 0x46
	cases := []struct {
		name string
		data []byte
		ipv4 bool
		typ  byte
		ok   bool
	}{
		{"INIT ACK", reply(5000, 4000, 7, ChunkInitAck), false, ChunkInitAck, true},
		{"ABORT over IPv4", append(ipHeader, reply(5000, 4000, 7, ChunkAbort)...), true, ChunkAbort, true},
		{"other tag", reply(5000, 4000, 8, ChunkInitAck), false, 0, false},
		{"other port", reply(5001, 4000, 7, ChunkInitAck), false, 0, false},
		{"our own INIT", InitPacket(4000, 5000, 7, 1), false, 0, false},
		{"short", reply(5000, 4000, 7, ChunkInitAck)[:15], false, 0, false},
		{"empty IPv4", nil, true, 0, false},
	}
	for _, c := range cases {
		typ, ok := answer(c.data, c.ipv4, 4000, 5000, 7)
		if typ != c.typ || ok != c.ok {
			t.Errorf("%s: %d %v, want %d %v", c.name, typ, ok, c.typ, c.ok)
		}
	}
}

// rawSCTP opens a raw SCTP socket, or skips: they need CAP_NET_RAW. The
// caller closes it.
func rawSCTP(t *testing.T, family int) int {
	t.Helper()
	fd, err := unix.Socket(family, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		t.Skip("sctpcheck: raw sockets need root (CAP_NET_RAW)")
	}
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

// responder plays a member on loopback with a raw socket (no kernel SCTP
// needed): each INIT to port gets a packet of chunk type answer with the
// INIT's tag, or nothing when answer is 0. It returns what the probe
// sent after the INIT (the ABORT, if any) through the channel. The
// goroutine closes its socket itself and the test waits for it: a socket
// closed under it would let it read from the next test's socket, which
// reuses the descriptor number.
func responder(t *testing.T, family int, port uint16, answer byte) <-chan []byte {
	fd := rawSCTP(t, family)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	ipv4 := family == unix.AF_INET
	after := make(chan []byte, 1)
	go func() {
		defer close(done)
		defer unix.Close(fd)
		buf := make([]byte, 2048)
		var peer unix.Sockaddr
		var tag uint32
		var src uint16
		for ctx.Err() == nil {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			if n, _ := unix.Poll(pfd, 50); n <= 0 {
				continue
			}
			n, from, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT)
			if err != nil {
				continue
			}
			p := buf[:n]
			if ipv4 {
				p = p[int(p[0]&0x0f)*4:]
			}
			if len(p) < 16 || binary.BigEndian.Uint16(p[2:]) != port {
				continue
			}
			switch {
			case p[12] == ChunkInit && tag == 0:
				src, tag, peer = binary.BigEndian.Uint16(p[0:]), binary.BigEndian.Uint32(p[16:]), from
				if answer != 0 {
					unix.Sendto(fd, Packet(port, src, tag, []byte{answer, 0, 0, 4}), 0, peer)
				}
			case tag != 0 && binary.BigEndian.Uint16(p[0:]) == src:
				after <- append([]byte(nil), p...)
				return
			}
		}
	}()
	return after
}

func TestProbeFakeMember(t *testing.T) {
	for _, c := range []struct {
		name   string
		family int
		addr   string
		answer byte
		want   Result
		abort  bool
		output string
	}{
		{"INIT ACK", unix.AF_INET, "127.0.0.1", ChunkInitAck, Up, true, "Received INIT ACK"},
		{"INIT ACK over IPv6", unix.AF_INET6, "::1", ChunkInitAck, Up, true, "Received INIT ACK"},
		{"ABORT", unix.AF_INET, "127.0.0.1", ChunkAbort, Down, false, "Received ABORT"},
		{"HEARTBEAT", unix.AF_INET, "127.0.0.1", 4, Other, true, "Received 4 Type chunk"},
		{"silence", unix.AF_INET, "127.0.0.1", 0, Timeout, false, "Timeout after"},
	} {
		t.Run(c.name, func(t *testing.T) {
			port := uint16(20000 + rand.IntN(20000))
			after := responder(t, c.family, port, c.answer)
			var out strings.Builder
			timeout := 2 * time.Second
			if c.answer == 0 {
				timeout = 300 * time.Millisecond
			}
			got, err := Probe(context.Background(), netip.MustParseAddr(c.addr), port, timeout, &out)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want || !strings.Contains(out.String(), c.output) {
				t.Errorf("probe = %d, output %q; want %d, %q", got, out.String(), c.want, c.output)
			}
			if !c.abort {
				return
			}
			select {
			case p := <-after:
				if len(p) < 16 || p[12] != ChunkAbort {
					t.Errorf("after the answer the probe sent % x, want an ABORT", p)
				}
			case <-time.After(2 * time.Second):
				t.Error("the probe sent no ABORT after the answer")
			}
		})
	}
}

// TestProbeKernelSCTP probes a real SCTP listener and a closed port on
// loopback, when this kernel has SCTP.
func TestProbeKernelSCTP(t *testing.T) {
	unix.Close(rawSCTP(t, unix.AF_INET))
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
	if errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.ESOCKTNOSUPPORT) {
		if _, statErr := os.Stat("/proc/net/sctp"); statErr != nil {
			t.Skipf("sctpcheck: this kernel has no SCTP (socket: %v); the fake member tests cover the probe", err)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 1); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(sa.(*unix.SockaddrInet4).Port)
	lo := netip.MustParseAddr("127.0.0.1")
	var out strings.Builder
	if got, err := Probe(context.Background(), lo, port, 2*time.Second, &out); err != nil || got != Up {
		t.Errorf("listening port: %d %v, want %d\n%s", got, err, Up, out.String())
	}
	unix.Close(fd)
	out.Reset()
	if got, err := Probe(context.Background(), lo, port, 2*time.Second, &out); err != nil || got != Down {
		t.Errorf("closed port: %d %v, want %d\n%s", got, err, Down, out.String())
	}
}

// TestChunk: chunks are padded to 4 bytes with their length unpadded (the
// packets' checksum is sctpchecktest's TestChecksumOK).
func TestChunk(t *testing.T) {
	if got := Chunk(0, 3, []byte("abcde")); !bytes.Equal(got, []byte{0, 3, 0, 9, 'a', 'b', 'c', 'd', 'e', 0, 0, 0}) {
		t.Errorf("chunk % x", got)
	}
	if got := Chunk(ChunkAbort, 1, nil); !bytes.Equal(got, []byte{6, 1, 0, 4}) {
		t.Errorf("empty chunk % x", got)
	}
	if Strip([]byte{0x45, 0}, true) != nil || Strip(make([]byte, 11), false) != nil {
		t.Error("Strip returns a short packet")
	}
}
