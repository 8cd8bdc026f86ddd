package promex

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"testing/iotest"
)

// translatePage is what the server sends: the gauges, then the page.
func translatePage(t *testing.T, tr *Translator, page []byte, cpu, mem float64) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := WriteUtilization(&out, cpu, mem); err != nil {
		t.Fatal(err)
	}
	if err := tr.Translate(&out, bytes.NewReader(page)); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// diffLines reports the first differing line, readable in a failure.
func diffLines(t *testing.T, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			t.Fatalf("line %d:\n got %q\nwant %q\n(%d lines, want %d)", i+1, gl, wl, len(g), len(w))
		}
	}
	t.Fatal("outputs differ")
}

// Upstream's own sample pair, translated with upstream's test values.
func TestUpstreamSamplePair(t *testing.T) {
	in, err := os.ReadFile("testdata/upstream_haproxy.txt")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/upstream_octavia.txt")
	if err != nil {
		t.Fatal(err)
	}
	var tr Translator
	diffLines(t, translatePage(t, &tr, in, 50, 23.5), want)
	// The buffers a translator keeps do not leak from page to page.
	diffLines(t, translatePage(t, &tr, in, 50, 23.5), want)
}

// The same page read a byte at a time, and with a line as long as
// MaxLine, gives the same result.
func TestReadShapes(t *testing.T) {
	in, err := os.ReadFile("testdata/upstream_haproxy.txt")
	if err != nil {
		t.Fatal(err)
	}
	var want, got bytes.Buffer
	var tr Translator
	if err := tr.Translate(&want, bytes.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	if err := tr.Translate(&got, iotest.OneByteReader(bytes.NewReader(in))); err != nil {
		t.Fatal(err)
	}
	diffLines(t, got.Bytes(), want.Bytes())

	head := "haproxy_frontend_bytes_in_total{proxy=\""
	long := strings.Repeat("x", MaxLine-len(head)-len("\"} 7"))
	page := head + long + "\"} 7\nhaproxy_process_listeners 3"
	got.Reset()
	if err := tr.Translate(&got, strings.NewReader(page)); err != nil {
		t.Fatal(err)
	}
	wantLong := "octavia_listener_bytes_in_total{listener=\"" + long + "\"} 7\noctavia_loadbalancer_listeners 3"
	if got.String() != wantLong {
		t.Fatalf("long line: got %d bytes %q..., want %d bytes", got.Len(), got.String()[:60], len(wantLong))
	}
}

// countingReader counts what is read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// A line over MaxLine ends the page with ErrLineTooLong as soon as the
// cap is passed: the rest of it is never read, let alone held (a 1 GiB
// line once took 4.2 GB).
func TestLineOverCap(t *testing.T) {
	const endless = 64 << 20
	for _, before := range []string{"", "haproxy_process_listeners 3\n"} {
		src := &countingReader{r: io.MultiReader(strings.NewReader(before+"haproxy_process_listeners{x=\""),
			io.LimitReader(repeatReader('x'), endless))}
		var tr Translator
		var out bytes.Buffer
		err := tr.Translate(&out, src)
		if !errors.Is(err, ErrLineTooLong) {
			t.Fatalf("after %q: %v, want ErrLineTooLong", before, err)
		}
		if src.n > 2*MaxLine {
			t.Errorf("after %q: read %d bytes of the long line's page, want at most %d", before, src.n, 2*MaxLine)
		}
		// The same translator serves the next page.
		out.Reset()
		if err := tr.Translate(&out, strings.NewReader("haproxy_process_listeners 4\n")); err != nil || out.String() != "octavia_loadbalancer_listeners 4\n" {
			t.Errorf("the next page: %q %v", out.String(), err)
		}
	}
}

// repeatReader reads as an endless run of one byte.
type repeatReader byte

func (r repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// Line by line, the cases upstream's substring matching decides.
func TestLines(t *testing.T) {
	cases := []struct{ in, want string }{
		// HELP replaced, TYPE renamed, samples renamed with their labels.
		{"# HELP haproxy_frontend_status Current status of the service.\n",
			"# HELP octavia_listener_status Current status of the listener. 0=OFFLINE, 1=ONLINE, 2=DEGRADED.\n"},
		{"# TYPE haproxy_frontend_status gauge\n", "# TYPE octavia_listener_status gauge\n"},
		{"haproxy_frontend_status{proxy=\"l1\"} 1\n", "octavia_listener_status{listener=\"l1\"} 1\n"},
		{"# HELP haproxy_frontend_bytes_in_total Current total of incoming bytes.\n",
			"# HELP octavia_listener_bytes_in_total Current total of incoming bytes.\n"},
		{"haproxy_backend_active_servers{proxy=\"p\"} 2\n", "octavia_pool_active_members{pool=\"p\"} 2\n"},
		{"haproxy_server_weight{proxy=\"p\",server=\"m\"} 1\n", "octavia_member_weight{pool=\"p\",member=\"m\"} 1\n"},
		{"haproxy_server_http_responses_total{proxy=\"p\",server=\"m\",code=\"2xx\"} 5\n",
			"octavia_member_http_responses_total{pool=\"p\",member=\"m\",code=\"2xx\"} 5\n"},
		{"haproxy_process_max_connections 4000\n", "octavia_loadbalancer_max_connections 4000\n"},
		{"haproxy_process_pool_used_bytes 1\n", "octavia_memory_pool_used_bytes 1\n"},
		// The last line of a page may lack its newline.
		{"haproxy_process_listeners 3", "octavia_loadbalancer_listeners 3"},
		// Dropped: not in the table, the internal proxies, a process
		// metric in labelled form, a name that only begins like one.
		{"haproxy_process_nbthread 1\n", ""},
		{"haproxy_frontend_status{proxy=\"prometheus-exporter-internal-endpoint\"} 1\n", ""},
		{"haproxy_process_listeners{x=\"y\"} 3\n", ""},
		{"haproxy_frontend_status2 1\n", ""},
		{"\n", ""},
		// Renames apply to every occurrence, as str.replace does; a label
		// value holding "proxy=" is renamed too.
		{"haproxy_frontend_status{proxy=\"a proxy=b\"} 1\n", "octavia_listener_status{listener=\"a listener=b\"} 1\n"},
		// Two names on one line: upstream's order decides (frontend_status
		// comes before bytes_in_total), not their place in the line.
		// The winner is the "name " key, which renames no labels.
		{"haproxy_frontend_bytes_in_total{proxy=\"haproxy_frontend_status \"} 1\n",
			"haproxy_frontend_bytes_in_total{proxy=\"octavia_listener_status \"} 1\n"},
		// A name found inside a longer word counts, as a substring does.
		{"xhaproxy_process_listeners 3\n", "xoctavia_loadbalancer_listeners 3\n"},
		// "HELP" anywhere in a line with a replaced HELP picks the HELP.
		{"haproxy_server_weight {HELP} 1\n", "# HELP octavia_member_weight Member weight.\n"},
		// Labels renamed in any order and place, keys after them too.
		{"haproxy_server_weight{server=\"s\",x=\"proxy=\",proxy=\"p\"} haproxy_server_weight{proxy==\n",
			"octavia_member_weight{member=\"s\",x=\"pool=\",pool=\"p\"} octavia_member_weight{pool==\n"},
		{"haproxy_server_weight{=server=proxy=server}\n", "octavia_member_weight{=member=pool=server}\n"},
		// Comment lines keep their labels as they are.
		{"# haproxy_server_weight{proxy=\"p\"}\n", "# octavia_member_weight{proxy=\"p\"}\n"},
	}
	// (Each case's want is what upstream's code makes of its line.)
	var tr Translator
	for _, c := range cases {
		var out bytes.Buffer
		if err := tr.Translate(&out, strings.NewReader(c.in)); err != nil {
			t.Fatal(err)
		}
		if out.String() != c.want {
			t.Errorf("%q:\n got %q\nwant %q", c.in, out.String(), c.want)
		}
	}
}

func TestUtilization(t *testing.T) {
	var out bytes.Buffer
	// Rounded to one decimal half to even, as Python's round does.
	if err := WriteUtilization(&out, 0.25, 99.95); err != nil {
		t.Fatal(err)
	}
	want := "# HELP octavia_loadbalancer_cpu Load balancer CPU utilization (percentage).\n" +
		"# TYPE octavia_loadbalancer_cpu gauge\noctavia_loadbalancer_cpu 0.2\n" +
		"# HELP octavia_loadbalancer_memory Load balancer memory utilization (percentage).\n" +
		"# TYPE octavia_loadbalancer_memory gauge\noctavia_loadbalancer_memory 100.0\n"
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
}

// fakeSource answers with one sample per family it is asked for.
type fakeSource struct{ asked []string }

func (f *fakeSource) WriteSamples(w io.Writer, family string) error {
	f.asked = append(f.asked, family)
	if family == "octavia_listener_bytes_in_total" {
		_, err := io.WriteString(w, family+"{listener=\"udp\"} 9\n")
		return err
	}
	return nil
}

// An extra source's samples land inside their family, after HAProxy's.
func TestSources(t *testing.T) {
	page := "# HELP haproxy_process_listeners x\nhaproxy_process_listeners 1\n" +
		"# HELP haproxy_process_nbthread x\nhaproxy_process_nbthread 1\n" +
		"# TYPE haproxy_frontend_bytes_in_total counter\n" +
		"haproxy_frontend_bytes_in_total{proxy=\"a\"} 1\n" +
		"haproxy_frontend_bytes_in_total{proxy=\"prometheus-exporter-internal-endpoint\"} 1\n" +
		"# TYPE haproxy_frontend_bytes_out_total counter\n" +
		"haproxy_frontend_bytes_out_total{proxy=\"a\"} 1\n"
	src := &fakeSource{}
	tr := Translator{Sources: []Source{src}}
	var out bytes.Buffer
	if err := tr.Translate(&out, strings.NewReader(page)); err != nil {
		t.Fatal(err)
	}
	want := "# HELP octavia_loadbalancer_listeners x\noctavia_loadbalancer_listeners 1\n" +
		"# TYPE octavia_listener_bytes_in_total counter\n" +
		"octavia_listener_bytes_in_total{listener=\"a\"} 1\n" +
		"octavia_listener_bytes_in_total{listener=\"udp\"} 9\n" +
		"# TYPE octavia_listener_bytes_out_total counter\n" +
		"octavia_listener_bytes_out_total{listener=\"a\"} 1\n"
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
	if got := fmt.Sprint(src.asked); got != "[octavia_loadbalancer_listeners octavia_listener_bytes_in_total octavia_listener_bytes_out_total]" {
		t.Fatalf("asked for %s", got)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("gone") }

func TestErrors(t *testing.T) {
	in, err := os.ReadFile("testdata/upstream_haproxy.txt")
	if err != nil {
		t.Fatal(err)
	}
	var tr Translator
	if err := tr.Translate(io.Discard, iotest.TimeoutReader(bytes.NewReader(in))); err == nil {
		t.Fatal("a read error mid-page is not reported")
	}
	if err := tr.Translate(failingWriter{}, bytes.NewReader(in)); err == nil {
		t.Fatal("a write error is not reported")
	}
}

// Every name of the table is made of the bytes match scans, or it could
// never be found.
func TestTableNames(t *testing.T) {
	if len(entries) != len(table) {
		t.Fatalf("%d rows but %d names: a name is listed twice", len(table), len(entries))
	}
	for name, e := range entries {
		for i := 0; i < len(name); i++ {
			if !isNameByte(name[i]) {
				t.Errorf("%q: byte %q", name, name[i])
			}
		}
		for _, r := range e.labels {
			if bytes.IndexByte(r.from, '=') != len(r.from)-1 {
				t.Errorf("%q: label %q does not end in its only =", name, r.from)
			}
		}
	}
}

// The one-pass renaming equals upstream's sequence of str.replace calls
// (labels in order, then the key) on lines made of the pieces that could
// confuse it.
func TestRenamesEqualSequentialReplace(t *testing.T) {
	pieces := []string{"proxy=", "server=", "haproxy_server_weight{", "haproxy_server_weight ",
		"=", "{", " ", "x", "\"", "proxy", "server", "haproxy_", "p", "s", "roxy="}
	e := entries["haproxy_server_weight"]
	rng := uint64(1)
	for n := 0; n < 20000; n++ {
		var line []byte
		for i := 0; i < 1+n%12; i++ {
			rng = rng*6364136223846793005 + 1442695040888963407
			line = append(line, pieces[rng>>33%uint64(len(pieces))]...)
		}
		for k := 0; k < 2; k++ {
			want := line
			for _, r := range e.labels {
				want = bytes.ReplaceAll(want, r.from, r.to)
			}
			want = bytes.ReplaceAll(want, e.keys[k], e.repl[k])
			var got bytes.Buffer
			w := bufio.NewWriter(&got)
			if err := writeRenamed(w, line, e.labels, rename{e.keys[k], e.repl[k]}); err != nil {
				t.Fatal(err)
			}
			w.Flush()
			if got.String() != string(want) {
				t.Fatalf("%q:\n got %q\nwant %q", line, got.String(), want)
			}
		}
	}
}

// Streaming: a translator in use allocates nothing per page or per line,
// so a scrape's memory does not grow with the members (10,000 here).
func TestTranslateAllocatesNothing(t *testing.T) {
	var page bytes.Buffer
	page.WriteString("# HELP haproxy_server_weight x\n# TYPE haproxy_server_weight gauge\n")
	for i := 0; i < 10000; i++ {
		fmt.Fprintf(&page, "haproxy_server_weight{proxy=\"p%d:l\",server=\"m%d\"} 1\n", i/200, i)
	}
	var tr Translator
	r := bytes.NewReader(page.Bytes())
	allocs := testing.AllocsPerRun(3, func() {
		r.Reset(page.Bytes())
		if err := tr.Translate(io.Discard, r); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per page", allocs)
	}
}
