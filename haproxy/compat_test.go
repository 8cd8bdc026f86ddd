package haproxy

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/haproxy/stats/haproxytest"
)

func TestSplitHTTPCheckHeaders(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
		lines          int
	}{
		{
			// Octavia 11-16, http_version 1.1 and domain_name set.
			name:  "version and host",
			in:    "backend p:l\n    mode http\n    option httpchk GET /healthz HTTP/1.1\\r\\nHost:\\ www.example.com\n    http-check expect rstatus 200\n",
			want:  "backend p:l\n    mode http\n    option httpchk GET /healthz HTTP/1.1\n    http-check send hdr Host www.example.com\n    http-check expect rstatus 200\n",
			lines: 1,
		},
		{
			// http_version set, no domain_name: a bare "\r\n".
			name:  "version alone",
			in:    "backend p\n    option httpchk HEAD / HTTP/1.0\\r\\n\n    http-check expect rstatus 200|204\n",
			want:  "backend p\n    option httpchk HEAD / HTTP/1.0\n    http-check expect rstatus 200|204\n",
			lines: 1,
		},
		{
			name:  "two pools, tabs, several headers, no final newline",
			in:    "backend a\n\toption httpchk GET /a HTTP/1.1\\r\\nHost:\\ a.example\nbackend b\n  option  httpchk POST /b HTTP/1.1\\r\\nHost:\\ b.example\\r\\nX-Probe:\\ yes\\r\\n",
			want:  "backend a\n\toption httpchk GET /a HTTP/1.1\n\thttp-check send hdr Host a.example\nbackend b\n  option  httpchk POST /b HTTP/1.1\n  http-check send hdr Host b.example\n  http-check send hdr X-Probe yes",
			lines: 2,
		},
		{
			name: "no version: as it is",
			in:   "backend p\n    option httpchk GET /healthz\n",
			want: "backend p\n    option httpchk GET /healthz\n",
		},
		{
			name: "a body is HAProxy's to judge",
			in:   "backend p\n    option httpchk POST / HTTP/1.1\\r\\nHost:\\ x\\r\\n\\r\\nping\n",
			want: "backend p\n    option httpchk POST / HTTP/1.1\\r\\nHost:\\ x\\r\\n\\r\\nping\n",
		},
		{
			name: "not a header",
			in:   "backend p\n    option httpchk GET / HTTP/1.1\\r\\nno header here\n",
			want: "backend p\n    option httpchk GET / HTTP/1.1\\r\\nno header here\n",
		},
		{
			name: "other lines with \\r\\n",
			in:   "backend p\n    # option httpchk GET / HTTP/1.1\\r\\nHost:\\ x\n    http-request return status 200 content-type text/plain string \"a\\r\\nb\"\n",
			want: "backend p\n    # option httpchk GET / HTTP/1.1\\r\\nHost:\\ x\n    http-request return status 200 content-type text/plain string \"a\\r\\nb\"\n",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, n := splitHTTPCheckHeaders([]byte(c.in))
			if string(got) != c.want || n != c.lines {
				t.Errorf("got %d lines rewritten:\n%s\nwant %d:\n%s", n, got, c.lines, c.want)
			}
		})
	}
}

func TestDropHTX(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
		lines          int
	}{
		{
			// Octavia 11-16's PROMETHEUS listener.
			name:  "the prometheus frontend",
			in:    "frontend prometheus-exporter-internal-endpoint\n    bind 127.0.0.1:9101\n    mode http\n    no log\n    option http-use-htx\n    http-request use-service prometheus-exporter if { path /metrics }\n",
			want:  "frontend prometheus-exporter-internal-endpoint\n    bind 127.0.0.1:9101\n    mode http\n    no log\n    http-request use-service prometheus-exporter if { path /metrics }\n",
			lines: 1,
		},
		{
			name:  "negated, tabs, last line without a newline",
			in:    "defaults\n\tno option http-use-htx\nbackend b\n\toption  http-use-htx ",
			want:  "defaults\nbackend b\n",
			lines: 2,
		},
		{
			name: "a comment and other words stay",
			in:   "backend b\n    # option http-use-htx\n    http-request set-header X-Note http-use-htx\n",
			want: "backend b\n    # option http-use-htx\n    http-request set-header X-Note http-use-htx\n",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, n := dropHTX([]byte(c.in))
			if string(got) != c.want || n != c.lines {
				t.Errorf("got %d lines dropped:\n%q\nwant %d:\n%q", n, got, c.lines, c.want)
			}
		})
	}
}

// The config stored and checked is the rewritten one.
func TestUploadWritesWhatHAProxy3Refuses(t *testing.T) {
	s, _ := newTestStore(t)
	body := "frontend prometheus-exporter-internal-endpoint\n    mode http\n    option http-use-htx\n" +
		"backend P1\n    option httpchk GET / HTTP/1.1\\r\\nHost:\\ www.example.com\n"
	if err := s.Upload(context.Background(), "AMP1", "lb1", []byte(body)); err != nil {
		t.Fatal(err)
	}
	stored, err := os.ReadFile(s.Layout.ConfigPath("lb1"))
	if err != nil {
		t.Fatal(err)
	}
	want := "frontend prometheus-exporter-internal-endpoint\n    mode http\n" +
		"backend P1\n    option httpchk GET / HTTP/1.1\n    http-check send hdr Host www.example.com\n"
	if string(stored) != want {
		t.Fatalf("stored:\n%s\nwant:\n%s", stored, want)
	}
}

// The rewritten check asks the member what the old line asked: the
// method, path, version and Host header Octavia's monitor names. Run with
// the HAProxy installed here; the VM tier runs Octavia's rendering on
// HAProxy 3.0, which refuses the old line.
func TestSplitHTTPCheckAsksTheSame(t *testing.T) {
	member, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	asked := make(chan string, 16)
	go func() {
		for {
			conn, err := member.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(5 * time.Second))
				r := bufio.NewReader(conn)
				var head []string
				for {
					line, err := r.ReadString('\n')
					line = strings.TrimRight(line, "\r\n")
					if err != nil || line == "" {
						break
					}
					head = append(head, line)
				}
				fmt.Fprint(conn, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
				select {
				case asked <- strings.Join(head, "|"):
				default:
				}
			}()
		}
	}()
	dir := haproxytest.ShortDir(t)
	old := fmt.Sprintf("%sbackend P1\n    option httpchk HEAD /healthz HTTP/1.1\\r\\nHost:\\ www.example.com\n"+
		"    http-check expect rstatus 200\n    server m1 %s check inter 200ms\n",
		haproxytest.Preamble(100, dir+"/stats.sock"), member.Addr())
	cfg, n := splitHTTPCheckHeaders([]byte(old))
	if n != 1 {
		t.Fatalf("%d lines rewritten, want 1", n)
	}
	haproxytest.Start(t, haproxytest.Options{Config: string(cfg), Dir: dir})
	select {
	case head := <-asked:
		lines := strings.Split(head, "|")
		if lines[0] != "HEAD /healthz HTTP/1.1" {
			t.Errorf("request line %q, want HEAD /healthz HTTP/1.1", lines[0])
		}
		hosts := 0
		for _, l := range lines[1:] {
			if name, value, _ := strings.Cut(l, ":"); strings.EqualFold(name, "host") {
				hosts++
				if strings.TrimSpace(value) != "www.example.com" {
					t.Errorf("Host %q, want www.example.com", value)
				}
			}
		}
		if hosts != 1 {
			t.Errorf("%d Host headers in %q, want 1", hosts, lines)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no health check reached the member in 30 s")
	}
}
