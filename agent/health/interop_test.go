//go:build interop

package health

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const debianPython = "/usr/bin/python3"

// Upstream's own builder (python3-octavia's health_daemon, with only the
// socket and the LB list mocked) and ours, fed the same `show stat`
// answers over two polls (the §4.7 sample, then counters that grew for one
// listener and went down for the other), give the same messages and the
// same counter file (§7.14, §7.17, §7.18).
func TestInteropUpstreamBuilder(t *testing.T) {
	if _, err := os.Stat(debianPython); err != nil {
		t.Fatalf("the interop tier needs Debian's python3-octavia (make deps installs it): %v", err)
	}
	script, err := filepath.Abs(filepath.Join("testdata", "upstream_build.py"))
	if err != nil {
		t.Fatal(err)
	}
	all1 := string(readTestdata(t, "show-stat-all.csv"))
	all2 := all1
	for old, repl := range map[string]string{
		"1e2d3c4b-5a69-4788-9a0b-c1d2e3f4a5b6,FRONTEND,,,3,12,50000,1520,482113,9911321,0,0,4,": "1e2d3c4b-5a69-4788-9a0b-c1d2e3f4a5b6,FRONTEND,,,5,12,50000,1600,500000,10000000,0,0,4,",
		"7a8b9c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d,FRONTEND,,,1,5,50000,87,10420,88231,0,0,0,":       "7a8b9c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d,FRONTEND,,,0,5,50000,3,900,7000,0,0,0,",
	} {
		if !strings.Contains(all2, old) {
			t.Fatalf("sample lacks %q", old)
		}
		all2 = strings.Replace(all2, old, repl, 1)
	}
	backends := func(all string) string {
		lines := strings.Split(all, "\n")
		out := []string{lines[0]}
		for _, l := range lines[1:] {
			if l != "" && !strings.Contains(l, ",FRONTEND,") {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n") + "\n\n"
	}
	pyBase := t.TempDir()
	req, _ := json.Marshal(map[string]any{
		"base_path": pyBase, "amphora_id": sampleAmphora, "seq": 41,
		"polls": []map[string]string{{"all": all1, "backends": backends(all1)}, {"all": all2, "backends": backends(all2)}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, debianPython, script)
	cmd.Stdin = bytes.NewReader(req)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("upstream builder: %v\n%s", err, stderr.String())
	}
	var upstream []struct {
		Message      json.RawMessage `json:"message"`
		CountersFile string          `json:"counters_file"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &upstream); err != nil || len(upstream) != 2 {
		t.Fatalf("upstream output %q: %v", stdout.String(), err)
	}

	goBase := t.TempDir()
	counters, err := LoadCounters(CountersPath(goBase))
	if err != nil {
		t.Fatal(err)
	}
	b := NewBuilder(counters)
	b.seq = 41
	for i, all := range []string{all1, all2} {
		r := readingOf(t, []byte(all))
		msg, _ := json.Marshal(b.Build(sampleAmphora, r))
		if err := b.Counters().Save(CountersPath(goBase)); err != nil {
			t.Fatal(err)
		}
		if !jsonEqual(t, msg, upstream[i].Message) {
			t.Errorf("poll %d: ours\n%s\nupstream\n%s", i+1, msg, upstream[i].Message)
		}
		file, _ := os.ReadFile(CountersPath(goBase))
		if !jsonEqual(t, file, []byte(upstream[i].CountersFile)) {
			t.Errorf("poll %d: counter file ours\n%s\nupstream\n%s", i+1, file, upstream[i].CountersFile)
		}
		if string(file) != upstream[i].CountersFile {
			t.Logf("poll %d: counter files equal as JSON, bytes differ:\n%s\n%s", i+1, file, upstream[i].CountersFile)
		}
	}
	t.Logf("upstream poll 2: %s", upstream[1].Message)
}
