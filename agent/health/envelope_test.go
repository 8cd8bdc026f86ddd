package health

import (
	"bytes"
	"compress/zlib"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/adler32"
	"io"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/amphora-agent/amphora-agent/agent/health/healthtest"
)

func readHex(t *testing.T, name string) []byte {
	t.Helper()
	s, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	b, err := hex.DecodeString(strings.TrimSpace(string(s)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// jsonEqual compares two JSON documents, ignoring key order and spacing.
func jsonEqual(t *testing.T, got, want []byte) bool {
	t.Helper()
	var g, w any
	for _, d := range []struct {
		b []byte
		v *any
	}{{got, &g}, {want, &w}} {
		dec := json.NewDecoder(bytes.NewReader(d.b))
		dec.UseNumber()
		if err := dec.Decode(d.v); err != nil {
			t.Fatalf("invalid JSON %q: %v", d.b, err)
		}
	}
	return reflect.DeepEqual(g, w)
}

const vectorAJSON = `{"id": "9d2b6e1c-4f3a-4c8e-8b7d-2a1e5f6c7d80", "seq": 0, "listeners": {}, "pools": {}, "ver": 3}`

// The spec's vectors (health-and-config §1.7), produced by upstream Python,
// decode with the right key through the path the HM would use (§7.2).
func TestUnwrapVectors(t *testing.T) {
	cases := []struct {
		file, key string
		format    healthtest.Format
		want      string
		size      int
	}{
		{"vector-a.hex", "insecure", healthtest.FormatHex, vectorAJSON, 154},
		{"vector-a-legacy.hex", "insecure", healthtest.FormatRaw, vectorAJSON, 122},
		{"vector-b.hex", "TEST", healthtest.FormatHex, `{"testkey": "TEST"}`, 91},
		{"vector-b-raw.hex", "TEST", healthtest.FormatRaw, `{"testkey": "TEST"}`, 59},
		{"vector-c.hex", "insecure", healthtest.FormatHex, string(readTestdata(t, "spec-message.json")), 486},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			d := readHex(t, c.file)
			if len(d) != c.size {
				t.Fatalf("%d bytes, want %d", len(d), c.size)
			}
			doc, format, err := healthtest.Unwrap(d, c.key)
			if err != nil {
				t.Fatal(err)
			}
			if format != c.format {
				t.Errorf("format %d, want %d", format, c.format)
			}
			if !jsonEqual(t, doc, []byte(c.want)) {
				t.Errorf("decoded %s\nwant %s", doc, c.want)
			}
		})
	}
}

// Wrong keys, any flipped byte (payload or tag) and an upper-cased tag are
// rejected (§7.2).
func TestUnwrapRejects(t *testing.T) {
	for _, c := range []struct{ file, key string }{
		{"vector-a.hex", "insecure"}, {"vector-a-legacy.hex", "insecure"},
		{"vector-b.hex", "TEST"}, {"vector-b-raw.hex", "TEST"}, {"vector-c.hex", "insecure"},
	} {
		d := readHex(t, c.file)
		if _, _, err := healthtest.Unwrap(d, c.key+"2"); err == nil {
			t.Errorf("%s: accepted with key %s2", c.file, c.key)
		}
		if _, _, err := healthtest.Unwrap(d, "insecure2"); err == nil {
			t.Errorf("%s: accepted with key insecure2", c.file)
		}
		for i := range d {
			flipped := bytes.Clone(d)
			flipped[i] ^= 0x01
			if _, _, err := healthtest.Unwrap(flipped, c.key); err == nil {
				t.Errorf("%s: accepted with byte %d flipped", c.file, i)
			}
		}
		if strings.HasSuffix(c.file, "-raw.hex") || strings.HasSuffix(c.file, "-legacy.hex") {
			continue
		}
		upper := bytes.Clone(d)
		copy(upper[len(upper)-64:], bytes.ToUpper(upper[len(upper)-64:]))
		if bytes.Equal(upper, d) {
			t.Fatalf("%s: tag has no letters to upper-case", c.file)
		}
		if _, _, err := healthtest.Unwrap(upper, c.key); err == nil {
			t.Errorf("%s: accepted with an upper-case tag", c.file)
		}
	}
	// Valid tags over payloads the HM cannot use.
	for name, doc := range map[string]string{"array": `[1, 2]`, "null": `null`, "not JSON": `{"a": `, "not UTF-8": "{\"a\": \"\xff\"}"} {
		d, err := Wrap([]byte(doc), "k")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := healthtest.Unwrap(d, "k"); err == nil {
			t.Errorf("%s payload accepted", name)
		}
	}
	for _, short := range [][]byte{nil, []byte("x"), bytes.Repeat([]byte("a"), 40)} {
		if _, _, err := healthtest.Unwrap(short, "k"); err == nil {
			t.Errorf("%d-byte datagram accepted", len(short))
		}
	}
}

var hexTag = regexp.MustCompile(`^[0-9a-f]{64}$`)

// A Go-made datagram is zlib(JSON) followed by exactly 64 lowercase hex
// characters of HMAC-SHA256 over the zlib bytes, nothing else (§7.1), and
// the HM-mirroring decoder accepts it (§7.3).
func TestWrapStructure(t *testing.T) {
	var e Encoder
	doc := []byte(vectorAJSON)
	for _, key := range []string{"insecure", "", "None", "ключ with $ and spaces", strings.Repeat("k", 200)} {
		d, err := e.Wrap(doc, key)
		if err != nil {
			t.Fatal(err)
		}
		d = bytes.Clone(d)
		payload, tag := d[:len(d)-64], d[len(d)-64:]
		if !hexTag.Match(tag) {
			t.Fatalf("tag %q is not 64 lowercase hex characters", tag)
		}
		mac := hmac.New(sha256.New, []byte(key))
		mac.Write(payload)
		if want := hex.EncodeToString(mac.Sum(nil)); string(tag) != want {
			t.Fatalf("tag %s, want HMAC over the compressed bytes %s", tag, want)
		}
		// Any zlib header (deflate, 32 KiB window, valid check bits): the
		// receiver accepts every level (§1.3).
		if payload[0] != 0x78 || (uint(payload[0])<<8|uint(payload[1]))%31 != 0 {
			t.Fatalf("payload starts % x, not a zlib header", payload[:2])
		}
		zr, err := zlib.NewReader(bytes.NewReader(payload))
		if err != nil {
			t.Fatal(err)
		}
		plain, err := io.ReadAll(zr)
		if err != nil || !bytes.Equal(plain, doc) {
			t.Fatalf("payload decompresses to %q, %v", plain, err)
		}
		got, format, err := healthtest.Unwrap(d, key)
		if err != nil || format != healthtest.FormatHex || !bytes.Equal(got, doc) {
			t.Fatalf("Unwrap = %q, %d, %v", got, format, err)
		}
	}
}

// Vector C both directions: our message for the §4.7 sample, wrapped by
// Go, decodes to the same document the Python vector carries.
func TestVectorCBothDirections(t *testing.T) {
	msg := buildSample(t, 41)
	var e Encoder
	d, err := e.Encode(msg, "insecure")
	if err != nil {
		t.Fatal(err)
	}
	ours, _, err := healthtest.Unwrap(d, "insecure")
	if err != nil {
		t.Fatal(err)
	}
	theirs, _, err := healthtest.Unwrap(readHex(t, "vector-c.hex"), "insecure")
	if err != nil {
		t.Fatal(err)
	}
	if !jsonEqual(t, ours, theirs) {
		t.Fatalf("Go message\n%s\nPython vector C\n%s", ours, theirs)
	}
	if _, _, err := healthtest.Unwrap(d, "insecure2"); err == nil {
		t.Fatal("our datagram accepted with the wrong key")
	}
	decoded, err := healthtest.Decode[Message](d, "insecure")
	if err != nil || !reflect.DeepEqual(decoded, msg) {
		t.Fatalf("Decode = %+v, %v", decoded, err)
	}
}

// The pools part's compressed bytes are reused while it is unchanged and
// made again when it changes; every datagram still inflates, as one zlib
// stream with a right Adler-32, to exactly the document encoding/json
// writes for its message.
func TestEncodeReusesUnchangedPools(t *testing.T) {
	var e Encoder
	check := func(msg Message) {
		t.Helper()
		d, err := e.Encode(msg, testKey)
		if err != nil {
			t.Fatal(err)
		}
		plain := inflateDatagram(t, d)
		want, _ := json.Marshal(msg)
		if !bytes.Equal(plain, want) {
			t.Fatalf("datagram inflates to\n%s\nwant\n%s", plain, want)
		}
	}
	msg := buildSample(t, 1)
	check(msg)
	first := bytes.Clone(e.restZ.Bytes())
	for l, v := range msg.Listeners {
		v.Stats.TX += 1234
		msg.Listeners[l] = v
	}
	msg.Seq++
	check(msg)
	if !bytes.Equal(e.restZ.Bytes(), first) {
		t.Fatal("unchanged pools compressed again")
	}
	for k, p := range msg.Pools {
		p.Status = "DOWN"
		msg.Pools[k] = p
		break
	}
	check(msg)
	if bytes.Equal(e.restZ.Bytes(), first) {
		t.Fatal("changed pools sent with the old compressed bytes")
	}
	msg.Pools = nil
	check(msg)
}

func TestAdler32Combine(t *testing.T) {
	data := bytes.Repeat([]byte("\xff\x00pool:member-ONLINE\xfe"), 9000)
	for _, cut := range []int{0, 1, 2, 100, 65520, 65521, 65522, 131071, len(data) - 1, len(data)} {
		a, b := data[:cut], data[cut:]
		if got, want := adler32Combine(adler32.Checksum(a), adler32.Checksum(b), len(b)), adler32.Checksum(data); got != want {
			t.Errorf("cut %d: %08x, want %08x", cut, got, want)
		}
	}
}

// inflateDatagram is the JSON document inside a datagram.
func inflateDatagram(t *testing.T, d []byte) []byte {
	t.Helper()
	zr, err := zlib.NewReader(bytes.NewReader(d[:len(d)-hexTagLen]))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr) // checks the Adler-32 at the end
	if err != nil {
		t.Fatalf("inflate: %v", err)
	}
	return plain
}

// Pools parts on either side of statelessMax, in turn, through one
// Encoder: each datagram inflates to its message, and a level-1 writer is
// kept only while the part is big.
func TestEncodeSmallAndBigPools(t *testing.T) {
	var e Encoder
	for _, n := range []int{3, 2000, 5, 1500, 0} {
		members := map[string]string{}
		for i := range n {
			members[fmt.Sprintf("%08x-0000-4000-8000-%012x", i*2654435761%(1<<32), i)] = "UP"
		}
		msg := Message{ID: "amp", Seq: uint64(n), Ver: Version,
			Listeners: map[string]Listener{"l1": {Status: "OPEN"}},
			Pools:     map[string]Pool{"p1:l1": {Status: "UP", Members: members}}}
		d, err := e.Encode(msg, testKey)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(msg)
		if got := inflateDatagram(t, d); !bytes.Equal(got, want) {
			t.Fatalf("%d members: datagram inflates to %d bytes unlike the message's %d", n, len(got), len(want))
		}
		if big := len(want) > statelessMax+100; (e.rest != nil) != big {
			t.Fatalf("%d members (%d bytes): kept writer %v", n, len(want), e.rest != nil)
		}
	}
}
