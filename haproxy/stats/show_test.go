package stats

import (
	"encoding/csv"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
)

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// summary renders the columns the heartbeat reads, one row per line.
func summary(rows []Row) string {
	var b strings.Builder
	for _, r := range rows {
		b.WriteString(strings.Join([]string{r.PxName(), r.SvName(), r.Status(), r.Get(ColWeight),
			r.Get(ColScur), r.Get(ColStot), r.Get(ColBin), r.Get(ColBout), r.Get(ColEreq)}, "|"))
		b.WriteByte('\n')
	}
	return b.String()
}

// The spec's sample answer (health-and-config §4.7), HAProxy 2.4 columns.
func TestParseStatSpecSample(t *testing.T) {
	rows, err := ParseStat(readFile(t, "show-stat-all.csv"))
	if err != nil {
		t.Fatal(err)
	}
	const want = `1e2d3c4b-5a69-4788-9a0b-c1d2e3f4a5b6|FRONTEND|OPEN||3|1520|482113|9911321|4
3b4c5d6e-7f80-4912-a3b4-c5d6e7f8091a:1e2d3c4b-5a69-4788-9a0b-c1d2e3f4a5b6|e1a2b3c4-d5e6-4f70-8192-a3b4c5d6e7f8|UP|1|0|1012|320011|6601200|
3b4c5d6e-7f80-4912-a3b4-c5d6e7f8091a:1e2d3c4b-5a69-4788-9a0b-c1d2e3f4a5b6|f2b3c4d5-e6f7-4081-9203-b4c5d6e7f809|DOWN|1|0|0|0|0|
3b4c5d6e-7f80-4912-a3b4-c5d6e7f8091a:1e2d3c4b-5a69-4788-9a0b-c1d2e3f4a5b6|0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d|UP|0|0|504|162102|3310121|
3b4c5d6e-7f80-4912-a3b4-c5d6e7f8091a:1e2d3c4b-5a69-4788-9a0b-c1d2e3f4a5b6|1b2c3d4e-5f6a-4b7c-9d8e-0f1a2b3c4d5e|MAINT|1|0|0|0|0|
3b4c5d6e-7f80-4912-a3b4-c5d6e7f8091a:1e2d3c4b-5a69-4788-9a0b-c1d2e3f4a5b6|BACKEND|UP|1|0|1516|482113|9911321|
7a8b9c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d|FRONTEND|OPEN||1|87|10420|88231|0
c0ffee00-1234-4abc-8def-0123456789ab:7a8b9c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d|2c3d4e5f-6a7b-4c8d-8e9f-1a2b3c4d5e6f|no check|1|0|50|6100|51000|
c0ffee00-1234-4abc-8def-0123456789ab:7a8b9c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d|3d4e5f6a-7b8c-4d9e-9f0a-2b3c4d5e6f7a|no check|1|0|37|4320|37231|
c0ffee00-1234-4abc-8def-0123456789ab:7a8b9c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d|BACKEND|UP|2|0|87|10420|88231|
`
	if got := summary(rows); got != want {
		t.Fatalf("rows:\n%s\nwant:\n%s", got, want)
	}
	// The last_chk column holds HAProxy's <3C>/<3E> escapes verbatim.
	if got := rows[1].Get("last_chk"); got != "HTTP status check returned code <3C>200<3E>" {
		t.Errorf("last_chk = %q", got)
	}
	if n, err := rows[0].Uint(ColBout); err != nil || n != 9911321 {
		t.Errorf("Uint(bout) = %d, %v", n, err)
	}
	if _, err := rows[1].Uint(ColEreq); err == nil {
		t.Error("Uint of an empty field succeeded")
	}
	// `show stat -1 6 -1`: the same header, backends and servers only.
	back, err := ParseStat(readFile(t, "show-stat-backends.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != 8 {
		t.Fatalf("%d backend/server rows, want 8", len(back))
	}
}

// Columns by name: later releases append columns (agg_*, a "-" marker and
// module counters), quoted fields may hold commas and quotes, lines end in
// a trailing comma, some lines are shorter than the header.
func TestParseStatTolerance(t *testing.T) {
	data := "# svname,status,weight,pxname,scur,stot,bin,bout,ereq,uweight,agg_server_status,-,h1_open_connections,\n" +
		"FRONTEND,OPEN,,\"fe,1\",2,10,100,200,1,,,-,3,\n" +
		"\n" +
		"\"s\"\"1\",UP,0,\"p:fe,1\",0,5,50,60,,1,1,-,0,\n" +
		"BACKEND,DOWN,0,\"p:fe,1\"\n" +
		"\n"
	rows, err := ParseStat([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	const want = "fe,1|FRONTEND|OPEN||2|10|100|200|1\n" +
		"p:fe,1|s\"1|UP|0|0|5|50|60|\n" +
		"p:fe,1|BACKEND|DOWN|0|||||\n"
	if got := summary(rows); got != want {
		t.Fatalf("rows:\n%s\nwant:\n%s", got, want)
	}
	if !rows[0].Has("h1_open_connections") || rows[0].Get("h1_open_connections") != "3" {
		t.Errorf("module counter column: %q", rows[0].Get("h1_open_connections"))
	}
	if rows[0].Has("") || rows[0].Get("") != "" {
		t.Error("the trailing empty column has a name")
	}
	if rows[0].Get("no_such_column") != "" {
		t.Error("unknown column has a value")
	}
	// A header alone is a valid answer: HAProxy with nothing to report.
	rows, err = ParseStat([]byte("# pxname,svname,status,\n\n"))
	if err != nil || len(rows) != 0 {
		t.Fatalf("header only: %v, %v", rows, err)
	}
}

func TestParseStatRejects(t *testing.T) {
	for name, data := range map[string]string{
		"empty":             "",
		"blank":             "\n\n",
		"unknown command":   "Unknown command, but maybe one of the following ones is a better match:\n  help\n\n",
		"permission denied": "Permission denied\n\n",
		"no pxname column":  "# svname,status,\nFRONTEND,OPEN,\n",
		"bad quoting":       "# pxname,svname,status,\n\"a,FRONTEND,OPEN,\n",
	} {
		if rows, err := ParseStat([]byte(data)); err == nil {
			t.Errorf("%s: parsed as %d rows", name, len(rows))
		}
	}
}

// ParseStat splits fields lazily; every field must read exactly as a full
// RFC 4180 reader (encoding/csv) reads it, quoted or not, across line
// breaks inside quotes and CRLF line ends.
func TestParseStatMatchesCSVReader(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"a", "UP", "no check", "0", "12", "", "p:l", "x y", "é", "\"q,1\"", "\"a\"\"b\"", "\"two\nlines\"", "\"\""}
	for round := range 300 {
		cols := 3 + rng.IntN(25)
		var b strings.Builder
		b.WriteString("# pxname,svname,status")
		for c := 3; c < cols; c++ {
			fmt.Fprintf(&b, ",c%d", c)
		}
		b.WriteString(",\n")
		for range rng.IntN(6) {
			n := 1 + rng.IntN(cols+1)
			for f := range n {
				if f > 0 {
					b.WriteByte(',')
				}
				b.WriteString(pieces[rng.IntN(len(pieces))])
			}
			if rng.IntN(3) == 0 {
				b.WriteByte('\r')
			}
			b.WriteByte('\n')
		}
		data := b.String()
		rows, err := ParseStat([]byte(data))
		r := csv.NewReader(strings.NewReader(data[2:]))
		r.FieldsPerRecord = -1
		recs, cerr := r.ReadAll()
		if (err != nil) != (cerr != nil) {
			t.Fatalf("round %d: ParseStat error %v, encoding/csv error %v\n%s", round, err, cerr, data)
		}
		if err != nil {
			continue
		}
		var want [][]string
		for _, rec := range recs[1:] {
			if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
				continue
			}
			want = append(want, rec)
		}
		if len(rows) != len(want) {
			t.Fatalf("round %d: %d rows, want %d\n%q", round, len(rows), len(want), data)
		}
		for i, rec := range want {
			got := rows[i].Fields(nil, cols+5)
			if !slices.Equal(got, rec) {
				t.Fatalf("round %d row %d: Fields %q, want %q\n%q", round, i, got, rec, data)
			}
			for c := range cols + 2 {
				w := ""
				if c < len(rec) {
					w = rec[c]
				}
				if g := rows[i].At(c); g != w {
					t.Fatalf("round %d row %d: At(%d) = %q, want %q\n%q", round, i, c, g, w, data)
				}
			}
			var at []int
			for c := range cols + 2 {
				if rng.IntN(3) == 0 {
					at = append(at, c)
				}
			}
			checkFieldsAt(t, rows[i], rec, at)
		}
	}
}

// Fields of an unquoted row: the first n comma-separated fields, as
// strings.Split gives them, for every n.
func TestFieldsFirstN(t *testing.T) {
	lines := []string{"", "a", "a,", ",", "px,sv,,12,,UP,0,", "p:l,FRONTEND,1,2,3",
		"pool:listener,member-0001,0,0,0,3,,0,0,0,,0,,0,0,0,0,UP,1,1,0,0,0,12,0,,1,3,1,,0,,2,0,,1,L4OK,,0",
		",,,,,,,,,,,,,,,,,,,,", "+,-.,\xac\x2c,,\u00ac"}
	// A comma at each place in a word, and bytes next to ',' (0x2c) that
	// a sloppy test for it could take for one.
	for i := range 24 {
		lines = append(lines, strings.Repeat("a", i)+","+strings.Repeat("-+", 8), strings.Repeat("\xac+-\x00", i%5)+",\xff,")
	}
	for _, line := range lines {
		rows, err := ParseStat([]byte("# pxname,svname,status\n" + line + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		all := strings.Split(line, ",")
		if len(rows) == 0 { // an empty line is no row
			if strings.TrimSpace(line) != "" {
				t.Fatalf("%q: no row", line)
			}
			continue
		}
		for i := range len(all) + 2 {
			checkFieldsAt(t, rows[0], all, []int{i})
			for j := i + 1; j < len(all)+2; j++ {
				checkFieldsAt(t, rows[0], all, []int{i, j})
				checkFieldsAt(t, rows[0], all, []int{0, i, j})
			}
		}
		for n := 0; n <= len(all)+1; n++ {
			want := all[:min(n, len(all))]
			if got := rows[0].Fields([]string{"kept"}, n); !slices.Equal(got, append([]string{"kept"}, want...)) {
				t.Errorf("%q: Fields(%d) = %q, want %q", line, n, got[1:], want)
			}
		}
	}
}

// checkFieldsAt checks FieldsAt(at) against the row's fields rec.
func checkFieldsAt(t *testing.T, row Row, rec []string, at []int) {
	t.Helper()
	at = slices.Compact(at)
	want := make([]string, len(at))
	for k, i := range at {
		if i < len(rec) {
			want[k] = rec[i]
		}
	}
	got := []string{"stale", "stale", "stale"}
	got = slices.Grow(got, len(at))
	row.FieldsAt(got, at)
	if got = got[:len(at)]; !slices.Equal(got, want) {
		t.Fatalf("%q: FieldsAt(%v) = %q, want %q", row.line, at, got, want)
	}
}

// A reader that reuses its rows and answer buffer (ShowStat) shares
// the header of its last answer when the new one has the same header line,
// and the shared header still finds its columns after the buffer that
// held it was overwritten; a new header line gets a header of its own.
func TestParseStatSharesAnUnchangedHeader(t *testing.T) {
	const head = "# pxname,svname,status,weight\n"
	buf := make([]byte, 0, 256)
	parse := func(answer string, rows []Row) []Row {
		t.Helper()
		buf = append(buf[:0], answer...)
		rows, err := parseStatAnswer("sock", "show stat", buf, rows[:0])
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	rows := parse(head+"p:l,m1,UP,1\n", nil)
	first := rows[0].h
	// Overwrite what the first answer's header was cut from.
	rows = parse(head+"p:l,m2,DOWN,0\nq:k,m3,MAINT,1\n", rows)
	if rows[0].h != first || rows[1].h != first {
		t.Fatal("the unchanged header was built again")
	}
	if got := []string{rows[1].PxName(), rows[1].SvName(), rows[1].Status(), rows[1].Get(ColWeight)}; !slices.Equal(got, []string{"q:k", "m3", "MAINT", "1"}) {
		t.Fatalf("row read through the shared header: %q", got)
	}
	rows = parse("# svname,pxname,status,weight\np:l,m4,UP,1\n", rows)
	if rows[0].h == first || rows[0].PxName() != "m4" || rows[0].SvName() != "p:l" {
		t.Fatalf("a new header line: shared %v, pxname %q", rows[0].h == first, rows[0].PxName())
	}
	// The first header, kept by the rows of the first answers, was not
	// changed by what came after.
	px, okPx := first.cols[ColPxName]
	w, okW := first.cols[ColWeight]
	if !okPx || px != 0 || !okW || w != 3 || first.line != strings.TrimSuffix(strings.TrimPrefix(head, "# "), "\n") {
		t.Fatalf("first header changed: %q %v", first.line, first.cols)
	}
}

// `show stat -1 -1 -1` from HAProxy 2.6 (Debian bookworm) and 3.0 (Debian
// trixie) on the same Octavia-shaped config: 3.0 adds 77 columns (per
// protocol session and request counters, HTTP/3 and QUIC counters), all
// after the ones the heartbeat reads, which keep their places; each line
// still ends in a comma. The rows read the same through either header.
func TestParseStatVersions(t *testing.T) {
	const want = `7e8f9a0b-1c2d-4e3f-8a4b-5c6d7e8f9a0b|FRONTEND|OPEN||0|0|0|0|0
9b8a7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d:7e8f9a0b-1c2d-4e3f-8a4b-5c6d7e8f9a0b|3c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e6f|DOWN|1|0|0|0|0|
9b8a7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d:7e8f9a0b-1c2d-4e3f-8a4b-5c6d7e8f9a0b|4d5e6f7a-8b9c-4d0e-9f1a-2b3c4d5e6f7a|no check|0|0|0|0|0|
9b8a7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d:7e8f9a0b-1c2d-4e3f-8a4b-5c6d7e8f9a0b|BACKEND|DOWN|0|0|0|0|0|
`
	var cols []int
	for _, tc := range []struct {
		file    string
		columns int // named in the header
	}{
		{"show-stat-2.6.12.csv", 128},
		{"show-stat-3.0.11.csv", 205},
	} {
		t.Run(tc.file, func(t *testing.T) {
			rows, err := ParseStat(readFile(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if got := summary(rows); got != want {
				t.Fatalf("rows:\n%s\nwant:\n%s", got, want)
			}
			if n := len(rows[0].h.cols); n != tc.columns {
				t.Errorf("%d columns, want %d", n, tc.columns)
			}
			var at []int
			for _, name := range []string{ColPxName, ColSvName, ColScur, ColStot, ColBin, ColBout, ColEreq, ColStatus, ColWeight} {
				at = append(at, rows[0].Column(name))
			}
			if cols == nil {
				cols = at
			} else if !slices.Equal(at, cols) {
				t.Errorf("the heartbeat's columns at %v, in 2.6 at %v", at, cols)
			}
			for _, r := range rows {
				// The trailing comma gives every line one more field.
				if n := len(r.Fields(nil, 1000)); n != tc.columns+1 {
					t.Errorf("%s/%s: %d fields, want %d", r.PxName(), r.SvName(), n, tc.columns+1)
				}
				for _, col := range []string{ColScur, ColStot, ColBin, ColBout} {
					if _, err := r.Uint(col); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
}
