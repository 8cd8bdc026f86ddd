package health

import (
	"os"
	"path/filepath"
	"testing"
)

func stats5(l Listener) [5]int64 {
	s := l.Stats
	return [5]int64{s.TX, s.RX, s.Conns, s.TotConns, s.Ereq}
}

// The worked examples of spec §2.5: first poll gives the absolute values,
// the next poll the growth (conns absolute), and a counter that went down
// (HAProxy restarted) its current value (§7.18).
func TestDeltas(t *testing.T) {
	const http, tcp = "1e2d3c4b-5a69-4788-9a0b-c1d2e3f4a5b6", "7a8b9c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d"
	r, err := FromRows(sampleRows(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	b := NewBuilder(nil)
	first := b.Build("amp", r)
	if got, want := stats5(first.Listeners[http]), [5]int64{9911321, 482113, 3, 1520, 4}; got != want {
		t.Errorf("first poll %v, want %v", got, want)
	}
	next := Reading{Listeners: []ListenerReading{
		{ID: http, Status: "OPEN", Scur: 5, Stot: 1600, Bin: 500000, Bout: 10000000, Ereq: 4},
		{ID: tcp, Status: "OPEN", Scur: 0, Stot: 3, Bin: 900, Bout: 7000, Ereq: 0},
	}}
	second := b.Build("amp", next)
	if got, want := stats5(second.Listeners[http]), [5]int64{88679, 17887, 5, 80, 0}; got != want {
		t.Errorf("second poll %v, want %v", got, want)
	}
	if got, want := stats5(second.Listeners[tcp]), [5]int64{7000, 900, 0, 3, 0}; got != want {
		t.Errorf("after a restart %v, want %v", got, want)
	}
}

// The state is written after each message to <base>/stats_counters.json
// with mode 0640 in upstream's layout, read back at start-up, and a
// restarted agent does not resend the totals (§7.18).
func TestCountersPersistence(t *testing.T) {
	base := t.TempDir()
	path := CountersPath(base)
	if path != filepath.Join(base, "stats_counters.json") {
		t.Fatalf("path %s", path)
	}
	c, err := LoadCounters(path)
	if err != nil {
		t.Fatalf("missing file: %v", err)
	}
	r, err := FromRows(sampleRows(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	NewBuilder(c).Build("amp", r)
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640", st.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	if string(data) != string(readTestdata(t, "spec-counters.json")) {
		t.Errorf("file\n%s\nwant\n%s", data, readTestdata(t, "spec-counters.json"))
	}
	if matches, _ := filepath.Glob(filepath.Join(base, ".*tmp*")); len(matches) != 0 {
		t.Errorf("temporary files left: %v", matches)
	}

	// "Restart": a new state from the file; the same reading gives zero
	// deltas, not the totals again.
	c2, err := LoadCounters(path)
	if err != nil {
		t.Fatal(err)
	}
	again := NewBuilder(c2).Build("amp", r)
	for id, l := range again.Listeners {
		s := l.Stats
		if s.TX != 0 || s.RX != 0 || s.TotConns != 0 || s.Ereq != 0 {
			t.Errorf("listener %s after restart: %+v, want zero deltas", id, s)
		}
	}
}

// A file the Python agent wrote (its separators, entries of deleted
// listeners, metrics in any order) is read; a corrupt file starts from an
// empty state with an error to log; an empty one is simply empty.
func TestLoadCountersFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o640); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c, err := LoadCounters(write("py.json", `{"gone": {"stot": 7, "bin": 1, "bout": 2, "ereq": 0}, "L": {"bin": 100, "bout": 200, "ereq": 1, "stot": 10}}`))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := c.Last("L", "bout"); !ok || v != 200 {
		t.Errorf("L bout = %d, %v", v, ok)
	}
	if got := c.Delta("L", "bout", 250); got != 50 {
		t.Errorf("delta %d, want 50", got)
	}
	if got, want := string(c.Marshal()), `{"L": {"bin": 100, "bout": 250, "ereq": 1, "stot": 10}, "gone": {"bin": 1, "bout": 2, "ereq": 0, "stot": 7}}`; got != want {
		t.Errorf("marshal %s\nwant %s", got, want)
	}
	for name, content := range map[string]string{"corrupt.json": `{"L": {"bin": `, "array.json": `[1]`, "strings.json": `{"L": {"bin": "1"}}`} {
		c, err := LoadCounters(write(name, content))
		if err == nil {
			t.Errorf("%s: no error", name)
		}
		if len(c.Marshal()) != 2 {
			t.Errorf("%s: state %s, want empty", name, c.Marshal())
		}
	}
	for name, content := range map[string]string{"empty.json": "", "null.json": "null"} {
		c, err := LoadCounters(write(name, content))
		if err != nil || string(c.Marshal()) != "{}" {
			t.Errorf("%s: %s, %v", name, c.Marshal(), err)
		}
	}
	// A stored negative value (hand-edited file) never yields a delta
	// larger than the counter.
	c, _ = LoadCounters(write("neg.json", `{"L": {"bin": -50}}`))
	if got := c.Delta("L", "bin", 10); got != 10 {
		t.Errorf("delta over a negative stored value = %d, want 10", got)
	}
	// Save into a folder that does not exist fails without panicking.
	if err := NewCounters().Save(filepath.Join(dir, "missing", "x.json")); err == nil {
		t.Error("save into a missing folder succeeded")
	}
}

// Save writes the file only when a counter moved or a listener or metric
// was added since the last Save: a file removed behind its back comes
// back only then.
func TestCountersSaveOnlyChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), CountersFile)
	c := NewCounters()
	c.Delta("L", metricBin, 5)
	save := func(want bool, what string) {
		t.Helper()
		os.Remove(path)
		if err := c.Save(path); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(path); (err == nil) != want {
			t.Fatalf("%s: file written %v, want %v", what, err == nil, want)
		}
	}
	save(true, "first save")
	save(false, "nothing since")
	c.Delta("L", metricBin, 5)
	save(false, "the same value again")
	c.Delta("L", metricBin, 6)
	save(true, "a counter moved")
	c.Delta("L", metricStot, 0)
	save(true, "a new metric, at zero")
	c.Delta("M", metricBin, 0)
	save(true, "a new listener")
	if got, want := string(c.Marshal()), `{"L": {"bin": 6, "stot": 0}, "M": {"bin": 0}}`; got != want {
		t.Fatalf("state %s, want %s", got, want)
	}
}
