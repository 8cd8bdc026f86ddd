//go:build bench

package health

import (
	"bytes"
	"compress/zlib"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// capacityPython prints, for each JSON document (a list of strings on
// stdin), the size of zlib.compress(doc, 9): what upstream sends.
const capacityPython = `import json, sys, zlib
print(json.dumps([len(zlib.compress(d.encode(), 9)) for d in json.load(sys.stdin)]))`

// TestBenchCapacity writes $AMPHORA_BENCH_OUT/capacity.json for make bench:
// how many members (10 listeners, one pool each, random UUIDs) one
// datagram carries with the agent's compressor, with Go's zlib at level 9
// and with Python's zlib at level 9 (upstream). It measures, never asserts.
func TestBenchCapacity(t *testing.T) {
	out := os.Getenv("AMPHORA_BENCH_OUT")
	if out == "" {
		t.Skip("AMPHORA_BENCH_OUT is not set (make bench sets it)")
	}
	const listeners = 10
	var docs []string
	var msgs []Message
	var perPool []int
	for k := 150; k <= 400; k += 5 {
		r := readingOf(t, sampleCSV(listeners, k))
		msg := NewBuilder(nil).Build(sampleAmphora, r)
		msgs = append(msgs, msg)
		docs = append(docs, string(appendMessage(nil, msg, &jsonScratch{})))
		perPool = append(perPool, k)
	}
	fits := func(size func(i int) int) int {
		best := 0
		for i := range docs {
			if size(i)+hexTagLen <= MaxDatagram {
				best = perPool[i] * listeners
			}
		}
		return best
	}
	var enc Encoder
	ours := fits(func(i int) int {
		d, err := enc.Encode(msgs[i], testKey)
		if err != nil {
			t.Fatal(err)
		}
		return len(d) - hexTagLen
	})
	goNine := fits(func(i int) int {
		var b bytes.Buffer
		zw, _ := zlib.NewWriterLevel(&b, zlib.BestCompression)
		zw.Write([]byte(docs[i]))
		zw.Close()
		return b.Len()
	})
	python := "n/a (no /usr/bin/python3)"
	in, _ := json.Marshal(docs)
	cmd := exec.Command("/usr/bin/python3", "-c", capacityPython)
	cmd.Stdin = bytes.NewReader(in)
	if res, err := cmd.Output(); err == nil {
		var sizes []int
		if err := json.Unmarshal(res, &sizes); err == nil && len(sizes) == len(docs) {
			python = fmt.Sprint(fits(func(i int) int { return sizes[i] }))
		}
	} else {
		python = fmt.Sprintf("n/a (%v)", err)
	}
	res, _ := json.Marshal(map[string]any{"level": ZlibLevel, "ours": ours, "go9": goNine, "python9": python})
	if err := os.WriteFile(filepath.Join(out, "capacity.json"), res, 0o644); err != nil {
		t.Fatal(err)
	}
	text := string(res)
	t.Log("\n" + text)
}
