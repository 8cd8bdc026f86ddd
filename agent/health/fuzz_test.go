package health

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/amphora-agent/amphora-agent/agent/health/healthtest"
	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// FuzzUnwrap: a datagram from the network is refused or yields a UTF-8
// JSON object, never a panic.
func FuzzUnwrap(f *testing.F) {
	for _, file := range testkit.ReadFiles(f, "testdata/vector-*.hex") {
		d, err := hex.DecodeString(strings.TrimSpace(string(file.Data)))
		if err != nil {
			f.Fatal(err)
		}
		key := "insecure"
		if strings.Contains(file.Path, "vector-b") {
			key = "TEST"
		}
		f.Add(d, key)
	}
	f.Add([]byte{}, "")
	f.Fuzz(func(t *testing.T, datagram []byte, key string) {
		doc, format, err := healthtest.Unwrap(datagram, key)
		if err != nil {
			return
		}
		var obj map[string]json.RawMessage
		if !utf8.Valid(doc) || json.Unmarshal(doc, &obj) != nil || obj == nil || (format != healthtest.FormatHex && format != healthtest.FormatRaw) {
			t.Fatalf("accepted %q (format %d)", doc, format)
		}
	})
}

// FuzzWrap: what the agent signs, the HM's checks give back unchanged
// under the same key when it is a JSON object, and refuse under another.
func FuzzWrap(f *testing.F) {
	msg, err := os.ReadFile("testdata/spec-message.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(msg, "insecure")
	f.Add([]byte(`{"testkey": "TEST"}`), "TEST")
	f.Add([]byte(`[]`), "")
	f.Fuzz(func(t *testing.T, doc []byte, key string) {
		d, err := Wrap(doc, key)
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]json.RawMessage
		isObject := utf8.Valid(doc) && json.Unmarshal(doc, &obj) == nil && obj != nil
		got, format, err := healthtest.Unwrap(d, key)
		if isObject != (err == nil) {
			t.Fatalf("object %v, unwrap error %v", isObject, err)
		}
		if err == nil && (!bytes.Equal(got, doc) || format != healthtest.FormatHex) {
			t.Fatalf("unwrapped %q (format %d), want %q", got, format, doc)
		}
		if _, _, err := healthtest.Unwrap(d, key+"x"); err == nil {
			t.Fatal("accepted under another key")
		}
	})
}
