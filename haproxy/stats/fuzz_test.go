package stats

import (
	"bytes"
	"encoding/csv"
	"errors"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/amphora-agent/amphora-agent/agent/testkit"
)

func addTestdata(f *testing.F, glob string, extra ...string) {
	for _, file := range testkit.ReadFiles(f, glob) {
		f.Add(file.Data)
	}
	for _, s := range extra {
		f.Add([]byte(s))
	}
}

// FuzzParseStat: any answer parses or fails with ErrNotCSV; parsed rows
// written back as CSV parse to the same rows.
func FuzzParseStat(f *testing.F) {
	addTestdata(f, "testdata/*.csv",
		"",
		"Unknown command.\n",
		"# pxname,svname,status,pxname\nfe,FRONTEND,OPEN\n\n\"a,b\",\"c\"\"d\",UP,x,y,z\n",
		"# pxname,svname\nx,y\n",
		"# svname,status,pxname\r\n a , b \r\n")
	f.Fuzz(func(t *testing.T, data []byte) {
		rows, err := ParseStat(data)
		if err != nil {
			if !errors.Is(err, ErrNotCSV) {
				t.Fatalf("error not ErrNotCSV: %v", err)
			}
			return
		}
		if len(rows) == 0 {
			return
		}
		// Every row shares the header; write it and the rows back.
		cols := rows[0].h.cols
		width := 0
		for _, i := range cols {
			width = max(width, i+1)
		}
		header := make([]string, width)
		for name, i := range cols {
			header[i] = name
		}
		var buf bytes.Buffer
		buf.WriteString("# ")
		w := csv.NewWriter(&buf)
		w.Write(header)
		for _, r := range rows {
			r.PxName()
			r.SvName()
			r.Status()
			r.Uint(ColScur)
			w.Write(r.Fields(nil, math.MaxInt))
		}
		w.Flush()
		again, err := ParseStat(buf.Bytes())
		if err != nil {
			t.Fatalf("rows written back do not parse: %v\n%q", err, buf.Bytes())
		}
		if len(again) != len(rows) {
			t.Fatalf("%d rows, %d after writing them back\n%q", len(rows), len(again), buf.Bytes())
		}
		names := slices.Collect(maps.Keys(cols))
		for i := range rows {
			for _, n := range names {
				if a, b := rows[i].Get(n), again[i].Get(n); a != b {
					t.Fatalf("row %d column %q: %q, then %q", i, n, a, b)
				}
			}
		}
	})
}

// FuzzFields: an unquoted row splits as strings.Split splits it, whatever
// its bytes and wherever its commas fall in a machine word.
func FuzzFields(f *testing.F) {
	f.Add("pool:listener,member-0001,0,0,0,3,,0,0,0,,0,,0,0,0,0,UP,1,1,0,0,0,12,0,,1,3,1,,0,,2,0,,1,L4OK,,0")
	f.Add("+,-.,\xac\x2c,,\x00,\xff\x2d")
	f.Fuzz(func(t *testing.T, line string) {
		if strings.ContainsAny(line, "\"\r\n") || strings.TrimSpace(line) == "" {
			return
		}
		rows, err := ParseStat([]byte("# pxname,svname,status\n" + line + "\n"))
		if err != nil || len(rows) != 1 {
			t.Fatalf("%q: %d rows, %v", line, len(rows), err)
		}
		want := strings.Split(line, ",")
		if got := rows[0].Fields(nil, math.MaxInt); !slices.Equal(got, want) {
			t.Fatalf("%q: Fields = %q, want %q", line, got, want)
		}
		// Wanted fields spread as the line's own bytes say.
		var at []int
		for i := range len(want) + 1 {
			if line[i%len(line)]&(1<<(i%8)) != 0 {
				at = append(at, i)
			}
		}
		checkFieldsAt(t, rows[0], want, at)
	})
}
