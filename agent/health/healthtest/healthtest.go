// Package healthtest reads heartbeats as the Octavia health manager (HM)
// does, for tests of the agent's sender and of the binary: the agent only
// writes them (package health), so the reading side is test code.
package healthtest

import (
	"bytes"
	"compress/zlib"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// Tag lengths: agents send the hex form; agents before Octavia 3.0 sent
// the raw digest, which the HM still accepts.
const (
	hexTagLen = 2 * sha256.Size
	rawTagLen = sha256.Size
)

// Format is how a datagram's tag was written.
type Format int

const (
	FormatHex Format = iota + 1 // 64 hex characters (what agents send)
	FormatRaw                   // 32-byte digest (agents before Octavia 3.0)
)

// ErrInvalid is a datagram the HM would drop.
var ErrInvalid = errors.New("invalid heartbeat")

// Unwrap decodes a datagram the way the HM's receiver does: first with a
// hex tag (the last 64 bytes), and if anything in that fails, again with a
// raw tag (the last 32 bytes). The tag is compared in constant time with
// the HMAC-SHA256 (UTF-8 key) of everything before it; then the payload is
// zlib-decompressed, must be UTF-8 and must be a JSON object. It returns
// the JSON document.
func Unwrap(datagram []byte, key string) ([]byte, Format, error) {
	doc, hexErr := open(datagram, key, hexTagLen)
	if hexErr == nil {
		return doc, FormatHex, nil
	}
	doc, rawErr := open(datagram, key, rawTagLen)
	if rawErr == nil {
		return doc, FormatRaw, nil
	}
	return nil, 0, fmt.Errorf("%w: hex tag: %v; raw tag: %v", ErrInvalid, hexErr, rawErr)
}

func open(d []byte, key string, tagLen int) ([]byte, error) {
	// Python's d[:-n] and d[-n:] on a datagram shorter than n: nothing and
	// everything.
	payload, tag := []byte(nil), d
	if len(d) >= tagLen {
		payload, tag = d[:len(d)-tagLen], d[len(d)-tagLen:]
	}
	m := hmac.New(sha256.New, []byte(key))
	m.Write(payload)
	want := m.Sum(nil)
	if tagLen == hexTagLen {
		want = []byte(hex.EncodeToString(want))
	}
	if !hmac.Equal(tag, want) {
		return nil, errors.New("tag mismatch")
	}
	zr, err := zlib.NewReader(bytes.NewReader(payload))
	if err != nil {
		return nil, fmt.Errorf("zlib: %w", err)
	}
	doc, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("zlib: %w", err)
	}
	if !utf8.Valid(doc) {
		return nil, errors.New("payload is not UTF-8")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(doc, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("payload is not a JSON object: %v", err)
	}
	return doc, nil
}

// Decode unwraps a datagram and decodes its document as an M (a
// health.Message), refusing fields M does not have. The HM itself needs
// only Unwrap's checks; this is stricter, so that a key the agent should
// not send fails a test.
func Decode[M any](datagram []byte, key string) (M, error) {
	var m M
	doc, _, err := Unwrap(datagram, key)
	if err != nil {
		return m, err
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		var zero M
		return zero, err
	}
	return m, nil
}
