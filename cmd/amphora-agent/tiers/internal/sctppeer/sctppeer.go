// Package sctppeer is a user-space SCTP peer for tests, on raw sockets:
// an echo server that answers every association's DATA with its name, and
// a client that opens an association, sends one message and returns the
// answer. The kernel's SCTP stack is not used, so hosts without the sctp
// module (this one, CI's) can still put SCTP traffic through an amphora's
// IPVS; and as the raw socket takes the packets, such a kernel sends no
// ICMP protocol-unreachable for them.
//
// Only what the tests need: one stream, one message per association, no
// retransmission of DATA (the client resends its current packet until it
// hears back), no congestion control. The state cookie is not signed: the
// peer only ever talks to test namespaces.
//
// Sockets belong to the network namespace of the thread that opens them:
// call Listen and Dial inside the namespace (topo.Namespace.Run); they may
// be used from any goroutine afterwards.
package sctppeer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amphora-agent/amphora-agent/keepalived/sctpcheck"
	"github.com/amphora-agent/amphora-agent/keepalived/sctpcheck/sctpchecktest"
)

// Chunk types (RFC 9260 §3.2) beyond the probe's.
const (
	chunkData             = 0
	chunkSack             = 3
	chunkShutdown         = 7
	chunkShutdownAck      = 8
	chunkCookieEcho       = 10
	chunkCookieAck        = 11
	chunkShutdownComplete = 14

	paramStateCookie = 7
	dataFlagsWhole   = 0x03 // B and E: the message is in this one chunk
	abortFlagTBit    = 1
	rwnd             = 65536
	streams          = 10
	// maxAssociations bounds the server's table: an association that is
	// neither aborted nor shut down stays until the server stops.
	maxAssociations = 1024
)

// chunk is one received chunk.
type chunk struct {
	typ, flags byte
	value      []byte
}

// packet is one received SCTP packet.
type packet struct {
	src, dst uint16
	vtag     uint32
	chunks   []chunk
}

// parse reads a raw socket's datagram; false if it is not a whole SCTP
// packet with a good checksum.
func parse(data []byte, ipv4 bool) (packet, bool) {
	p := sctpcheck.Strip(data, ipv4)
	if p == nil || !sctpchecktest.ChecksumOK(p) {
		return packet{}, false
	}
	pk := packet{
		src:  binary.BigEndian.Uint16(p[0:]),
		dst:  binary.BigEndian.Uint16(p[2:]),
		vtag: binary.BigEndian.Uint32(p[4:]),
	}
	for rest := p[sctpcheck.HeaderLen:]; len(rest) >= 4; {
		n := int(binary.BigEndian.Uint16(rest[2:]))
		if n < 4 || n > len(rest) {
			return packet{}, false
		}
		pk.chunks = append(pk.chunks, chunk{typ: rest[0], flags: rest[1], value: rest[4:n]})
		rest = rest[min(len(rest), (n+3)&^3):]
	}
	return pk, len(pk.chunks) > 0
}

// initValue is the fixed part of an INIT or INIT ACK; params follow.
type initValue struct {
	tag, rwnd uint32
	out, in   uint16
	tsn       uint32
	params    []byte
}

func parseInit(v []byte) (initValue, bool) {
	if len(v) < 16 {
		return initValue{}, false
	}
	return initValue{
		tag: binary.BigEndian.Uint32(v[0:]), rwnd: binary.BigEndian.Uint32(v[4:]),
		out: binary.BigEndian.Uint16(v[8:]), in: binary.BigEndian.Uint16(v[10:]),
		tsn: binary.BigEndian.Uint32(v[12:]), params: v[16:],
	}, true
}

func (iv initValue) bytes() []byte {
	b := make([]byte, 16, 16+len(iv.params))
	binary.BigEndian.PutUint32(b[0:], iv.tag)
	binary.BigEndian.PutUint32(b[4:], iv.rwnd)
	binary.BigEndian.PutUint16(b[8:], iv.out)
	binary.BigEndian.PutUint16(b[10:], iv.in)
	binary.BigEndian.PutUint32(b[12:], iv.tsn)
	return append(b, iv.params...)
}

// param finds a parameter (type-length-value, padded like chunks).
func param(params []byte, typ uint16) ([]byte, bool) {
	for len(params) >= 4 {
		n := int(binary.BigEndian.Uint16(params[2:]))
		if n < 4 || n > len(params) {
			return nil, false
		}
		if binary.BigEndian.Uint16(params[0:]) == typ {
			return params[4:n], true
		}
		params = params[min(len(params), (n+3)&^3):]
	}
	return nil, false
}

// paramBytes is laid out as a chunk whose type and flags bytes hold the
// parameter's 16-bit type.
func paramBytes(typ uint16, value []byte) []byte {
	return sctpcheck.Chunk(byte(typ>>8), byte(typ), value)
}

// dataValue is a DATA chunk's value: TSN, stream 0, its sequence number,
// payload protocol 0, the message.
func dataValue(tsn uint32, ssn uint16, msg []byte) []byte {
	v := make([]byte, 12, 12+len(msg))
	binary.BigEndian.PutUint32(v[0:], tsn)
	binary.BigEndian.PutUint16(v[6:], ssn)
	return append(v, msg...)
}

// sackValue acknowledges everything up to tsn, with no gaps.
func sackValue(tsn uint32) []byte {
	v := make([]byte, 12)
	binary.BigEndian.PutUint32(v[0:], tsn)
	binary.BigEndian.PutUint32(v[4:], rwnd)
	return v
}

func nonZeroTag() uint32 { return rand.Uint32N(^uint32(0)) + 1 }

// rawSocket opens a raw SCTP socket for addr's family in the calling
// thread's namespace.
func rawSocket(addr netip.Addr) (int, unix.Sockaddr, error) {
	family, sa, err := sctpcheck.Sockaddr(addr)
	if err != nil {
		return -1, nil, err
	}
	fd, err := unix.Socket(family, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
	if err != nil {
		return -1, nil, fmt.Errorf("sctppeer: raw SCTP socket: %w", err)
	}
	return fd, sa, nil
}

// receive waits up to d for one datagram; nil on timeout.
func receive(fd int, buf []byte, d time.Duration) ([]byte, unix.Sockaddr, error) {
	d = max(d, 0) // poll waits forever on a negative timeout
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(pfd, int(d.Milliseconds())+1)
	if errors.Is(err, unix.EINTR) || n == 0 {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	m, from, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT)
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return buf[:m], from, nil
}

// Server answers SCTP associations to one address and port.
type Server struct {
	fd     int
	ipv4   bool
	port   uint16
	name   []byte
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	served int
}

// association is the server's state of one established association.
type association struct {
	peerTag, tag uint32
	peerTSN      uint32 // the last TSN received (one message at a time)
	tsn          uint32 // the next TSN to send
	ssn          uint16
	answer       []byte // the last answer, sent again for a repeated DATA
}

type assocKey struct {
	addr netip.Addr
	port uint16
}

// Listen opens the server on addr (bound, so only packets to that address
// reach it) in the calling thread's namespace; it answers with name until
// Close.
func Listen(addr netip.AddrPort, name string) (*Server, error) {
	fd, sa, err := rawSocket(addr.Addr())
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sctppeer: bind %s: %w", addr.Addr(), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{fd: fd, ipv4: addr.Addr().Is4(), port: addr.Port(), name: []byte(name), cancel: cancel, done: make(chan struct{})}
	go s.serve(ctx)
	return s, nil
}

// Close stops the server and waits until its socket is closed.
func (s *Server) Close() {
	s.cancel()
	<-s.done
}

// Served is how many messages the server answered.
func (s *Server) Served() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served
}

func (s *Server) serve(ctx context.Context) {
	// The goroutine owns the descriptor: closed under a poll, its number
	// could be reused by another socket.
	defer close(s.done)
	defer unix.Close(s.fd)
	assocs := map[assocKey]*association{}
	buf := make([]byte, 65536)
	for ctx.Err() == nil {
		data, from, err := receive(s.fd, buf, 100*time.Millisecond)
		if err != nil || data == nil {
			continue
		}
		pk, ok := parse(data, s.ipv4)
		if !ok || pk.dst != s.port {
			continue
		}
		peer, ok := peerAddr(from)
		if !ok {
			continue
		}
		key := assocKey{peer, pk.src}
		if reply := s.handle(assocs, key, pk); reply != nil {
			unix.Sendto(s.fd, sctpcheck.Packet(s.port, pk.src, reply.vtag, reply.chunks), 0, from)
		}
	}
}

type reply struct {
	vtag   uint32
	chunks []byte
}

// handle answers one packet and updates the association table.
func (s *Server) handle(assocs map[assocKey]*association, key assocKey, pk packet) *reply {
	a := assocs[key]
	ours := a != nil && pk.vtag == a.tag
	var out []byte
	for _, c := range pk.chunks {
		switch c.typ {
		case sctpcheck.ChunkInit:
			in, ok := parseInit(c.value)
			if !ok || pk.vtag != 0 || in.tag == 0 {
				return nil
			}
			// Stateless until the cookie comes back: the cookie holds
			// both tags and both initial TSNs.
			ack := initValue{tag: nonZeroTag(), rwnd: rwnd, out: min(streams, in.in), in: streams, tsn: rand.Uint32()}
			cookie := make([]byte, 16)
			binary.BigEndian.PutUint32(cookie[0:], ack.tag)
			binary.BigEndian.PutUint32(cookie[4:], in.tag)
			binary.BigEndian.PutUint32(cookie[8:], in.tsn)
			binary.BigEndian.PutUint32(cookie[12:], ack.tsn)
			ack.params = paramBytes(paramStateCookie, cookie)
			return &reply{in.tag, sctpcheck.Chunk(sctpcheck.ChunkInitAck, 0, ack.bytes())}
		case chunkCookieEcho:
			if len(c.value) != 16 || binary.BigEndian.Uint32(c.value[0:]) != pk.vtag {
				return nil
			}
			if a == nil || a.tag != pk.vtag {
				if a == nil && len(assocs) >= maxAssociations {
					return &reply{binary.BigEndian.Uint32(c.value[4:]), sctpcheck.Chunk(sctpcheck.ChunkAbort, 0, nil)}
				}
				a = &association{tag: pk.vtag, peerTag: binary.BigEndian.Uint32(c.value[4:]),
					peerTSN: binary.BigEndian.Uint32(c.value[8:]) - 1, tsn: binary.BigEndian.Uint32(c.value[12:])}
				assocs[key] = a
			}
			ours = true
			out = append(out, sctpcheck.Chunk(chunkCookieAck, 0, nil)...)
		case chunkData:
			if !ours || len(c.value) < 12 {
				return s.outOfTheBlue(pk)
			}
			tsn := binary.BigEndian.Uint32(c.value[0:])
			if tsn != a.peerTSN || a.answer == nil {
				a.peerTSN = tsn
				a.answer = sctpcheck.Chunk(chunkData, dataFlagsWhole, dataValue(a.tsn, a.ssn, s.name))
				a.tsn++
				a.ssn++
				s.mu.Lock()
				s.served++
				s.mu.Unlock()
			}
			out = append(out, sctpcheck.Chunk(chunkSack, 0, sackValue(a.peerTSN))...)
			out = append(out, a.answer...)
		case sctpcheck.ChunkAbort:
			// Ours, or reflected (T bit: the tag is the peer's own).
			if a != nil && (pk.vtag == a.tag || c.flags&abortFlagTBit != 0 && pk.vtag == a.peerTag) {
				delete(assocs, key)
			}
			return nil
		case chunkShutdown:
			if !ours {
				return s.outOfTheBlue(pk)
			}
			out = append(out, sctpcheck.Chunk(chunkShutdownAck, 0, nil)...)
		case chunkShutdownComplete:
			if ours {
				delete(assocs, key)
			}
			return nil
		}
	}
	if out == nil || a == nil {
		return nil
	}
	return &reply{a.peerTag, out}
}

// outOfTheBlue answers a packet of no association with an ABORT whose
// tag is the packet's own (T bit), as RFC 9260 §8.4 has it.
func (s *Server) outOfTheBlue(pk packet) *reply {
	return &reply{pk.vtag, sctpcheck.Chunk(sctpcheck.ChunkAbort, abortFlagTBit, nil)}
}

func peerAddr(sa unix.Sockaddr) (netip.Addr, bool) {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrFrom4(a.Addr), true
	case *unix.SockaddrInet6:
		return netip.AddrFrom16(a.Addr), true
	}
	return netip.Addr{}, false
}

// Client is a raw socket connected to one peer address.
type Client struct {
	fd   int
	ipv4 bool
	port uint16
}

// Dial opens a client to addr in the calling thread's namespace.
func Dial(addr netip.AddrPort) (*Client, error) {
	fd, sa, err := rawSocket(addr.Addr())
	if err != nil {
		return nil, err
	}
	// Connected: only the peer's packets reach the socket.
	if err := unix.Connect(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sctppeer: connect to %s: %w", addr.Addr(), err)
	}
	return &Client{fd: fd, ipv4: addr.Addr().Is4(), port: addr.Port()}, nil
}

// Close closes the client's socket.
func (c *Client) Close() error { return unix.Close(c.fd) }

// resend is how long the client waits for an answer before it sends its
// current packet again (a first packet may wait for ARP, or be lost).
const resend = 300 * time.Millisecond

// Ask opens an association from a fresh source port (a new flow for a load
// balancer), sends msg as one DATA chunk, waits for the peer's DATA and
// aborts the association; it returns the peer's message, or an error when
// the peer aborts or timeout passes.
func (c *Client) Ask(msg []byte, timeout time.Duration) (string, error) {
	src := uint16(1024 + rand.IntN(65536-1024))
	tag, tsn := nonZeroTag(), rand.Uint32()
	var peerTag uint32
	step := "INIT ACK"
	send := sctpcheck.InitPacket(src, c.port, tag, tsn)
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 65536)
	var sent time.Time // zero: send at once
	for {
		if time.Now().After(deadline) {
			if peerTag != 0 {
				unix.Write(c.fd, sctpcheck.Packet(src, c.port, peerTag, sctpcheck.Chunk(sctpcheck.ChunkAbort, 0, nil)))
			}
			return "", fmt.Errorf("sctppeer: no %s from port %d within %v", step, c.port, timeout)
		}
		if time.Since(sent) >= resend {
			if _, err := unix.Write(c.fd, send); err != nil {
				return "", fmt.Errorf("sctppeer: send: %w", err)
			}
			sent = time.Now()
		}
		data, _, err := receive(c.fd, buf, min(resend, time.Until(deadline)))
		if err != nil {
			return "", fmt.Errorf("sctppeer: receive: %w", err)
		}
		pk, ok := parse(data, c.ipv4)
		if !ok || pk.src != c.port || pk.dst != src || pk.vtag != tag {
			continue
		}
		for _, ch := range pk.chunks {
			switch {
			case ch.typ == sctpcheck.ChunkAbort:
				return "", fmt.Errorf("sctppeer: port %d aborted the association while waiting for %s", c.port, step)
			case ch.typ == sctpcheck.ChunkInitAck && step == "INIT ACK":
				ack, ok := parseInit(ch.value)
				cookie, found := param(ack.params, paramStateCookie)
				if !ok || !found || ack.tag == 0 {
					return "", fmt.Errorf("sctppeer: malformed INIT ACK from port %d", c.port)
				}
				peerTag, step = ack.tag, "COOKIE ACK"
				send = sctpcheck.Packet(src, c.port, peerTag, sctpcheck.Chunk(chunkCookieEcho, 0, cookie))
				sent = time.Time{}
			case ch.typ == chunkCookieAck && step == "COOKIE ACK":
				step = "DATA"
				send = sctpcheck.Packet(src, c.port, peerTag, sctpcheck.Chunk(chunkData, dataFlagsWhole, dataValue(tsn, 0, msg)))
				sent = time.Time{}
			case ch.typ == chunkData && step == "DATA" && len(ch.value) >= 12:
				// Done with the association: no SACK, no shutdown.
				unix.Write(c.fd, sctpcheck.Packet(src, c.port, peerTag, sctpcheck.Chunk(sctpcheck.ChunkAbort, 0, nil)))
				return string(ch.value[12:]), nil
			}
		}
	}
}
