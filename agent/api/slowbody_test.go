package api

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// An uploader that sends its body slowly does not hold the mutation lock
// while it does: another mutation goes through meanwhile, and the slow
// one is cut off at the request budget.
func TestSlowUploadDoesNotHoldTheLock(t *testing.T) {
	f := newFake()
	budget := 800 * time.Millisecond
	srv := httptest.NewServer(NewHandler(f, zaptest.NewLogger(t), Options{Budget: budget}))
	defer srv.Close()

	// The slow uploader announces 1000 bytes and sends 10.
	slow, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fmt.Fprintf(slow, "PUT /1.0/loadbalancer/amp/lb1/haproxy HTTP/1.1\r\nHost: amp\r\nContent-Length: 1000\r\n\r\n0123456789")
	// Let the server take the slow request in before the second one.
	waitServerSawRequest(t, slow)

	start := time.Now()
	req, _ := http.NewRequest("PUT", srv.URL+"/1.0/config", strings.NewReader("[DEFAULT]\n"))
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("a mutation behind a slow upload: %d %s after %v", resp.StatusCode, body, time.Since(start))
	}

	// The slow one is answered 400 once its budget is spent.
	slow.SetReadDeadline(time.Now().Add(10 * time.Second))
	answer, _ := io.ReadAll(io.LimitReader(slow, 4096))
	if !strings.HasPrefix(string(answer), "HTTP/1.1 400") {
		t.Fatalf("the stalled upload was answered %q", answer)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.calls {
		if strings.HasPrefix(c, "upload") {
			t.Fatalf("a partial body reached the service: %q", c)
		}
	}
}

// waitServerSawRequest gives the server a moment to read the request
// head: the body read (and, before the fix, the lock) starts then. The
// connection is polled, not slept on: a server that answered at once
// would show up here.
func waitServerSawRequest(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	buf := make([]byte, 1)
	if n, _ := c.Read(buf); n > 0 {
		t.Fatalf("answered before the body was sent: %q", buf)
	}
	c.SetReadDeadline(time.Time{})
}
