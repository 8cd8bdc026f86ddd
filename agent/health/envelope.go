package health

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"hash/adler32"

	"github.com/klauspost/compress/flate"
)

// MaxDatagram is the largest UDP payload IPv4 can carry; a bigger heartbeat
// cannot be sent (upstream then silently stops heartbeating).
const MaxDatagram = 65507

// hexTagLen is the length of the tag the agent sends: HMAC-SHA256 in hex
// (agents before Octavia 3.0 sent the raw digest, which the HM still
// accepts; see healthtest.Unwrap).
const hexTagLen = 2 * sha256.Size

// ZlibLevel is the level of the deflate writer inside the zlib stream
// (upstream: Python's zlib at level 9, which any receiver's inflater reads
// alike). Level 1 fits more members in a datagram for a fraction of the
// CPU (figures in docs/results.md).
const ZlibLevel = 1

// Encoder wraps messages, reusing its buffers and compressors between
// heartbeats. The pools part of a message (most of its bytes, rarely
// changed) is compressed as a deflate run of its own after a sync flush,
// and its compressed bytes and Adler-32 are reused while it is unchanged:
// the result is still one zlib stream of the same document. Only a pools
// part of statelessMax bytes or more gets a kept writer (about 600 KiB of
// tables), so an agent with few members holds none.
type Encoder struct {
	rest *flate.Writer // compresses a big pools part when it changed
	buf  bytes.Buffer
	doc  []byte
	sc   jsonScratch
	mac  hash.Hash
	key  string
	sum  []byte

	// The last pools part, its compressed bytes and its Adler-32.
	restDoc   []byte
	restZ     bytes.Buffer
	restAdler uint32
	restOK    bool
}

// Encode serializes msg to JSON (see appendMessage) and wraps it (see
// wrap). The returned slice is valid until the next call.
func (e *Encoder) Encode(msg Message, key string) ([]byte, error) {
	if msg.poolsAsBefore && e.restOK {
		// The builder vouches that the pools are those of its last
		// message, which this encoder wrote last.
		e.doc = appendHead(e.doc[:0], msg, &e.sc)
		return e.wrap(e.doc, e.restDoc, key)
	}
	e.doc = appendMessage(e.doc[:0], msg, &e.sc)
	return e.wrap(e.doc[:e.sc.pools], e.doc[e.sc.pools:], key)
}

// zlibHeader is deflate with a 32 KiB window and the "fastest" level hint
// (the level hint is informative only; every inflater ignores it).
var zlibHeader = [2]byte{0x78, 0x01}

// wrap builds the datagram of the document head followed by rest: zlib of
// the document, then the 64 lowercase hex characters of HMAC-SHA256 over
// the compressed bytes with the UTF-8 key. rest is compressed separately
// (see Encoder). The returned slice is valid until the next call.
func (e *Encoder) wrap(head, rest []byte, key string) ([]byte, error) {
	if len(rest) > 0 && !(e.restOK && bytes.Equal(rest, e.restDoc)) {
		if err := e.compressRest(rest); err != nil {
			return nil, err
		}
	}
	e.buf.Reset()
	e.buf.Write(zlibHeader[:])
	// Without a rest the head ends the stream; with one, the head's run
	// ends on a byte boundary (an empty stored block) and the rest's
	// compressed bytes follow.
	if err := flate.StatelessDeflate(&e.buf, head, len(rest) == 0, nil); err != nil {
		return nil, err
	}
	sum := adler32.Checksum(head)
	if len(rest) > 0 {
		e.buf.Write(e.restZ.Bytes())
		sum = adler32Combine(sum, e.restAdler, len(rest))
	}
	e.buf.Write(binary.BigEndian.AppendUint32(e.sum[:0], sum))
	n := e.buf.Len()
	e.buf.Grow(hexTagLen)
	out := e.buf.Bytes()[:n+hexTagLen]
	if e.mac == nil || e.key != key {
		e.mac, e.key = hmac.New(sha256.New, []byte(key)), key
	}
	e.mac.Reset()
	e.mac.Write(out[:n])
	e.sum = e.mac.Sum(e.sum[:0])
	hex.Encode(out[n:], e.sum)
	return out, nil
}

// statelessMax is the size from which a pools part is compressed with a
// kept level-1 writer: below it the stateless compressor is as good (one
// block of its 32 KiB window) and keeps nothing.
const statelessMax = 32 << 10

// compressRest compresses rest as the final deflate run and keeps it.
func (e *Encoder) compressRest(rest []byte) error {
	e.restOK = false
	e.restZ.Reset()
	if len(rest) < statelessMax {
		e.rest = nil
		if err := flate.StatelessDeflate(&e.restZ, rest, true, nil); err != nil {
			return err
		}
	} else {
		if e.rest == nil {
			w, err := flate.NewWriter(&e.restZ, ZlibLevel)
			if err != nil {
				return err
			}
			e.rest = w
		} else {
			e.rest.Reset(&e.restZ)
		}
		if _, err := e.rest.Write(rest); err != nil {
			return err
		}
		if err := e.rest.Close(); err != nil {
			return err
		}
	}
	e.restDoc = append(e.restDoc[:0], rest...)
	e.restAdler = adler32.Checksum(rest)
	e.restOK = true
	return nil
}

// adler32Combine is the Adler-32 of a followed by b, from the checksum of
// each and b's length: the second sum of every byte of b also counts the
// first sum of a (less the initial 1), once per byte of b.
func adler32Combine(a, b uint32, lenB int) uint32 {
	const mod = 65521
	n := uint64(lenB % mod)
	a1, a2 := uint64(a&0xffff), uint64(a>>16)
	b1, b2 := uint64(b&0xffff), uint64(b>>16)
	s1 := (a1 + b1 + mod - 1) % mod
	s2 := (a2 + b2 + n*((a1+mod-1)%mod)) % mod
	return uint32(s2<<16 | s1)
}
