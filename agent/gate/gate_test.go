package gate

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/amphora-agent/amphora-agent/agent/acceptretry/acceptretrytest"
	"github.com/amphora-agent/amphora-agent/certs/devpki"
)

type pki struct{ server, client *tls.Config }

func newPKI(t *testing.T) pki {
	t.Helper()
	ca, err := devpki.NewAuthority("ca")
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := ca.Server("amp")
	cli, _ := ca.Client("controller")
	sc, err := tls.X509KeyPair(srv.Combined(), srv.Combined())
	if err != nil {
		t.Fatal(err)
	}
	cc, err := tls.X509KeyPair(cli.Combined(), cli.Combined())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return pki{
		server: &tls.Config{Certificates: []tls.Certificate{sc}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool},
		client: &tls.Config{Certificates: []tls.Certificate{cc}, RootCAs: pool, ServerName: "amp"},
	}
}

func listen(t *testing.T, opts Options) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(ln, opts)
	t.Cleanup(func() { l.Close(); l.Wait() })
	return l
}

// acceptOne hands out the next connection l accepts.
func acceptOne(l *Listener) <-chan net.Conn {
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			accepted <- c
		}
	}()
	return accepted
}

// closedByPeer waits for c to be closed from the other side.
func closedByPeer(c net.Conn, within time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(within))
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, io.EOF) || (err != nil && !isTimeout(err))
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Beyond MaxPending the oldest handshake in progress is dropped, so a new
// client is served however many idle connections came before it; and only
// connections that completed mutual TLS are handed out.
func TestOldestPendingHandshakeMakesRoom(t *testing.T) {
	p := newPKI(t)
	l := listen(t, Options{TLS: p.server, MaxPending: 3, HandshakeTimeout: time.Minute})
	var idle []net.Conn
	for i := 0; i < 5; i++ {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	// Five idle connections for three places: the first two go.
	for i, c := range idle[:2] {
		if !closedByPeer(c, 5*time.Second) {
			t.Fatalf("idle connection %d still open beyond the bound", i)
		}
	}

	// A controller connecting now is handed out at once.
	done := make(chan error, 1)
	go func() {
		c, err := tls.Dial("tcp", l.Addr().String(), p.client)
		if err == nil {
			_, err = c.Write([]byte("ping"))
			defer c.Close()
		}
		done <- err
	}()
	accepted := acceptOne(l)
	select {
	case c := <-accepted:
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("read %q %v", buf, err)
		}
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("a controller behind idle connections was not accepted")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The newest idle ones were kept until the controller pushed one out.
	if closedByPeer(idle[4], 100*time.Millisecond) {
		t.Fatal("the newest idle connection was dropped instead of the oldest")
	}
}

// Accepts that fail because the agent is out of file descriptors
// (EMFILE) are retried with backoff, each logged: the API keeps serving
// once descriptors are free again.
func TestFailedAcceptsAreRetried(t *testing.T) {
	p := newPKI(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	failing := acceptretrytest.FailFirst(ln, 4)
	core, logs := observer.New(zap.WarnLevel)
	l := New(failing, Options{TLS: p.server, Log: zap.New(core)})
	t.Cleanup(func() { l.Close(); l.Wait() })
	done := make(chan error, 1)
	go func() {
		c, err := tls.Dial("tcp", l.Addr().String(), p.client)
		if err == nil {
			err = c.Handshake()
			c.Close()
		}
		done <- err
	}()
	accepted := acceptOne(l)
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(10 * time.Second):
		t.Fatalf("no connection handed out after %d failed accepts", failing.Failed())
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if failing.Failed() != 4 {
		t.Fatalf("%d accepts failed, want 4", failing.Failed())
	}
	if n := logs.FilterMessage("accept failed; retrying").Len(); n != 4 {
		t.Fatalf("%d lines about failed accepts, want 4: %v", n, logs.All())
	}
}

// A client without a certificate never reaches Accept, and failures are
// logged at most once per LogEvery.
func TestFailedHandshakesStayOutside(t *testing.T) {
	p := newPKI(t)
	l := listen(t, Options{TLS: p.server, LogEvery: time.Hour})
	for i := 0; i < 20; i++ {
		c, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{RootCAs: p.client.RootCAs, ServerName: "amp"})
		if err == nil {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			c.Read(make([]byte, 1))
			c.Close()
		}
	}
	got := acceptOne(l)
	select {
	case c := <-got:
		t.Fatalf("a connection without a client certificate was handed out: %v", c.RemoteAddr())
	case <-time.After(200 * time.Millisecond):
	}
	// The last failure may be recorded just after its client saw it.
	held := func() int { l.logMu.Lock(); defer l.logMu.Unlock(); return l.suppressed }
	for deadline := time.Now().Add(5 * time.Second); held() != 19 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := held(); n != 19 {
		t.Fatalf("%d failures held back from the log, want 19", n)
	}
}

// net/http's own answers for unreadable requests, byte for byte as it
// writes them, become the JSON of ErrorBody; anything else passes as is.
func TestRewriteOfNetHTTPErrorAnswers(t *testing.T) {
	const headers = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"
	c := &Conn{errorBody: func(code int, reason, desc string) []byte {
		return []byte(fmt.Sprintf(`{"code":%d,"reason":%q,"desc":%q}`, code, reason, desc))
	}}
	cases := []struct{ in, want string }{
		{"HTTP/1.1 400 Bad Request" + headers + "400 Bad Request",
			`{"code":400,"reason":"Bad Request","desc":""}`},
		{"HTTP/1.1 431 Request Header Fields Too Large" + headers + "431 Request Header Fields Too Large",
			`{"code":431,"reason":"Request Header Fields Too Large","desc":""}`},
		{"HTTP/1.1 400 Bad Request: missing required Host header" + headers + "400 Bad Request: missing required Host header",
			`{"code":400,"reason":"Bad Request","desc":"missing required Host header"}`},
		{"HTTP/1.1 501 Not Implemented" + headers + "Unsupported transfer encoding",
			`{"code":501,"reason":"Not Implemented","desc":"Unsupported transfer encoding"}`},
		{"HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nDate: Mon, 30 Nov 2026 16:00:00 GMT\r\nContent-Length: 0\r\n\r\n",
			`{"code":417,"reason":"Expectation Failed","desc":""}`},
	}
	for _, tc := range cases {
		out, ok := c.rewrite([]byte(tc.in))
		if !ok {
			t.Errorf("not rewritten: %q", tc.in)
			continue
		}
		head, body, _ := strings.Cut(string(out), "\r\n\r\n")
		if body != tc.want || !strings.Contains(head, "\r\nContent-Type: application/json\r\n") ||
			!strings.Contains(head, fmt.Sprintf("\r\nContent-Length: %d", len(body))) || !strings.HasPrefix(head, tc.in[:12]) {
			t.Errorf("%q became %q", tc.in, out)
		}
	}
	for _, in := range []string{
		"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=UTF-8\r\n\r\nHTTP/1.1 400 Bad Request",
		// A body chunk that quotes an error answer, with more after it.
		"HTTP/1.1 400 Bad Request" + headers + "400 Bad Request\nglobal\n",
		"HTTP/1.1 417 Expectation Failed\r\nContent-Length: 0\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",
	} {
		if out, ok := c.rewrite([]byte(in)); ok {
			t.Errorf("%q rewritten to %q", in, out)
		}
	}
}
