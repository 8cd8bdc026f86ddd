package promex

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/haproxy/stats/haproxytest"
)

var update = flag.Bool("update", false, "capture the HAProxy 2.6 golden pair again (needs root, haproxy, python3-octavia)")

const (
	goldenHAProxy = "testdata/haproxy26_haproxy.txt"
	goldenOctavia = "testdata/haproxy26_octavia.txt"
)

// A page HAProxy 2.6 exported for a configuration rendered by Octavia's own
// templater with a PROMETHEUS listener, and what upstream's prometheus-proxy
// code makes of it: the translation gives the same bytes.
func TestGoldenHAProxy26(t *testing.T) {
	if *update {
		captureGolden(t)
	}
	in, err := os.ReadFile(goldenHAProxy)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(goldenOctavia)
	if err != nil {
		t.Fatal(err)
	}
	// The capture is a real one, with the families the translation needs.
	for _, s := range []string{"haproxy_frontend_", "haproxy_backend_", "haproxy_server_", "prometheus-exporter"} {
		if !bytes.Contains(in, []byte(s)) {
			t.Fatalf("%s has no %s lines", goldenHAProxy, s)
		}
	}
	var tr Translator
	diffLines(t, translatePage(t, &tr, in, 50, 23.5), want)
}

// captureGolden renders the load balancer with the controller's templater,
// runs HAProxy on it, saves the exporter's page, and saves upstream's
// translation of that page.
func captureGolden(t *testing.T) {
	haproxytest.Binary(t) // skips without HAProxy
	if os.Geteuid() != 0 {
		t.Fatal("-update needs root: the rendered config runs HAProxy as nobody")
	}
	dir := haproxytest.ShortDir(t)
	exporter := haproxytest.FreePort(t)
	member := haproxytest.FreePort(t) // nothing listens there: the member is DOWN
	cfg, err := exec.Command("/usr/bin/python3", "testdata/render_prometheus_lb.py",
		"--lb-id", "6034884d-ed47-49d5-ade7-8fa2c4501a74", "--vip", "127.0.0.1", "--base-path", dir,
		"--http-port", strconv.Itoa(haproxytest.FreePort(t)), "--prometheus-port", strconv.Itoa(haproxytest.FreePort(t)),
		"--member", "edf6ca81-b5d5-4d94-a656-f6028d8bbb77,127.0.0.1,"+strconv.Itoa(member),
		"--member", "88ee5795-d594-478b-8591-455acf30164f,127.0.0.1,"+strconv.Itoa(member),
		"--exporter-port", strconv.Itoa(exporter)).Output()
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	if err := os.MkdirAll(dir+"/6034884d-ed47-49d5-ade7-8fa2c4501a74", 0o755); err != nil {
		t.Fatal(err)
	}
	p := haproxytest.Start(t, haproxytest.Options{Config: string(cfg), Dir: dir})
	defer p.Stop()
	page := fetchPage(t, fmt.Sprintf("127.0.0.1:%d", exporter))
	if err := os.WriteFile(goldenHAProxy, page, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("/usr/bin/python3", "testdata/upstream_translate.py", goldenHAProxy).Output()
	if err != nil {
		t.Fatalf("upstream's translation: %v", err)
	}
	if err := os.WriteFile(goldenOctavia, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// fetchPage reads the exporter's page.
func fetchPage(t *testing.T, addr string) []byte {
	t.Helper()
	c, body, err := openPage(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	page, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	return page
}

// openPage GETs /metrics over HTTP/1.0, so HAProxy ends the body by
// closing the connection (no chunks to undo), and returns the connection
// and its body.
func openPage(addr string) (net.Conn, io.Reader, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, nil, err
	}
	c.SetDeadline(time.Now().Add(60 * time.Second))
	io.WriteString(c, "GET /metrics HTTP/1.0\r\nHost: "+addr+"\r\n\r\n")
	r := textproto.NewReader(bufio.NewReaderSize(c, 64<<10))
	status, err := r.ReadLine()
	if err == nil && !strings.Contains(status, " 200 ") {
		err = fmt.Errorf("exporter answered %q", status)
	}
	if err == nil {
		_, err = r.ReadMIMEHeader()
	}
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, r.R, nil
}
