package health

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/amphora-agent/amphora-agent/agent/health/healthtest"
	"github.com/amphora-agent/amphora-agent/haproxy/stats"
)

const sampleAmphora = "9d2b6e1c-4f3a-4c8e-8b7d-2a1e5f6c7d80"

func sampleRows(t *testing.T, extra string) []stats.Row {
	t.Helper()
	rows, err := stats.ParseStat(append(readTestdata(t, "show-stat-all.csv"), extra...))
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func buildSample(t *testing.T, seq uint64) Message {
	t.Helper()
	r, err := FromRows(sampleRows(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	b := NewBuilder(nil)
	b.seq = seq
	return b.Build(sampleAmphora, r)
}

// The §4.7 sample CSV gives exactly the §2.9 message (golden file taken
// verbatim from the spec) and counter file (§7.14, §7.16, §7.17).
func TestSampleGolden(t *testing.T) {
	r, err := FromRows(sampleRows(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	b := NewBuilder(nil)
	b.seq = 41
	msg := b.Build(sampleAmphora, r)
	got, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	if want := readTestdata(t, "spec-message.json"); !jsonEqual(t, got, want) {
		t.Fatalf("message\n%s\nwant (testdata/spec-message.json)\n%s", got, want)
	}
	if b.NextSeq() != 42 {
		t.Errorf("next seq %d, want 42", b.NextSeq())
	}
	// Byte-identical to what upstream writes for this state.
	if got, want := b.Counters().Marshal(), readTestdata(t, "spec-counters.json"); !bytes.Equal(got, want) {
		t.Fatalf("counter file\n%s\nwant (testdata/spec-counters.json)\n%s", got, want)
	}
}

// Rows of proxies named like the Prometheus exporter are ignored
// everywhere: listeners, pools, counters (§7.15). A user listener that
// happens to serve Prometheus is named by its UUID and reported.
func TestPrometheusFiltered(t *testing.T) {
	extra := "prometheus-exporter-internal-endpoint,FRONTEND,OPEN,,1,2,3,4,0,\n" +
		"prometheus-exporter-internal,prometheus-internal,UP,1,0,0,0,0,,\n" +
		"prometheus-exporter-internal,BACKEND,UP,1,0,0,0,0,,\n"
	withProm := sampleRows(t, extra)
	r, err := FromRows(withProm)
	if err != nil {
		t.Fatal(err)
	}
	b := NewBuilder(nil)
	b.seq = 41
	got, _ := json.Marshal(b.Build(sampleAmphora, r))
	if !jsonEqual(t, got, readTestdata(t, "spec-message.json")) {
		t.Fatalf("prometheus rows leaked into\n%s", got)
	}
	if strings.Contains(string(b.Counters().Marshal()), "prometheus") {
		t.Fatalf("prometheus counters kept: %s", b.Counters().Marshal())
	}
}

func rowsOf(t *testing.T, csv string) []stats.Row {
	t.Helper()
	rows, err := stats.ParseStat([]byte("# pxname,svname,status,weight,scur,stot,bin,bout,ereq,\n" + csv))
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// Member and pool statuses are passed through verbatim except UP with
// weight "0" → DRAIN; backends not named <pool>:<listener> are skipped
// (§7.16, spec §2.4).
func TestStatusMapping(t *testing.T) {
	r, err := FromRows(rowsOf(t, `L,FRONTEND,STOP,,0,0,0,0,0,
P:L,up,UP,1,,,,,,
P:L,drained,UP,0,,,,,,
P:L,up-transitional-drained,UP 2/3,0,,,,,,
P:L,down,DOWN,1,,,,,,
P:L,down-agent,DOWN (agent),1,,,,,,
P:L,down-partial,DOWN 1/2,1,,,,,,
P:L,drain,DRAIN,0,,,,,,
P:L,drain-agent,DRAIN (agent),1,,,,,,
P:L,maint,MAINT,1,,,,,,
P:L,maint-via,MAINT (via P:L/up),1,,,,,,
P:L,maint-resolution,MAINT (resolution),1,,,,,,
P:L,nolb,NOLB,1,,,,,,
P:L,nocheck,no check,1,,,,,,
P:L,nocheck-drained,no check,0,,,,,,
P:L,BACKEND,DOWN,0,,,,,,
Q:L,BACKEND,UP,0,,,,,,
nocolon,s1,UP,1,,,,,,
nocolon,BACKEND,UP,1,,,,,,
a:b:c,s1,UP,1,,,,,,
a:b:c,BACKEND,UP,1,,,,,,
R:L,orphan,UP,1,,,,,,
`))
	if err != nil {
		t.Fatal(err)
	}
	msg := NewBuilder(nil).Build("amp", r)
	want := map[string]Pool{
		"P:L": {Status: "DOWN", Members: map[string]string{
			"up": "UP", "drained": "DRAIN", "up-transitional-drained": "UP 2/3", "down": "DOWN",
			"down-agent": "DOWN (agent)", "down-partial": "DOWN 1/2", "drain": "DRAIN",
			"drain-agent": "DRAIN (agent)", "maint": "MAINT", "maint-via": "MAINT (via P:L/up)",
			"maint-resolution": "MAINT (resolution)", "nolb": "NOLB", "nocheck": "no check",
			"nocheck-drained": "no check",
		}},
		"Q:L": {Status: "UP", Members: map[string]string{}},
	}
	if !reflect.DeepEqual(msg.Pools, want) {
		t.Errorf("pools\n%+v\nwant\n%+v", msg.Pools, want)
	}
	if got := msg.Listeners["L"].Status; got != "STOP" {
		t.Errorf("listener status %q, want STOP verbatim", got)
	}
	if want := []string{"nocolon", "a:b:c", "R:L"}; !reflect.DeepEqual(r.Skipped, want) {
		t.Errorf("skipped %v, want %v", r.Skipped, want)
	}
	// A pool without members is {"members": {}}, never null.
	got, _ := json.Marshal(msg)
	if !strings.Contains(string(got), `"Q:L":{"status":"UP","members":{}}`) {
		t.Errorf("empty pool rendered as %s", got)
	}
}

// A FRONTEND row whose counters cannot be read fails the reading rather
// than reporting made-up numbers.
func TestFrontendCounterUnreadable(t *testing.T) {
	if _, err := FromRows(rowsOf(t, "L,FRONTEND,OPEN,,1,x,0,0,0,\n")); err == nil {
		t.Fatal("unparsable stot accepted")
	}
	if _, err := FromRows(rowsOf(t, "L,FRONTEND,OPEN,,1,2,3,4,\n")); err == nil {
		t.Fatal("missing ereq accepted")
	}
}

// Every message has id, seq, listeners, pools and ver 3 and nothing else
// (no recv_time); seq counts from 0; all numbers are non-negative integers
// (§7.5, §7.6, §7.7).
func TestMessageShape(t *testing.T) {
	b := NewBuilder(nil)
	for seq := range 3 {
		var raw map[string]json.RawMessage
		got, err := json.Marshal(b.Build("amp", Reading{}))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(got, &raw); err != nil {
			t.Fatal(err)
		}
		keys := make([]string, 0, len(raw))
		for k := range raw {
			keys = append(keys, k)
		}
		if len(raw) != 5 || string(raw["listeners"]) != "{}" || string(raw["pools"]) != "{}" ||
			string(raw["ver"]) != "3" || string(raw["seq"]) != string(rune('0'+seq)) || string(raw["id"]) != `"amp"` {
			t.Fatalf("message %d: %s (keys %v)", seq, got, keys)
		}
	}
	// Counters beyond int64 saturate instead of wrapping negative; a
	// counter that went down reports its current value, never a negative.
	r := Reading{Listeners: []ListenerReading{{ID: "L", Status: "OPEN", Bin: 1 << 63, Bout: 10, Scur: 1<<64 - 1, Stot: 5}}}
	b.Build("amp", r)
	r.Listeners[0].Bout, r.Listeners[0].Stot = 3, 1
	msg := b.Build("amp", r)
	got, _ := json.Marshal(msg)
	want := `{"id":"amp","seq":4,"listeners":{"L":{"status":"OPEN","stats":{"tx":3,"rx":0,"conns":9223372036854775807,"totconns":1,"ereq":0}}},"pools":{},"ver":3}`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// A backend whose rows come apart (another backend's rows in between)
// still has all its members, and the other backend keeps its own.
func TestFromRowsBackendRowsApart(t *testing.T) {
	csv := "# pxname,svname,status,weight\n" +
		"p1:l1,m1,UP,1\np1:l1,m2,UP,1\n" +
		"p2:l2,m3,DOWN,1\np2:l2,m4,UP,1\n" +
		"p1:l1,m5,UP,1\np1:l1,BACKEND,UP,2\n" +
		"p2:l2,m6,UP,0\np2:l2,BACKEND,UP,1\n" +
		"p3:l3,m7,UP,1\np3:l3,BACKEND,UP,1\n"
	r := readingOf(t, []byte(csv))
	want := []PoolReading{
		{Key: "p1:l1", Status: "UP", Members: []MemberReading{{"m1", "UP"}, {"m2", "UP"}, {"m5", "UP"}}},
		{Key: "p2:l2", Status: "UP", Members: []MemberReading{{"m3", "DOWN"}, {"m4", "UP"}, {"m6", "DRAIN"}}},
		{Key: "p3:l3", Status: "UP", Members: []MemberReading{{"m7", "UP"}}},
	}
	if !reflect.DeepEqual(r.Pools, want) {
		t.Fatalf("pools\n%+v\nwant\n%+v", r.Pools, want)
	}
}

// A builder that reuses its maps builds, message after message, exactly
// what a fresh builder does, as pools and members come, go and stay; an
// encoder that keeps the pools part of unchanged pools sends exactly that
// message too.
func TestReusingBuilderBuildsTheSame(t *testing.T) {
	a := "p1:l1,m1,UP,1\np1:l1,m2,UP,1\np1:l1,BACKEND,UP,1\np2:l2,m3,UP,1\np2:l2,BACKEND,UP,1\n"
	b := "p1:l1,m1,DOWN,1\np1:l1,BACKEND,UP,1\np3:l3,m9,UP,1\np3:l3,BACKEND,UP,1\n"
	c := "p2:l2,m3,UP,0\np2:l2,BACKEND,UP,1\n"
	csvs := []string{a, a, b, b, "", "", c, a}
	reused, fresh := reusing(nil), NewBuilder(nil)
	var enc Encoder
	var seq readingsInTurn
	kept := 0
	for i, csv := range csvs {
		r := seq.read(t, csv)
		msg := reused.Build(sampleAmphora, r)
		if msg.poolsAsBefore {
			kept++
		}
		got, _ := json.Marshal(msg)
		want, _ := json.Marshal(fresh.Build(sampleAmphora, r))
		if !bytes.Equal(got, want) {
			t.Fatalf("message %d\n%s\nwant\n%s", i, got, want)
		}
		d, err := enc.Encode(msg, testKey)
		if err != nil {
			t.Fatal(err)
		}
		if doc, _, err := healthtest.Unwrap(d, testKey); err != nil || !bytes.Equal(doc, want) {
			t.Fatalf("datagram %d carries\n%s (%v)\nwant\n%s", i, doc, err, want)
		}
	}
	if kept != 3 {
		t.Errorf("%d messages kept the pools of the one before, want 3", kept)
	}
	if len(reused.members) != 2 { // those of a
		t.Errorf("maps of pools no longer reported are kept: %v", reused.members)
	}
}

// Readings made one after another from one scratch, as the sender makes
// them, never change afterwards: each equals a fresh parse of its answer
// however later answers differ. A reading equal to the one before shares
// its pools.
func TestSettledReadingsNeverChange(t *testing.T) {
	a := "p1:l1,m1,UP,1\np1:l1,m2,UP,1\np1:l1,BACKEND,UP,1\np2:l2,m3,UP,1\np2:l2,BACKEND,UP,1\n"
	b := "p1:l1,m1,DOWN,1\np1:l1,m2,UP,1\np1:l1,BACKEND,UP,1\np2:l2,m3,UP,0\np2:l2,BACKEND,UP,1\n"
	c := "p2:l2,m4,UP,1\np1:l1,m1,UP,1\np2:l2,m3,UP,1\np1:l1,BACKEND,UP,1\np2:l2,BACKEND,DOWN,1\n"
	csvs := []string{a, a, b, b, a, c, c, "", a}
	var seq readingsInTurn
	var got []Reading
	for i, csv := range csvs {
		prev := seq.prev
		r := seq.read(t, csv)
		if shared := len(prev) > 0 && len(r.Pools) > 0 && &r.Pools[0] == &prev[0]; shared != (i > 0 && csv == csvs[i-1]) {
			t.Errorf("reading %d shares the pools of the one before: %v", i, shared)
		}
		got = append(got, r)
	}
	for i, csv := range csvs {
		want, err := FromRows(rowsOf(t, csv))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got[i].Pools, want.Pools) {
			t.Errorf("reading %d is now\n%+v\nwant\n%+v", i, got[i].Pools, want.Pools)
		}
	}
}

// readingsInTurn makes readings one after another as the sender does:
// one scratch, names kept, pools settled against the last reading.
type readingsInTurn struct {
	names names
	sc    rowScratch
	prev  []PoolReading
}

func (q *readingsInTurn) read(t *testing.T, csv string) Reading {
	t.Helper()
	rows, err := stats.ParseStat([]byte("# pxname,svname,status,weight\n" + csv))
	if err != nil {
		t.Fatal(err)
	}
	q.names.start()
	r, err := fromRows(rows, q.names.keep, &q.sc)
	if err != nil {
		t.Fatal(err)
	}
	q.names.trim()
	r.Pools = settle(r.Pools, q.prev)
	q.prev = r.Pools
	return r
}
