package api_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/api"
	"github.com/amphora-agent/amphora-agent/agent/gate"
	"github.com/amphora-agent/amphora-agent/certs/devpki"
)

// The answers net/http writes itself for a request it cannot read (the
// five codes UnreadableRequestBody describes; 400 both bare and with
// net/http's reason), as the agent serves them: a real http.Server behind
// the gate, the gate's ErrorBody the agent's, each request sent raw over
// TLS and the whole answer compared byte for byte. The gate recognises net/http's
// answers by their exact bytes (package gate, rewrite); a Go release that
// writes them otherwise fails here, in the unit tier, and not only in
// the system tier's TestHostileHTTP, which needs root.
func TestGateRewritesNetHTTPAnswers(t *testing.T) {
	const maxHeaderBytes = 1 << 10
	addr, client := gatedServer(t, maxHeaderBytes)
	// net/http reads up to 4 KiB past MaxHeaderBytes before it gives up.
	tooLarge := "X-Big: " + strings.Repeat("x", maxHeaderBytes+8<<10) + "\r\n"
	cases := []struct {
		name, request string
		code          int
		reason, text  string
	}{
		{"broken request line", "GARBAGE\r\n\r\n", 400, "Bad Request",
			"The browser (or proxy) sent a request that this server could not understand."},
		{"no Host", "GET / HTTP/1.1\r\n\r\n", 400, "Bad Request",
			"The browser (or proxy) sent a request that this server could not understand. (missing required Host header)"},
		{"header block over the limit", "GET / HTTP/1.1\r\nHost: amp\r\n" + tooLarge + "\r\n", 431, "Request Header Fields Too Large",
			"One or more header fields exceeds the maximum size."},
		{"unknown transfer encoding", "PUT /1.0/config HTTP/1.1\r\nHost: amp\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "Not Implemented",
			"The server does not support the action requested by the browser. (Unsupported transfer encoding)"},
		{"unknown expectation", "PUT /1.0/config HTTP/1.1\r\nHost: amp\r\nExpect: magic\r\nContent-Length: 1\r\n\r\nx", 417, "Expectation Failed",
			"The server could not meet the requirements of the Expect header"},
		{"HTTP/2.0 request line", "GET / HTTP/2.0\r\nHost: amp\r\n\r\n", 505, "HTTP Version Not Supported",
			"The server does not support the HTTP protocol version used in the request. (unsupported protocol version)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := `{"error":"` + strconv.Itoa(c.code) + " " + c.reason + ": " + c.text + `","http_code":` + strconv.Itoa(c.code) + "}"
			want := "HTTP/1.1 " + strconv.Itoa(c.code) + " " + c.reason + "\r\n" +
				"Content-Type: application/json\r\nConnection: close\r\n" +
				"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
			if got := exchange(t, addr, client, c.request); got != want {
				t.Errorf("answer\n%q\nwant\n%q", got, want)
			}
		})
	}
}

// gatedServer serves, until the test ends, an http.Server with the given
// header limit behind a gate with the agent's ErrorBody, on loopback. Its
// handler fails the test: none of these requests may reach it.
func gatedServer(t *testing.T, maxHeaderBytes int) (string, *tls.Config) {
	t.Helper()
	ca, issued, err := devpki.Listener("amp")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(issued.Combined(), issued.Combined())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	front := gate.New(ln, gate.Options{
		TLS:       &tls.Config{Certificates: []tls.Certificate{pair}},
		ErrorBody: api.UnreadableRequestBody,
	})
	var handled atomic.Int32
	srv := &http.Server{
		Handler:        http.HandlerFunc(func(http.ResponseWriter, *http.Request) { handled.Add(1) }),
		MaxHeaderBytes: maxHeaderBytes,
	}
	served := make(chan struct{})
	go func() { srv.Serve(front); close(served) }()
	t.Cleanup(func() {
		srv.Close()
		<-served
		front.Wait()
		if n := handled.Load(); n != 0 {
			t.Errorf("%d unreadable requests reached the handler", n)
		}
	})
	return ln.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "amp"}
}

// exchange sends request on a new connection and returns all the server
// sent before it closed the connection.
func exchange(t *testing.T, addr string, client *tls.Config, request string) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, client)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	// Written while the answer is read: the server answers an oversized
	// header block before it has read all of it.
	go io.WriteString(c, request)
	answer, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading the answer: %v (after %q)", err, answer)
	}
	return string(answer)
}
