//go:build bench

package health

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// Heartbeat sizes of BenchmarkHeartbeat: 1 LB × 50 listeners × 200 members.
const benchListeners, benchMembers = 50, 200

// TestBenchSample hands make bench the `show stat` answer BenchmarkHeartbeat
// measures, so that upstream's builder can be timed on the very same CSV
// (cmd/amphora-agent/tiers/bench/testdata/upstream_heartbeat.py, driven by
// cmd/amphora-agent/tiers/bench/bench_test.go). It writes $AMPHORA_BENCH_OUT/heartbeat-sample.json
// with the CSV, the amphora id, the key, and what our message carries for
// it. It measures nothing itself.
func TestBenchSample(t *testing.T) {
	out := os.Getenv("AMPHORA_BENCH_OUT")
	if out == "" {
		t.Skip("AMPHORA_BENCH_OUT is not set (make bench sets it)")
	}
	csv := sampleCSV(benchListeners, benchMembers)
	reading := readingOf(t, csv)
	msg := NewBuilder(nil).Build(sampleAmphora, reading)
	doc, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	var enc Encoder
	datagram, err := enc.Encode(msg, testKey)
	if err != nil {
		t.Fatal(err)
	}
	members := 0
	for _, p := range msg.Pools {
		members += len(p.Members)
	}
	sample, _ := json.Marshal(map[string]any{
		"csv":            string(csv),
		"amphora_id":     sampleAmphora,
		"key":            testKey,
		"listeners":      len(msg.Listeners),
		"pools":          len(msg.Pools),
		"members":        members,
		"json_bytes":     len(doc),
		"datagram_bytes": len(datagram),
	})
	if err := os.WriteFile(filepath.Join(out, "heartbeat-sample.json"), sample, 0o600); err != nil {
		t.Fatal(err)
	}
}
