package health

import (
	"encoding/json"
	"testing"
)

// The cost of one heartbeat for 1 LB × 50 listeners × 200 members each,
// from the `show stat` answer to the signed datagram (make bench). The
// stages are measured separately too. No timing is asserted anywhere.
func BenchmarkHeartbeat(b *testing.B) {
	const listeners, members = 50, 200
	csv := sampleCSV(listeners, members)
	reading := readingOf(b, csv)
	if len(reading.Listeners) != listeners || len(reading.Pools) != listeners {
		b.Fatalf("sample has %d listeners, %d pools", len(reading.Listeners), len(reading.Pools))
	}
	msg := NewBuilder(nil).Build(sampleAmphora, reading)
	doc, _ := json.Marshal(msg)

	b.Run("csv-to-datagram", func(b *testing.B) {
		builder := NewBuilder(nil)
		var enc Encoder
		var size int
		b.ReportAllocs()
		for b.Loop() {
			d, err := enc.Encode(builder.Build(sampleAmphora, readingOf(b, csv)), testKey)
			if err != nil {
				b.Fatal(err)
			}
			size = len(d)
		}
		b.ReportMetric(float64(len(csv)), "csv-bytes")
		b.ReportMetric(float64(len(doc)), "json-bytes")
		b.ReportMetric(float64(size), "datagram-bytes")
	})
	b.Run("parse-csv", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			readingOf(b, csv)
		}
	})
	b.Run("build-message", func(b *testing.B) {
		builder := NewBuilder(nil)
		b.ReportAllocs()
		for b.Loop() {
			builder.Build(sampleAmphora, reading)
		}
	})
	b.Run("json-zlib-hmac", func(b *testing.B) {
		var enc Encoder
		b.ReportAllocs()
		for b.Loop() {
			if _, err := enc.Encode(msg, testKey); err != nil {
				b.Fatal(err)
			}
		}
	})
}
