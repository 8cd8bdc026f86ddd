package haproxytest

import (
	"maps"
	"strings"
	"testing"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

// The sample answer the stats client's tests serve too.
const sampleInfo = "../testdata/show-info.txt"

// The spec's sample `show info` (§4.5): Uptime_sec, lines without a colon
// skipped, values split at the first colon and trimmed.
func TestParseInfo(t *testing.T) {
	data := testkit.ReadFiles(t, sampleInfo)[0].Data
	info := ParseInfo(append(data, "a line without colon\n: no key\n"...))
	up, err := info.UptimeSec()
	if err != nil || up != 727 {
		t.Fatalf("UptimeSec = %d, %v", up, err)
	}
	want := map[string]string{
		"Name": "HAProxy", "Uptime": "0d 0h12m07s", "description": "",
		"node": "amphora-9d2b6e1c-4f3a-4c8e-8b7d-2a1e5f6c7d80", "Release_date": "2023/12/07",
	}
	for k, v := range want {
		if got, ok := info[k]; !ok || got != v {
			t.Errorf("info[%q] = %q, %v; want %q", k, got, ok, v)
		}
	}
	if len(info) != 15 {
		t.Errorf("%d keys, want 15: %v", len(info), info)
	}
	if _, err := (Info{"Uptime_sec": "x"}).UptimeSec(); err == nil {
		t.Error("bad Uptime_sec accepted")
	}
	if _, err := (Info{}).UptimeSec(); err == nil {
		t.Error("missing Uptime_sec accepted")
	}
}

// FuzzParseInfo: keys and values are trimmed single-line strings, keys
// non-empty and without ':'; written back as "Key: value" lines they parse
// to the same map.
func FuzzParseInfo(f *testing.F) {
	f.Add(testkit.ReadFiles(f, sampleInfo)[0].Data)
	f.Add([]byte(""))
	f.Add([]byte("a:b:c\n :x\n\r\nk: v\r\nk: w\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		info := ParseInfo(data)
		var b strings.Builder
		for k, v := range info {
			if k == "" || k != strings.TrimSpace(k) || v != strings.TrimSpace(v) || strings.Contains(k, ":") || strings.ContainsAny(k+v, "\n") {
				t.Fatalf("entry %q: %q", k, v)
			}
			b.WriteString(k + ": " + v + "\n")
		}
		if again := ParseInfo([]byte(b.String())); !maps.Equal(info, again) {
			t.Fatalf("%q, then %q after writing it back", info, again)
		}
	})
}

// `show info` from HAProxy 2.6 (Debian bookworm) and 3.0 (Debian trixie):
// the same "Key: value" lines; 3.0 adds seven keys (TotalWarnings,
// BootTime_ms, CurrStreams, ...) and spells TotalSplicedBytesOut right,
// where 2.6 wrote TotalSplicdedBytesOut. The agent reads neither.
func TestParseInfoVersions(t *testing.T) {
	for _, tc := range []struct {
		file, version string
		keys          int
		spliced       string
	}{
		{"../testdata/show-info-2.6.12.txt", "2.6.12-1+deb12u3", 69, "TotalSplicdedBytesOut"},
		{"../testdata/show-info-3.0.11.txt", "3.0.11-1+deb13u4", 76, "TotalSplicedBytesOut"},
	} {
		info := ParseInfo(testkit.ReadFiles(t, tc.file)[0].Data)
		if up, err := info.UptimeSec(); err != nil || up < 0 {
			t.Errorf("%s: UptimeSec = %d, %v", tc.file, up, err)
		}
		if info["Name"] != "HAProxy" || info["Version"] != tc.version || len(info) != tc.keys {
			t.Errorf("%s: Name %q, Version %q, %d keys; want HAProxy, %q, %d", tc.file, info["Name"], info["Version"], len(info), tc.version, tc.keys)
		}
		if _, ok := info[tc.spliced]; !ok {
			t.Errorf("%s: no %s", tc.file, tc.spliced)
		}
	}
}
