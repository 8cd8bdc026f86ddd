package sctppeer

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amphora-agent/amphora-agent/keepalived/sctpcheck"
)

// exchange feeds the server's handler one packet from a client port and
// parses its answer (nil when it sends none).
func exchange(t *testing.T, s *Server, assocs map[assocKey]*association, src uint16, vtag uint32, chunks []byte) *packet {
	t.Helper()
	pk, ok := parse(sctpcheck.Packet(src, s.port, vtag, chunks), false)
	if !ok {
		t.Fatalf("parse refused a packet it should read: % x", chunks)
	}
	r := s.handle(assocs, assocKey{netip.MustParseAddr("192.0.2.1"), src}, pk)
	if r == nil {
		return nil
	}
	out, ok := parse(sctpcheck.Packet(s.port, src, r.vtag, r.chunks), false)
	if !ok {
		t.Fatalf("the server built a packet parse refuses: % x", r.chunks)
	}
	return &out
}

func types(p *packet) []byte {
	if p == nil {
		return nil
	}
	var ts []byte
	for _, c := range p.chunks {
		ts = append(ts, c.typ)
	}
	return ts
}

// TestServerAssociation walks one association through the server's
// handler: INIT, COOKIE ECHO, DATA (twice: the repeat is answered again,
// counted once), ABORT, and what comes after it.
func TestServerAssociation(t *testing.T) {
	s := &Server{port: 3868, name: []byte("member-a")}
	assocs := map[assocKey]*association{}
	const src, tag, tsn = 40000, 0xabcd, 100

	ack := exchange(t, s, assocs, src, 0, sctpcheck.InitPacket(src, s.port, tag, tsn)[sctpcheck.HeaderLen:])
	if string(types(ack)) != string([]byte{sctpcheck.ChunkInitAck}) || ack.vtag != tag {
		t.Fatalf("INIT answered by chunks %v with tag %#x, want an INIT ACK with %#x", types(ack), ack.vtag, tag)
	}
	iv, ok := parseInit(ack.chunks[0].value)
	cookie, found := param(iv.params, paramStateCookie)
	if !ok || !found || iv.tag == 0 || iv.out != streams {
		t.Fatalf("INIT ACK %+v, cookie %v", iv, found)
	}
	if len(assocs) != 0 {
		t.Fatal("the server keeps state before the cookie comes back")
	}
	// A COOKIE ECHO under another tag than the cookie's is not ours.
	if got := exchange(t, s, assocs, src, iv.tag+1, sctpcheck.Chunk(chunkCookieEcho, 0, cookie)); got != nil || len(assocs) != 0 {
		t.Fatalf("COOKIE ECHO with a wrong tag answered %v", types(got))
	}
	for range 2 { // a repeated COOKIE ECHO is acknowledged again
		if got := exchange(t, s, assocs, src, iv.tag, sctpcheck.Chunk(chunkCookieEcho, 0, cookie)); string(types(got)) != string([]byte{chunkCookieAck}) || got.vtag != tag {
			t.Fatalf("COOKIE ECHO answered %v", types(got))
		}
	}
	data := sctpcheck.Chunk(chunkData, dataFlagsWhole, dataValue(tsn, 0, []byte("hello")))
	for i := range 2 {
		got := exchange(t, s, assocs, src, iv.tag, data)
		if string(types(got)) != string([]byte{chunkSack, chunkData}) {
			t.Fatalf("DATA %d answered %v, want SACK and DATA", i, types(got))
		}
		if cum := binary.BigEndian.Uint32(got.chunks[0].value); cum != tsn {
			t.Errorf("SACK acknowledges %d, want %d", cum, tsn)
		}
		d := got.chunks[1]
		if d.flags != dataFlagsWhole || string(d.value[12:]) != "member-a" || binary.BigEndian.Uint32(d.value) != iv.tsn {
			t.Errorf("answer DATA flags %#x TSN %d %q, want whole message, TSN %d, the name", d.flags, binary.BigEndian.Uint32(d.value), d.value[12:], iv.tsn)
		}
	}
	if s.Served() != 1 {
		t.Errorf("served %d, want 1: a repeated DATA is one message", s.Served())
	}
	if got := exchange(t, s, assocs, src, iv.tag, sctpcheck.Chunk(sctpcheck.ChunkAbort, 0, nil)); got != nil || len(assocs) != 0 {
		t.Fatalf("ABORT answered %v, %d associations left", types(got), len(assocs))
	}
	// DATA of no association: an ABORT reflecting its tag.
	if got := exchange(t, s, assocs, src, iv.tag, data); string(types(got)) != string([]byte{sctpcheck.ChunkAbort}) || got.vtag != iv.tag || got.chunks[0].flags != abortFlagTBit {
		t.Fatalf("DATA after the ABORT answered %v", types(got))
	}
}

func TestServerShutdownAndProbeAbort(t *testing.T) {
	s := &Server{port: 3868, name: []byte("m")}
	assocs := map[assocKey]*association{}
	open := func(src uint16) uint32 {
		ack := exchange(t, s, assocs, src, 0, sctpcheck.InitPacket(src, s.port, 7, 1)[sctpcheck.HeaderLen:])
		iv, _ := parseInit(ack.chunks[0].value)
		cookie, _ := param(iv.params, paramStateCookie)
		exchange(t, s, assocs, src, iv.tag, sctpcheck.Chunk(chunkCookieEcho, 0, cookie))
		return iv.tag
	}
	tag := open(1000)
	if got := exchange(t, s, assocs, 1000, tag, sctpcheck.Chunk(chunkShutdown, 0, make([]byte, 4))); string(types(got)) != string([]byte{chunkShutdownAck}) {
		t.Fatalf("SHUTDOWN answered %v", types(got))
	}
	exchange(t, s, assocs, 1000, tag, sctpcheck.Chunk(chunkShutdownComplete, 0, nil))
	if len(assocs) != 0 {
		t.Fatal("SHUTDOWN COMPLETE left the association")
	}
	// The health probe's ABORT (T bit, its own tag) ends an association too.
	open(1001)
	if got := exchange(t, s, assocs, 1001, 7, sctpcheck.Chunk(sctpcheck.ChunkAbort, abortFlagTBit, nil)); got != nil || len(assocs) != 0 {
		t.Fatalf("reflected ABORT answered %v, %d associations left", types(got), len(assocs))
	}
	// The table is bounded: past the limit a new association is aborted.
	for i := range maxAssociations {
		assocs[assocKey{port: uint16(i)}] = &association{}
	}
	ack := exchange(t, s, assocs, 2000, 0, sctpcheck.InitPacket(2000, s.port, 9, 1)[sctpcheck.HeaderLen:])
	iv, _ := parseInit(ack.chunks[0].value)
	cookie, _ := param(iv.params, paramStateCookie)
	if got := exchange(t, s, assocs, 2000, iv.tag, sctpcheck.Chunk(chunkCookieEcho, 0, cookie)); string(types(got)) != string([]byte{sctpcheck.ChunkAbort}) || len(assocs) != maxAssociations {
		t.Fatalf("a cookie past the limit answered %v, %d associations", types(got), len(assocs))
	}
}

func TestParse(t *testing.T) {
	good := sctpcheck.Packet(1, 2, 3, append(sctpcheck.Chunk(chunkSack, 0, sackValue(5)), sctpcheck.Chunk(chunkData, 3, []byte("odd"))...))
	pk, ok := parse(good, false)
	if !ok || string(types(&pk)) != string([]byte{chunkSack, chunkData}) || string(pk.chunks[1].value) != "odd" {
		t.Fatalf("parse: %v %+v", ok, pk)
	}
	bad := append([]byte(nil), good...)
	bad[len(bad)-5] ^= 1
	long := sctpcheck.Packet(1, 2, 3, []byte{0, 0, 0, 40, 1, 2, 3, 4})
	for name, p := range map[string][]byte{"bad checksum": bad, "chunk past the end": long, "no chunk": sctpcheck.Packet(1, 2, 3, nil)} {
		if _, ok := parse(p, false); ok {
			t.Errorf("%s: parse accepts it", name)
		}
	}
}

// TestLoopback: a client and a server on loopback in this namespace (raw
// sockets need root), then the server closed: the client gets no answer.
func TestLoopback(t *testing.T) {
	port := uint16(20000 + rand.IntN(20000))
	addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)
	s, err := Listen(addr, "loop")
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		t.Skip("sctppeer: raw sockets need root (CAP_NET_RAW)")
	}
	if err != nil {
		t.Fatal(err)
	}
	c, err := Dial(addr)
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 3 {
		if got, err := c.Ask([]byte("ping"), 3*time.Second); err != nil || got != "loop" {
			t.Fatalf("ask %d: %q %v", i, got, err)
		}
	}
	if s.Served() != 3 {
		t.Errorf("served %d, want 3", s.Served())
	}
	s.Close()
	if got, err := c.Ask([]byte("ping"), 500*time.Millisecond); err == nil {
		t.Fatalf("a closed server answered %q", got)
	}
}
